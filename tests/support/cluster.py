"""A real Redis Cluster of 3 masters on free loopback ports, for tests and benchmarks.

``start_cluster()`` starts 3 ``redis-server --cluster-enabled yes`` processes and joins
them with ``redis-cli --cluster create``; ``reshard()`` moves slots with
``redis-cli --cluster reshard``. With ``tls``, the nodes listen with TLS only (the
cluster bus too).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field

from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from tests.support.servers import RedisServer, TLSFiles

REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    for _ in range(200):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port + 10000 > 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair for a cluster node")


def cluster_caches(urls: list[str]) -> dict:
    """A CACHES entry for django-redis on a cluster (django_gcra's ClusterClient)."""
    return {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": list(urls),
            "OPTIONS": {"CLIENT_CLASS": "django_gcra.backends.cluster.ClusterClient"}}


@dataclass
class Cluster:
    nodes: list[RedisServer] = field(default_factory=list)
    tls: TLSFiles | None = None

    def _tls_kwargs(self) -> dict:
        return {"ssl": True, "ssl_ca_certs": self.tls.ca, "ssl_cert_reqs": "required"} if self.tls else {}

    @property
    def urls(self) -> list[str]:
        return [f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{n.port}" for n in self.nodes]

    def caches(self) -> dict:
        """A CACHES entry for the cluster (with ``tls``: the CA required, in the pool kwargs)."""
        caches = cluster_caches(self.urls)
        if self.tls:
            caches["OPTIONS"]["CONNECTION_POOL_KWARGS"] = {"ssl_ca_certs": self.tls.ca, "ssl_cert_reqs": "required"}
        return caches

    def client(self) -> RedisCluster:
        return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", n.port) for n in self.nodes], **self._tls_kwargs())

    def node_ids(self) -> dict[int, str]:
        return {n.port: n.client().execute_command("CLUSTER", "MYID").decode() for n in self.nodes}

    def owner(self, slot: int) -> int:
        """The port of the master serving ``slot``, as the first node sees it."""
        for start, end, master, *_ in self.nodes[0].client().execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(master[1])
        raise LookupError(slot)

    def wait_ok(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            infos = [n.client().execute_command("CLUSTER", "INFO").decode() for n in self.nodes]
            if all("cluster_state:ok" in i and "cluster_slots_assigned:16384" in i for i in infos):
                return
            time.sleep(0.05)
        raise RuntimeError("cluster did not become ok")

    def reshard(self, from_port: int, to_port: int, slots: int) -> None:
        ids = self.node_ids()
        subprocess.run([REDIS_CLI, "--cluster", "reshard", f"127.0.0.1:{from_port}", "--cluster-from", ids[from_port],
                        "--cluster-to", ids[to_port], "--cluster-slots", str(slots), "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def start_cluster(masters: int = 3, tls: TLSFiles | None = None) -> Cluster:
    cluster = Cluster(tls=tls)
    over_tls = ["--tls-cluster", "yes", "--tls-replication", "yes"] if tls else []
    cli_tls = ["--tls", "--cacert", tls.ca] if tls else []
    try:
        for _ in range(masters):
            server = RedisServer(free_cluster_port(), ["--cluster-enabled", "yes", "--cluster-config-file",
                                                       "nodes.conf", "--cluster-node-timeout", "2000", *over_tls],
                                 tls=tls)
            cluster.nodes.append(server.start())
        subprocess.run([REDIS_CLI, *cli_tls, "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in cluster.nodes],
                        "--cluster-yes"], check=True, capture_output=True, timeout=60)
        cluster.wait_ok()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def tenants_in_slots(slots: range, count: int, prefix: str = "t") -> list[str]:
    """``count`` tenant names whose hash tag lands in ``slots``."""
    found, i = [], 0
    while len(found) < count and i < 10_000_000:
        name = f"{prefix}{i}"
        if key_slot(name.encode()) in slots:
            found.append(name)
        i += 1
    return found


def hammer(urls: list[str], gcra: dict, policy: str, descriptors: dict, start_at: float, duration: float,
           max_calls: int = 200_000) -> tuple[int, int, float, float, int]:
    """tests.support.workers.hammer on the cluster; also returns the number of fallback decisions."""
    from tests.support.workers import setup_django, timed_loop

    setup_django(None, gcra, caches={"default": cluster_caches(urls)})
    from django_gcra import decide

    decide(policy, descriptors, cost=0)  # connect and load the topology before the clock starts
    fallbacks = 0

    def admit() -> bool:
        nonlocal fallbacks
        decision = decide(policy, descriptors)
        fallbacks += decision.fallback
        return decision.allowed

    return (*timed_loop(admit, start_at, duration, max_calls), fallbacks)

