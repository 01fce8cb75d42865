"""A real Sentinel deployment on free loopback ports: a master, a replica and three
``redis-sentinel`` processes with short failure-detection timings, for tests and benchmarks.
With ``tls``, every one of them listens with TLS only (replication and the sentinels' own
links too)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.servers import STORE, RedisServer, TLSFiles, free_port, start_redis, valkey_server

REDIS_SENTINEL = shutil.which("redis-sentinel") or "/usr/bin/redis-sentinel"


def sentinel_command(conf: Path) -> list[str]:
    """A sentinel on ``conf``: redis-sentinel, or valkey-server in sentinel mode (GCRA_STORE=valkey)."""
    return [valkey_server(), str(conf), "--sentinel"] if STORE == "valkey" else [REDIS_SENTINEL, str(conf)]
SERVICE = "mymaster"
DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS = 300, 2000


@dataclass
class SentinelSet:
    master: RedisServer
    replica: RedisServer
    sentinel_ports: list[int] = field(default_factory=list)
    processes: list[subprocess.Popen] = field(default_factory=list)
    workdir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="gcra-sentinel-"))
    tls: TLSFiles | None = None

    def _tls_kwargs(self) -> dict:
        return {"ssl": True, "ssl_ca_certs": self.tls.ca, "ssl_cert_reqs": "required"} if self.tls else {}

    def caches(self) -> dict:
        """A CACHES entry for django-redis's SentinelClient on this deployment (with ``tls``:
        TLS to the sentinels and to the master, the CA required, as redis-py takes it)."""
        options = {"CLIENT_CLASS": "django_redis.client.SentinelClient",
                   "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
                   "SENTINELS": [("127.0.0.1", p) for p in self.sentinel_ports],
                   "SENTINEL_KWARGS": {"socket_timeout": 0.2, **self._tls_kwargs()}}
        if self.tls:
            options["CONNECTION_POOL_KWARGS"] = self._tls_kwargs()
        return {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": f"redis://{SERVICE}/0", "OPTIONS": options}

    def sentinel(self, index: int = 0) -> redis.Redis:
        return redis.Redis(port=self.sentinel_ports[index], socket_timeout=1, **self._tls_kwargs())

    def master_port(self) -> int:
        return int(self.sentinel().sentinel_get_master_addr_by_name(SERVICE)[1])

    def wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"sentinel harness: timed out waiting for {what}")

    def wait_ready(self) -> None:
        """Every sentinel sees the master, the replica and the two other sentinels."""
        def ready() -> bool:
            for i in range(len(self.sentinel_ports)):
                info = self.sentinel(i).sentinel_master(SERVICE)
                if info["num-slaves"] < 1 or info["num-other-sentinels"] < len(self.sentinel_ports) - 1:
                    return False
            return True

        self.wait(ready, 30, "the sentinels to discover each other")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                process.wait(5)
        self.master.stop()
        self.replica.stop()


def start_sentinels(count: int = 3, tls: TLSFiles | None = None) -> SentinelSet:
    if tls is None:
        master = start_redis()
        replica = start_redis("--replicaof", "127.0.0.1", str(master.port))
    else:
        master = RedisServer(free_port(), ["--tls-replication", "yes"], tls=tls).start()
        try:
            replica = RedisServer(free_port(), ["--tls-replication", "yes", "--replicaof", "127.0.0.1",
                                                str(master.port)], tls=tls).start()
        except BaseException:
            master.stop()
            raise
    group = SentinelSet(master, replica, tls=tls)
    try:
        group.wait(lambda: replica.client().info("replication")["master_link_status"] == "up", 20,
                   "the replica to sync")
        for _ in range(count):
            port = free_port()
            conf = Path(group.workdir) / f"sentinel-{port}.conf"  # sentinel rewrites its file: keep it writable
            listen = (f"port 0\ntls-port {port}\ntls-cert-file {tls.cert}\ntls-key-file {tls.key}\n"
                      f"tls-ca-cert-file {tls.ca}\ntls-replication yes\ntls-auth-clients no\n") if tls else f"port {port}\n"
            conf.write_text(f"{listen}bind 127.0.0.1\ndir {group.workdir}\n"
                            f"sentinel monitor {SERVICE} 127.0.0.1 {master.port} 2\n"
                            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
                            f"sentinel parallel-syncs {SERVICE} 1\n")
            group.processes.append(subprocess.Popen(sentinel_command(conf), stdout=subprocess.DEVNULL,
                                                    stderr=subprocess.DEVNULL))
            group.sentinel_ports.append(port)
        group.wait_ready()
    except BaseException:
        group.stop()
        raise
    return group
