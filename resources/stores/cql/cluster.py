"""Building a driver ``Cluster``: one function for every part of the project
(:func:`build_cluster`), TLS contexts, contact points as endpoints, the pre-opening cluster, and
the process's write-timestamp generator that a put pins for its resends."""
from __future__ import annotations

import contextlib
import functools
import os
import threading

from ..errors import StoreConfigError


def ssl_context(ca_file: str, certfile: str | None = None, keyfile: str | None = None,
                verify_hostname: bool = True):
    """A client :class:`ssl.SSLContext` that trusts only ``ca_file`` (not the system's CAs: a node's
    certificate comes from its own CA), with an optional client certificate, TLS 1.2 at least."""
    import ssl

    for name, path in (("ssl_ca_file", ca_file), ("ssl_certfile", certfile), ("ssl_keyfile", keyfile)):
        if path and not os.path.isfile(path):
            raise StoreConfigError(f"{name} {path!r} is not a readable file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname on
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_verify_locations(cafile=ca_file)
        if certfile:
            context.load_cert_chain(certfile, keyfile or None)
    except ssl.SSLError as exc:
        raise StoreConfigError(f"cannot load TLS files (ssl_ca_file={ca_file!r}, ssl_certfile={certfile!r}, "
                               f"ssl_keyfile={keyfile!r}): {exc}") from exc
    # the driver then passes each node's address as server_hostname: an IP must be in the SAN
    context.check_hostname = verify_hostname
    return context

def build_cluster(contact_points, port: int = 9042, *, username: str | None = None, password: str | None = None,
                  connect_timeout: float = 5.0, tls: tuple | None = None, admin: bool = False):
    """The one way the project builds a driver ``Cluster`` (the store's sessions, the node
    runtime's and the tuner's admin sessions alike): the same login, TLS, protocol, reconnection
    and write-timestamp settings everywhere. ``tls``: ``(ca_file, certfile, keyfile,
    verify_hostname)`` or None for plain. ``admin``: a session for schema changes and settings on
    the given hosts only -- the driver's own connection class, schema metadata on, no pre-opening;
    otherwise a store session, with the client's fast paths (:mod:`.transport`, :data:`.options.OPTIONS`)."""
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import (
        DCAwareRoundRobinPolicy, ExponentialReconnectionPolicy, RoundRobinPolicy, TokenAwarePolicy,
    )

    from .options import opts
    from .retry import ride_through_retry_policy

    contact_points = tuple(contact_points)
    auth = PlainTextAuthProvider(username=username, password=password or "") if username else None
    context = ssl_context(*tls) if tls else None
    common = dict(port=port, auth_provider=auth, connect_timeout=connect_timeout, ssl_context=context,
                  control_connection_timeout=connect_timeout,
                  # one generator for the process, which a put pins for its resends (pinned_timestamp)
                  timestamp_generator=TIMESTAMPS,
                  # a local node restarted by the tuner is back in seconds: the driver's default
                  # back-off (1 s doubling to 10 min) kept the session away for up to a minute
                  reconnection_policy=ExponentialReconnectionPolicy(base_delay=0.2, max_delay=5.0))
    if admin:
        # the driver's default policy, named: without one, a Cluster given contact points logs a
        # warning at every start (and its next major version refuses it)
        return Cluster(list(contact_points), protocol_version=opts().protocol_version,
                       execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(
                           load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy()))}, **common)
    from .transport import connection_class

    return cluster_class()(
        endpoints(contact_points, port),
        # an execution profile, not the legacy keywords the driver deprecates (and which would
        # refuse a user's add_execution_profile on this cluster)
        execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(
            load_balancing_policy=NearestReplicaFirst(RoundRobinPolicy()), retry_policy=ride_through_retry_policy())},
        protocol_version=opts().protocol_version,
        connection_class=connection_class(),
        # every step process connects afresh: skip what a step does not use. The full schema
        # (every keyspace's tables, read at connect) cost 50-60 ms of a ~80 ms connect here;
        # preparing on every host costs a round trip per host (a host without the statement
        # answers UNPREPARED and the driver prepares it there on first use).
        schema_metadata_enabled=False,
        prepare_on_all_hosts=False,
        # The driver asks for LZ4 frame compression whenever the lz4 package is importable;
        # our chunks are mostly incompressible (and the codec option compresses the rest once,
        # on the client), so the server compressed every response and decompressed every
        # request for nothing: 5-8% of its CPU samples in a read profile here.
        compression=opts().compression,
        **common,
    )


class PinnableTimestamps:
    """The driver's ``MonotonicTimestampGenerator``, except on a thread inside
    :func:`pinned_timestamp`, where every request gets the pinned write timestamp. A put pins one
    for its head and index rows, so that a request sent again after a failure (the direct
    connection lost after the node applied it; the driver's own retries; the store's ride-through)
    carries its original timestamp, and a newer write of the same path made in between stands."""

    def __init__(self):
        from cassandra.timestamps import MonotonicTimestampGenerator

        self._generator = MonotonicTimestampGenerator()
        self._local = threading.local()

    def __call__(self) -> int:
        pinned = getattr(self._local, "pinned", None)
        return pinned if pinned is not None else self._generator()

    @contextlib.contextmanager
    def pinned(self):
        """Pin a fresh timestamp on this thread for the block (nested: the outer one stands)."""
        if getattr(self._local, "pinned", None) is not None:
            yield self._local.pinned
            return
        self._local.pinned = self._generator()
        try:
            yield self._local.pinned
        finally:
            self._local.pinned = None


