"""The stores as a profile deploys them: which server each backend stores into, where a client
reaches it, and bringing them up and down.

Under ``loopback`` these are the project's usual servers (127.0.0.1). Under a profile with links,
each store gets a namespace (:class:`NetNamespace`, slot ``profile.slot_base + i``) with its
server and a Toxiproxy inside::

    client (this host) --veth, tc HTB--> 10.211.s.2:<port>  Toxiproxy: delay, per-connection rate
                                                     --> 10.211.s.2:<port + 10000>  the server

Clients use the public port; readiness probes and admin work (nodetool inside the namespace)
use the server's own. Servers of a profile keep their state in ``$ASGARD_HOME/run/net/<profile>/``.
"""
from __future__ import annotations

from typing import Any

from ..paths import run_dir
from ..process import ManagedServer
from .namespace import NetNamespace
from ..stores.backends import server_of
from .profile import LINKED_BACKENDS, NetworkProfile, applied_mbit, load_profile

#: the server behind a proxy listens this much above the port clients use
SERVER_PORT_OFFSET = 10000
PUBLIC_PORTS = {"cassandra": 9042, "redis": 6380, "s3": 9000}


class Deployment:
    """Servers and client endpoints of every store under ``profile``.

    Example::

        cloud = Deployment("cloud")
        cloud.up()                                   # namespaces, links, servers, proxies
        store = open_store("s3", **cloud.store_kwargs("s3"))   # 50 ms away, as S3 is
        cloud.down()                                 # nothing left: servers, proxies, namespaces
    """

    def __init__(self, profile: str | NetworkProfile = "loopback", cassandra_heap: str | None = None):
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        self.cassandra_heap = cassandra_heap

    @property
    def emulated(self) -> bool:
        return self.profile.emulated

    def _linked(self, backend: str) -> bool:
        return self.profile.link(backend) is not None

    def namespace(self, backend: str) -> NetNamespace:
        return NetNamespace(self.profile.slot(backend))

    def _workdir(self, kind: str):
        return run_dir("net", self.profile.name, kind)

    # --- servers --------------------------------------------------------------------------
    def server(self, backend: str) -> ManagedServer | None:
        """The server ``backend`` stores into (None for local files)."""
        kind = server_of(backend)
        if kind not in LINKED_BACKENDS:
            return None
        linked = self._linked(kind)
        ns = self.namespace(kind) if linked else None
        port = PUBLIC_PORTS[kind] + (SERVER_PORT_OFFSET if linked else 0)
        if kind == "cassandra":
            from ..cassandra import CassandraNode

            if not linked:
                return CassandraNode(heap=self.cassandra_heap)
            return CassandraNode(heap=self.cassandra_heap, native_port=port, address=ns.address, netns=ns.name,
                                 workdir=self._workdir("cassandra"))
        if kind == "redis":
            from ..redis import RedisServer

            if not linked:
                return RedisServer()
            return RedisServer(host=ns.address, port=port, netns=ns.name, workdir=self._workdir("redis"))
        from ..minio import MinioServer

        if not linked:
            return MinioServer()
        return MinioServer(host=ns.address, port=port, console_port=port + 1, netns=ns.name,
                           workdir=self._workdir("minio"))

    def proxy(self, backend: str):
        """The Toxiproxy in front of ``backend`` (None on a plain loopback)."""
        from .toxiproxy import ToxiproxyServer

        kind = server_of(backend)
        if kind not in LINKED_BACKENDS or not self._linked(kind):
            return None
        ns = self.namespace(kind)
        return ToxiproxyServer(self._workdir(f"toxiproxy-{kind}"), host=ns.address, netns=ns.name)

    # --- where clients connect ---------------------------------------------------------------
    def host(self, backend: str) -> str:
        kind = server_of(backend)
        if kind is None:
            return "127.0.0.1"
        return self.namespace(kind).address if self._linked(kind) else "127.0.0.1"

    def store_kwargs(self, backend: str) -> dict[str, Any]:
        """Keyword arguments of :func:`asgard.resources.stores.registry.open_store` (and of the IO
        manager of ``backend``) that reach the store through its link."""
        kind = server_of(backend)
        if kind not in LINKED_BACKENDS:
            return {}
        if not self._linked(kind):
            return self.server(kind).client_options() if kind == "cassandra" else {}
        host, port = self.host(kind), PUBLIC_PORTS[kind]
        if kind == "cassandra":
            return {"contact_points": [host], "port": port}
        if kind == "redis":
            return {"host": host, "port": port}
        return {"endpoint_url": f"http://{host}:{port}"}

    # --- lifecycle -----------------------------------------------------------------------------
    def up(self, backends: tuple[str, ...] = LINKED_BACKENDS) -> dict[str, float]:
        """Namespaces and links, servers and proxies for ``backends``; idempotent. Returns the
        seconds each server took to answer."""
        seconds = {}
        for kind in dict.fromkeys("s3" if b == "s3_stock" else b for b in backends):
            if kind not in LINKED_BACKENDS:
                continue
            server = self.server(kind)
            if self._linked(kind):
                ns, link = self.namespace(kind), self.profile.link(kind)
                if not ns.exists():
                    server.stop()  # a server of a namespace that is gone cannot be reached
                    ns.create(rate_mbit=applied_mbit(link.rate_mbit))
                seconds[kind] = server.start()
                proxy = self.proxy(kind)
                proxy.start()
                proxy.expose(kind, listen=f"{ns.address}:{PUBLIC_PORTS[kind]}",
                             upstream=f"{ns.address}:{PUBLIC_PORTS[kind] + SERVER_PORT_OFFSET}", link=link)
            else:
                seconds[kind] = server.start()
        return seconds

    def down(self, backends: tuple[str, ...] = LINKED_BACKENDS) -> None:
        """Stop servers and proxies of ``backends`` and delete their namespaces (links and qdiscs go
        with them). Under loopback this stops the usual servers."""
        for kind in dict.fromkeys("s3" if b == "s3_stock" else b for b in backends):
            if kind not in LINKED_BACKENDS:
                continue
            for server in (self.proxy(kind), self.server(kind)):
                if server is not None:
                    server.stop()
            if self._linked(kind):
                self.namespace(kind).delete()

    def status(self) -> list[dict]:
        rows = []
        for kind in LINKED_BACKENDS:
            server = self.server(kind)
            row = server.status()
            link = self.profile.link(kind)
            row["profile"] = self.profile.name
            if link is not None:
                row.update(endpoint=f"{self.host(kind)}:{PUBLIC_PORTS[kind]}", link=link.describe(),
                           namespace=self.namespace(kind).name)
            rows.append(row)
        return rows

