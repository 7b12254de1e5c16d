"""A local Redis for the Redis baseline: Debian's ``/usr/bin/redis-server`` (installed by
``scripts/setup.sh``) on 127.0.0.1:6380, with its own config file in ``$ASGARD_HOME/run/redis``.

Port 6380, not 6379: 6379 may be held by the distribution's own ``redis-server`` service.
The config keeps nothing on disk (``save ""``, ``appendonly no``: the data is ephemeral and
has TTLs anyway), caps memory with ``maxmemory`` and ``noeviction`` (a full Redis refuses
writes with an OOM error instead of silently evicting another run's chunks), and keeps
``protected-mode yes``. If ``ASGARD_REDIS_PASSWORD`` is set it becomes ``requirepass``.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from ..paths import run_dir
from ..process import ManagedServer, ServerError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6380
DEFAULT_MAXMEMORY = "2gb"


def default_maxmemory() -> str:
    """DEFAULT_MAXMEMORY, or $ASGARD_REDIS_MAXMEMORY where it is set (read at each use, never at import)."""
    return os.environ.get("ASGARD_REDIS_MAXMEMORY") or DEFAULT_MAXMEMORY


PASSWORD_ENV = "ASGARD_REDIS_PASSWORD"
SYSTEM_BINARY = "/usr/bin/redis-server"


def redis_binary() -> str:
    """Debian's redis-server (or one on PATH); raises with the fix if it is not installed."""
    if os.access(SYSTEM_BINARY, os.X_OK):
        return SYSTEM_BINARY
    found = shutil.which("redis-server")
    if found:
        return found
    raise ServerError("redis-server is not installed: run scripts/setup.sh (or apt-get install redis-server)")


class RedisServer(ManagedServer):
    """One local Redis instance.

    Example::

        server = RedisServer()            # 127.0.0.1:6380, maxmemory 2gb (ASGARD_REDIS_MAXMEMORY)
        server.start()                    # idempotent; seconds until it answers PING
        server.client().dbsize()
        server.stop()

    Args:
        port: TCP port (6380 by default; 6379 is left to the distribution's service).
        maxmemory: Redis ``maxmemory`` (``"2gb"``, ``"512mb"`` or bytes); writes beyond it fail.
        password: ``requirepass``; ``None`` reads ``ASGARD_REDIS_PASSWORD`` (empty: no password).
        io_threads: Redis ``io-threads`` (socket I/O threads; 1 = Redis's default single thread).
        tls: serve TLS only, on ``port``, with a local CA and a certificate for ``host`` made in
            ``workdir/tls`` (:mod:`asgard.resources.cassandra.tls`); clients trust :attr:`ca_file`.
        netns: run in this network namespace (:mod:`asgard.resources.network`); ``host`` is then its address.
    """

    start_timeout = 30.0

    def __init__(
        self,
        port: int = DEFAULT_PORT,
        host: str = DEFAULT_HOST,
        maxmemory: str | int | None = None,
        password: str | None = None,
        io_threads: int = 1,
        numa_node: int | None = None,
        workdir: Path | None = None,
        tls: bool = False,
        netns: str | None = None,
    ):
        maxmemory = maxmemory or default_maxmemory()
        if not re.fullmatch(r"\d+([kmg]b?)?", str(maxmemory).lower()):
            raise ValueError(f"maxmemory {maxmemory!r} is not a Redis memory size (e.g. 2gb, 512mb, 1073741824)")
        super().__init__("redis", workdir or run_dir("redis"), numa_node, netns)
        self.host, self.port = host, port
        self.maxmemory = str(maxmemory).lower()
        self.password = password if password is not None else (os.environ.get(PASSWORD_ENV) or None)
        self.io_threads = io_threads
        self.tls = tls

    @property
    def ca_file(self) -> Path | None:
        """The CA certificate TLS clients trust (``ssl_ca_file``); None without TLS."""
        return self.workdir / "tls" / "ca.pem" if self.tls else None

    @property
    def config_file(self) -> Path:
        return self.workdir / "redis.conf"

    def config_text(self) -> str:
        lines = [
            "# written by resources/redis/server.py on every start; edit RedisServer's arguments instead",
            f"bind {self.host}",
            f"port {0 if self.tls else self.port}",  # with TLS, no plain-text port at all
            # in a namespace of asgard.resources.network the only way in is the /30 veth from this host,
            # which protected mode would refuse as "external"
            f"protected-mode {'no' if self.netns else 'yes'}",
            "daemonize no",
            'logfile ""',  # stdout, i.e. ManagedServer's server.log
            f"dir {self.workdir}",
            'save ""',
            "appendonly no",
            f"maxmemory {self.maxmemory}",
            "maxmemory-policy noeviction",
            # chunks are freed in the background when deleted or expired (UNLINK semantics)
            "lazyfree-lazy-expire yes",
            "lazyfree-lazy-server-del yes",
            "lazyfree-lazy-user-del yes",
            f"io-threads {self.io_threads}",
            "tcp-keepalive 60",
        ]
        if self.password:
            lines.append(f"requirepass {self.password}")
        if self.tls:
            d = self.workdir / "tls"
            lines += [f"tls-port {self.port}", f"tls-cert-file {d / 'node.pem'}", f"tls-key-file {d / 'node.key'}",
                      f"tls-ca-cert-file {d / 'ca.pem'}", "tls-auth-clients no"]
        return "\n".join(lines) + "\n"

    def prepare(self) -> None:
        redis_binary()
        if self.tls:
            from ..cassandra.tls import ensure_node_certificate

            ensure_node_certificate(self.workdir / "tls", self.host)
        self.config_file.write_text(self.config_text())
        self.config_file.chmod(0o600)  # it may hold requirepass

    def command(self) -> list[str]:
        return [redis_binary(), str(self.config_file)]

    def client(self, **kwargs):
        import redis

        if self.tls:
            kwargs.update(ssl=True, ssl_ca_certs=str(self.ca_file), ssl_check_hostname=True)
        return redis.Redis(host=self.host, port=self.port, password=self.password,
                           socket_connect_timeout=1.0, socket_timeout=5.0, **kwargs)

    def is_ready(self) -> bool:
        import redis

        try:
            with self.client() as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    @property
    def endpoint(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def status(self) -> dict:
        info = super().status()
        info["maxmemory"] = self.maxmemory
        if info["ready"]:
            try:
                with self.client() as client:
                    info["used_memory"] = client.info("memory").get("used_memory_human")
                    info["keys"] = client.dbsize()
            except Exception:
                pass
        return info
