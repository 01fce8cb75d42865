"""Decisions as an ACL user on database 3, over TLS and without, through the public API:
the cache's LOCATION is ``rediss://user:password@127.0.0.1:port/3?ssl_cert_reqs=required&ssl_ca_certs=...``
(tests/conftest.py: a CA made by the fixture, an ACL user limited to ``rl:*`` keys and
without dangerous or admin commands), or ``redis://user:password@...:port/3`` (TLS is
skipped on a valkey-server built without it). Sync, async, composite, leased and concurrency-slot
decisions are exact and never a fallback; a wrong password or an unknown CA is a fallback
(``on_failure``), never a silent pass; ``gcra_check`` passes as that user."""

from __future__ import annotations

import asyncio
import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_gcra import adecide, decide
from django_gcra.engine import current
from tests.conftest import ACL_DB, ACL_PASSWORD, ACL_USER, acl_location
from tests.support.servers import make_tls

pytestmark = pytest.mark.redis

POLICIES = {
    "api": {"limits": [{"name": "tenant", "key": ["tenant"], "rate": "60/h", "burst": 6},
                       {"name": "user", "key": ["tenant", "user"], "rate": "60/h", "burst": 3}]},
    "search": {"limits": [{"name": "ip", "key": ["ip"], "rate": "60/h", "burst": 20}],
               "lease": {"size": 5, "ttl": 30.0}},
    "run": {"concurrency": [{"name": "running", "key": ["tenant"], "max": 2, "ttl": 30}]},
    "login": {"limits": [{"name": "ip", "key": ["ip"], "rate": "60/h", "burst": 2}], "on_failure": "closed"},
}
LIMITER = {"DESCRIPTORS": {"tenant": "tests.support.descriptors.tenant_of"}, "POLICIES": POLICIES,
           "AUDIT": {"ENABLED": False}}


@pytest.fixture
def store(acl_redis, gcra_settings):
    gcra_settings(**LIMITER)
    return acl_redis


def keys(admin) -> list[str]:
    return sorted(k.decode() for k in admin.keys("*"))


def test_the_user_is_restricted(store):
    me = store.server.client(username=ACL_USER, password=ACL_PASSWORD, db=ACL_DB)
    assert me.acl_whoami() == ACL_USER
    with pytest.raises(Exception, match="(?i)no permissions"):
        me.flushall()
    with pytest.raises(Exception, match="(?i)no permissions"):
        me.set("not-ours", 1)  # outside rl:*


def test_the_tls_server_speaks_only_tls(tls_server):
    plain = tls_server.client(ssl=False, socket_timeout=1)
    with pytest.raises(Exception):
        plain.ping()


def test_sync_composite_decisions_are_exact(store):
    decisions = [decide("api", {"tenant": "acme", "user": "7"}) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert not any(d.fallback for d in decisions)
    assert [d.remaining for d in decisions[:3]] == [2, 1, 0] and decisions[3].limit == "user"
    other = decide("api", {"tenant": "acme", "user": "8"})  # the tenant's own limit: 6, 3 spent
    assert other.allowed and not other.fallback and other.remaining == 2
    # Written by the ACL user in database 3, under its own prefix; database 0 untouched.
    assert keys(store) == ["rl:{acme}:api:tenant:acme", "rl:{acme}:api:user:acme:7", "rl:{acme}:api:user:acme:8"]


def test_async_decisions_are_exact(store):
    async def run():
        return [await adecide("api", {"tenant": "beta", "user": "1"}) for _ in range(4)]

    decisions = asyncio.run(run())
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert not any(d.fallback for d in decisions) and decisions[3].retry_after > 0
    assert "rl:{beta}:api:user:beta:1" in keys(store)


def test_leased_decisions_admit_exactly_the_burst(store):
    def evalsha_calls() -> int:
        return store.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)

    before = evalsha_calls()
    decisions = [decide("search", {"ip": "203.0.113.5"}) for _ in range(30)]
    assert [d.allowed for d in decisions] == [True] * 20 + [False] * 10
    assert not any(d.fallback for d in decisions)
    assert evalsha_calls() - before < 30  # leases: fewer store calls than decisions


