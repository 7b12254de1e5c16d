"""Cassandra object store.

One table holds manifests and chunks; the scope (a Dagster run) is the partition, so a run
purges with one partition delete::

    CREATE TABLE <keyspace>.objects (
        scope text, path text, version text, chunk int, data blob,
        PRIMARY KEY ((scope), path, version, chunk))

The manifest of ``path`` is the row ``version = ''``, ``chunk = 0`` and names the version
whose chunks hold the data. Every row is written ``USING TTL``. Chunks are written and read
with a bounded window of asynchronous requests (the driver's ``execute_async``), which
is the backpressure that keeps the driver from reporting "Connection ... is overloaded".
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Iterator

from .base import MiB, ObjectKey, ObjectStore
from .errors import StoreConfigError, StoreUnavailableError

MANIFEST_VERSION = ""
LOCAL_HINT = "Start the local node with `asgard cassandra up`, or point contact_points/port at your cluster."
CONSISTENCY_LEVELS = ("ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE", "ANY")

_sessions: dict[tuple, Any] = {}
_sessions_lock = threading.Lock()


def _is_busy(exc: BaseException) -> bool:
    """True for the driver's "Connection ... is overloaded": its socket buffer is full."""
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionBusy

    if isinstance(exc, ConnectionBusy):
        return True
    return isinstance(exc, NoHostAvailable) and bool(exc.errors) and all(
        isinstance(e, ConnectionBusy) for e in exc.errors.values())


def _is_reconnecting(exc: BaseException) -> bool:
    """True for a connection the driver lost and is re-establishing: the node restarted (a
    retune does that) or dropped the socket. Every statement here is idempotent (an INSERT of
    the same cells, a DELETE), so it is safe to send again once the driver has reconnected."""
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionException

    if isinstance(exc, ConnectionException):
        return True
    return isinstance(exc, NoHostAvailable) and all(
        isinstance(e, (ConnectionException, OSError)) for e in (exc.errors or {}).values())


PROTOCOL_VERSION = int(os.environ.get("ASGARD_CQL_PROTOCOL", "4"))
BUFFER_BYTES = int(os.environ.get("ASGARD_CQL_BUFFER", str(256 * 1024)))


def _large_buffer_connection_class():
    """The driver's default reactor with 256 KiB socket reads and writes instead of 4 KiB: a
    1 MiB chunk then costs 4 Python-level socket calls each way, not 256."""
    from cassandra.cluster import DefaultConnection

    return type("LargeBufferConnection", (DefaultConnection,),
                {"in_buffer_size": BUFFER_BYTES, "out_buffer_size": BUFFER_BYTES})


def _connect(contact_points: tuple[str, ...], port: int, username: str | None, password: str | None,
             connect_timeout: float):
    """One driver Cluster/Session per process and endpoint (a forked step gets its own)."""
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster, NoHostAvailable
    from cassandra.policies import ExponentialReconnectionPolicy, RoundRobinPolicy, TokenAwarePolicy

    # the password is part of the identity: a wrong one must not reuse a good session
    cache_key = (os.getpid(), contact_points, port, username, hash(password))
    with _sessions_lock:
        session = _sessions.get(cache_key)
        if session is not None and not session.is_shutdown:
            return session
        auth = PlainTextAuthProvider(username=username, password=password or "") if username else None
        cluster = Cluster(
            list(contact_points), port=port, auth_provider=auth, connect_timeout=connect_timeout,
            control_connection_timeout=connect_timeout,
            load_balancing_policy=TokenAwarePolicy(RoundRobinPolicy()),
            protocol_version=PROTOCOL_VERSION,
            connection_class=_large_buffer_connection_class(),
            # a local node restarted by the tuner is back in seconds: the driver's default
            # back-off (1 s doubling to 10 min) kept the session away for up to a minute
            reconnection_policy=ExponentialReconnectionPolicy(base_delay=0.2, max_delay=5.0),
        )
        try:
            session = cluster.connect()
        except (NoHostAvailable, OSError) as exc:
            cluster.shutdown()
            where = ",".join(f"{h}:{port}" for h in contact_points)
            raise StoreUnavailableError("Cassandra", where, LOCAL_HINT, exc) from exc
        _sessions[cache_key] = session
        return session


def close_sessions() -> None:
    """Shut down every cached driver session of this process. A session to a node that has gone
    keeps a reconnection timer, which at interpreter exit fails noisily ("cannot schedule new
    futures after shutdown"); a long-lived process that is done with Cassandra calls this."""
    with _sessions_lock:
        sessions = list(_sessions.values())
        _sessions.clear()
    for session in sessions:
        session.cluster.shutdown()