#: the write-timestamp generator of every Cluster the project builds
TIMESTAMPS = PinnableTimestamps()
pinned_timestamp = TIMESTAMPS.pinned


def endpoints(contact_points: tuple[str, ...], port: int) -> list:
    """The driver's contact points, an IP address as its endpoint (what the driver would resolve
    it to): the driver then calls no ``getaddrinfo`` for it, whose first call in a process
    imports the IDNA codec (2 ms of a fresh step's connect here). A host name stays a name, for
    the driver to resolve (to one or several addresses) as before."""
    import ipaddress

    from cassandra.connection import DefaultEndPoint

    out = []
    for host in contact_points:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            out.append(host)
        else:
            out.append(DefaultEndPoint(host, port))
    return out


def cluster_class():
    """The driver's ``Cluster``, which can open a connection to each contact point while its
    control connection starts (:meth:`preopen`): a fresh process's session then has its pool's
    first connection by the time the control connection has read the topology, instead of
    opening it afterwards (a TCP connect and a STARTUP, two round trips, off a step's first
    request). A pre-opened connection is exactly the one the pool would open (the same
    ``connection_factory``, so the same TLS, login and protocol settings); one that failed or
    that no pool took is closed, and the pool opens its own as before."""
    from concurrent.futures import Future

    from cassandra.cluster import Cluster

    class PreopeningCluster(Cluster):
        _preopened: dict | None = None

        preopened_futures: list = []

        def preopen(self) -> None:
            self.connection_class.initialize_reactor()
            self._preopened, self.preopened_futures = {}, []
            for endpoint in self.endpoints_resolved:
                future: Future = Future()

                def run(endpoint=endpoint, future=future):
                    try:
                        future.set_result(Cluster.connection_factory(self, endpoint))
                    except BaseException as exc:  # the pool tries again, and reports
                        future.set_exception(exc)

                self._preopened[endpoint] = future
                self.preopened_futures.append(future)
                threading.Thread(target=run, name="asgard-preopen", daemon=True).start()

        def connection_factory(self, endpoint, *args, **kwargs):
            preopened = self._preopened
            future = (preopened.pop(endpoint, None)
                      if preopened and not kwargs.get("is_control_connection") and not args else None)
            if future is not None:
                try:
                    conn = future.result(timeout=self.connect_timeout)
                except Exception:
                    conn = None
                if conn is not None and not (conn.is_closed or conn.is_defunct):
                    conn._on_orphaned_stream_released = kwargs.get("on_orphaned_stream_released")
                    return conn
            return super().connection_factory(endpoint, *args, **kwargs)

        def drop_preopened(self) -> None:
            """Close the pre-opened connections no pool took (now, or when they finish)."""
            preopened, self._preopened = self._preopened or {}, None
            while preopened:
                try:
                    _, future = preopened.popitem()  # atomic: a pool taking one at once gets None
                except KeyError:
                    break
                future.add_done_callback(lambda f: f.exception() is None and f.result().close())

    return PreopeningCluster


@functools.lru_cache(maxsize=1024)
def is_local_address(address: str) -> bool:
    """Whether ``address`` is one of this host's own (bindable here): its member of the ring, for a
    reader on a host the ring spans. Every loopback address is: a loopback ring keeps its order."""
    import socket

    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


@functools.cache
def nearest_replica_first_class():
    """:class:`NearestReplicaFirst`, made on first use (the driver is imported lazily here)."""
    from cassandra.policies import TokenAwarePolicy

    class NearestReplicaFirst(TokenAwarePolicy):
        """Token-aware, with a replica on this host first: a read at ONE stays on the host, and a
        quorum read is coordinated there. A member here that is no replica of the statement's
        token keeps its place (it would only forward the request); where every replica is local
        (a loopback ring) or none is, the token-aware order is kept (the sort is stable)."""

        def populate(self, cluster, hosts):
            self.ring_metadata = cluster.metadata  # the replicas of a token (the parent's copy is private)
            super().populate(cluster, hosts)

        def make_query_plan(self, working_keyspace=None, query=None):
            plan = list(super().make_query_plan(working_keyspace, query))
            keyspace = query.keyspace if query is not None and query.keyspace else working_keyspace
            if query is None or query.routing_key is None or keyspace is None:
                return iter(plan)
            here = {h for h in plan if is_local_address(h.address)}
            if not here or len(here) == len(plan):  # a loopback ring, or none here: no second token lookup
                return iter(plan)
            replicas = set(self.ring_metadata.get_replicas(keyspace, query.routing_key))
            return iter(sorted(plan, key=lambda host: not (host in here and host in replicas)))

    return NearestReplicaFirst


def NearestReplicaFirst(child):  # noqa: N802 -- reads as the class it makes
    return nearest_replica_first_class()(child)