def test_concurrency_slots_are_taken_and_released(store):
    first, second = decide("run", {"tenant": "t"}), decide("run", {"tenant": "t"})
    third = decide("run", {"tenant": "t"})
    assert first.allowed and second.allowed and not third.allowed and not third.fallback
    assert store.zcard("rl:{t}:run:running~conc:t") == 2
    first.release()
    current().stores.backend().keeper.flush()  # the release is pipelined off the request path, as the ACL user
    assert store.zcard("rl:{t}:run:running~conc:t") == 1
    again = decide("run", {"tenant": "t"})
    assert again.allowed and not again.fallback
    second.release()
    again.release()


def test_async_concurrency_slots(store):
    async def run():
        a, b = await adecide("run", {"tenant": "u"}), await adecide("run", {"tenant": "u"})
        c = await adecide("run", {"tenant": "u"})
        await a.arelease()
        await asyncio.to_thread(current().stores.backend().keeper.flush)  # the release is pipelined off the request path
        d = await adecide("run", {"tenant": "u"})
        await b.arelease()
        await d.arelease()
        return a, b, c, d

    a, b, c, d = asyncio.run(run())
    assert (a.allowed, b.allowed, c.allowed, d.allowed) == (True, True, False, True)
    assert not any(x.fallback for x in (a, b, c, d))


def test_a_wrong_password_is_a_fallback_not_a_pass(store, settings):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": acl_location(store.server, password="wrong")}}
    denied = decide("login", {"ip": "198.51.100.1"})  # on_failure closed
    assert denied.fallback and not denied.allowed
    allowed = decide("api", {"tenant": "x", "user": "y"})  # on_failure open
    assert allowed.fallback and allowed.allowed
    assert keys(store) == []


def test_a_certificate_from_an_unknown_ca_is_a_fallback(tls_server, gcra_settings, settings, tmp_path):
    gcra_settings(**LIMITER)
    stranger = make_tls(str(tmp_path))  # another CA: the server's certificate does not verify against it
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": acl_location(tls_server, ca=stranger.ca)}}
    decision = decide("login", {"ip": "198.51.100.2"})
    assert decision.fallback and not decision.allowed
    assert tls_server.client(db=ACL_DB).dbsize() == 0


def test_gcra_check_passes_as_the_acl_user(store):
    out = StringIO()
    try:
        call_command("gcra_check", "--json", "--samples", "5", stdout=out)
    except Exception:
        raise AssertionError(out.getvalue()) from None
    report = json.loads(out.getvalue())
    assert report["ok"] is True, report
    (found,) = report["stores"]
    scheme = "rediss" if store.server.tls else "redis"
    assert found["endpoint"].startswith(f"{scheme}://127.0.0.1:") and ACL_PASSWORD not in out.getvalue()
    assert found["maxmemory_policy"] is None  # the user may not run CONFIG: noted, not a problem
    assert found["notes"] and "CONFIG GET refused" in found["notes"][0]


@pytest.mark.django_db
def test_an_override_saved_reaches_decisions_through_the_store(store, save):
    """The policy plane as the ACL user: saving an override stamps its version in the store
    (the user's own rl:* key), and the next decision applies it."""
    from django_gcra.overrides import version_key

    assert decide("api", {"tenant": "gamma", "user": "1"}).remaining == 2  # user: burst 3
    save(policy="api", limit="user", match={"tenant": "gamma"}, burst=10)
    assert store.get(version_key()) is not None
    decision = decide("api", {"tenant": "gamma", "user": "1"})
    assert decision.allowed and not decision.fallback and decision.limit == "tenant" and decision.remaining == 4