class CassandraObjectStore(ObjectStore):
    """Objects in Cassandra.

    Example::

        store = CassandraObjectStore(contact_points=["127.0.0.1"], keyspace="asgard")
        store.put(ObjectKey.for_run(run_id, "step", "result"), value)
        store.purge_scope(f"run/{run_id}")
    """

    backend = "cassandra"
    # Cassandra refuses mutations over half a commitlog segment (32 MiB by default)
    max_chunk_size = 15 * MiB

    def __init__(
        self,
        contact_points: list[str] | tuple[str, ...] = ("127.0.0.1",),
        port: int = 9042,
        keyspace: str = "asgard",
        table: str = "objects",
        replication_factor: int = 1,
        consistency: str = "LOCAL_QUORUM",
        username: str | None = None,
        password: str | None = None,
        connect_timeout: float = 5.0,
        request_timeout: float = 30.0,
        **kwargs,
    ):
        # 512 KiB x 8 in flight: near-best throughput here while the driver's buffers stay
        # under 0.25x of the object (asgard bench io measures both)
        kwargs.setdefault("chunk_size", MiB // 2)
        super().__init__(**kwargs)
        for name, value in (("keyspace", keyspace), ("table", table)):
            if not value.replace("_", "").isalnum() or not value[0].isalpha():
                raise StoreConfigError(f"{name} {value!r} is not a valid CQL identifier (letters, digits, _)")
        if consistency.upper() not in CONSISTENCY_LEVELS:
            raise StoreConfigError(f"consistency {consistency!r} is not one of {CONSISTENCY_LEVELS}")
        if replication_factor < 1:
            raise StoreConfigError("replication_factor must be at least 1")
        self.contact_points = tuple(contact_points)
        self.port = port
        self.keyspace, self.table = keyspace, table
        self.replication_factor = replication_factor
        self.consistency = consistency.upper()
        self.username, self.password = username, password
        self.connect_timeout, self.request_timeout = connect_timeout, request_timeout
        self._prepared: dict[str, Any] = {}

    # --- connection and schema ----------------------------------------------------------
    @property
    def session(self):
        session = _connect(self.contact_points, self.port, self.username, self.password, self.connect_timeout)
        if not self._prepared or self._prepared.get("_session") is not session:
            self._ensure_schema(session)
            self._prepare(session)
        return session

    @property
    def qualified_table(self) -> str:
        return f"{self.keyspace}.{self.table}"

    def _ensure_schema(self, session) -> None:
        meta = session.cluster.metadata.keyspaces.get(self.keyspace)
        if meta is not None and self.table in meta.tables:
            return
        self._execute(session, (
            f"CREATE KEYSPACE IF NOT EXISTS {self.keyspace} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {self.replication_factor}}}"
        ))
        # gc_grace 0 with one replica: tombstones of purged runs can go at the next compaction
        gc_grace = 0 if self.replication_factor == 1 else 3 * 3600
        self._execute(session, (
            f"CREATE TABLE IF NOT EXISTS {self.qualified_table} ("
            "scope text, path text, version text, chunk int, data blob, "
            "PRIMARY KEY ((scope), path, version, chunk)) "
            f"WITH gc_grace_seconds = {gc_grace} AND comment = 'asgard-dagster ephemeral op outputs'"
        ))

    def _prepare(self, session) -> None:
        from cassandra import ConsistencyLevel

        cl = getattr(ConsistencyLevel, self.consistency)
        t = self.qualified_table
        statements = {
            "insert": f"INSERT INTO {t} (scope, path, version, chunk, data) VALUES (?, ?, ?, ?, ?) USING TTL ?",
            "select_chunk": f"SELECT data FROM {t} WHERE scope = ? AND path = ? AND version = ? AND chunk = ?",
            "delete_version": f"DELETE FROM {t} WHERE scope = ? AND path = ? AND version = ?",
            "delete_path": f"DELETE FROM {t} WHERE scope = ? AND path = ?",
            "delete_scope": f"DELETE FROM {t} WHERE scope = ?",
            "list_paths": f"SELECT path FROM {t} WHERE scope = ? AND version = '' ALLOW FILTERING",
        }
        prepared = {}
        for name, cql in statements.items():
            stmt = self._execute(session, cql, prepare=True)
            stmt.consistency_level = cl
            prepared[name] = stmt
        prepared["_session"] = session
        self._prepared = prepared

    def _execute(self, session, statement, params=None, prepare=False):
        from cassandra import OperationTimedOut, Unavailable
        from cassandra.cluster import NoHostAvailable

        deadline = time.monotonic() + self.connect_timeout
        while True:
            try:
                if prepare:
                    return session.prepare(statement)
                return session.execute(statement, params, timeout=self.request_timeout)
            except (NoHostAvailable, OperationTimedOut, Unavailable) as exc:
                # a restarted node: the driver reconnects within its back-off (0.2 s, doubling)
                if _is_reconnecting(exc) and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                raise StoreUnavailableError("Cassandra", self._where(), LOCAL_HINT, exc) from exc

    def _where(self) -> str:
        return ",".join(f"{h}:{self.port}" for h in self.contact_points)

    def ping(self) -> None:
        self._execute(self.session, "SELECT release_version FROM system.local")

    def _run(self, name: str, params) -> Any:
        session = self.session
        return self._execute(session, self._prepared[name], params)

    def _pipelined(self, name: str, items: Iterator[tuple[int, tuple]]) -> Iterator[tuple[int, list]]:
        """Run one prepared statement over ``items`` with at most ``concurrency`` requests in
        flight, yielding ``(index, rows)`` as they complete. The next item is not pulled until a
        slot frees (backpressure); a request the driver refuses because its socket is full
        ("Connection ... is overloaded") is retried after a short pause instead of failing."""
        import queue
        from collections import deque

        session = self.session
        statement = self._prepared[name]
        reconnect_deadline: float | None = None
        done: queue.Queue = queue.Queue()
        retries: deque = deque()
        items = iter(items)
        exhausted, in_flight = False, 0

        def submit(index, params, attempt):
            future = session.execute_async(statement, params, timeout=self.request_timeout)
            future.add_callbacks(
                lambda rows: done.put((index, params, attempt, rows, None)),
                lambda exc: done.put((index, params, attempt, None, exc)),
            )

        while True:
            while in_flight < self.concurrency and (retries or not exhausted):
                if retries:
                    submit(*retries.popleft())
                else:
                    try:
                        index, params = next(items)
                    except StopIteration:
                        exhausted = True
                        break
                    submit(index, params, 0)
                in_flight += 1
            if in_flight == 0:
                return
            index, params, attempt, rows, exc = done.get()
            in_flight -= 1
            if exc is None:
                yield index, rows
            elif _is_busy(exc) and attempt < 200:
                time.sleep(min(0.0005 * 2 ** min(attempt, 8), 0.05))
                retries.append((index, params, attempt + 1))
            elif _is_reconnecting(exc):
                # a restarted node: resend until the driver reconnects, for connect_timeout at most
                if reconnect_deadline is None:
                    reconnect_deadline = time.monotonic() + self.connect_timeout
                if time.monotonic() >= reconnect_deadline:
                    raise self._map_error(exc) from exc
                time.sleep(0.2)
                retries.append((index, params, attempt + 1))
            else:
                raise self._map_error(exc) from exc

    def _map_error(self, exc: BaseException) -> BaseException:
        from cassandra import OperationTimedOut, Unavailable, WriteTimeout, ReadTimeout
        from cassandra.cluster import NoHostAvailable

        if isinstance(exc, (NoHostAvailable, OperationTimedOut, Unavailable, WriteTimeout, ReadTimeout)):
            return StoreUnavailableError("Cassandra", self._where(), LOCAL_HINT, exc)
        return exc

    # --- primitives -------------------------------------------------------------------
    def uri(self, key: ObjectKey) -> str:
        return f"cassandra://{self.contact_points[0]}:{self.port}/{self.qualified_table}/{key.scope}/{key.path}"

    def _write_chunks(self, key: ObjectKey, version: str, chunks: Iterator[tuple[int, Any]]) -> None:
        ttl = self.ttl_seconds
        for _ in self._pipelined("insert", ((i, (key.scope, key.path, version, i, data, ttl)) for i, data in chunks)):
            pass

    def _read_chunks(self, key: ObjectKey, version: str, count: int) -> Iterator[tuple[int, bytes]]:
        params = ((i, (key.scope, key.path, version, i)) for i in range(count))
        for i, rows in self._pipelined("select_chunk", params):
            yield i, (rows[0].data if rows else None)

    def _write_manifest(self, key: ObjectKey, data: bytes) -> None:
        self._run("insert", (key.scope, key.path, MANIFEST_VERSION, 0, data, self.ttl_seconds))

    def _read_manifest(self, key: ObjectKey) -> bytes | None:
        row = self._run("select_chunk", (key.scope, key.path, MANIFEST_VERSION, 0)).one()
        return row.data if row is not None else None

    def _delete_version(self, key: ObjectKey, version: str, count: int) -> None:
        self._run("delete_version", (key.scope, key.path, version))

    def _delete_key(self, key: ObjectKey) -> None:
        self._run("delete_path", (key.scope, key.path))

    def purge_scope(self, scope: str) -> None:
        self._run("delete_scope", (scope,))

    def list_paths(self, scope: str) -> list[str]:
        return sorted({row.path for row in self._run("list_paths", (scope,))})
