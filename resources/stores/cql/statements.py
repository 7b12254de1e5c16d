"""The two tables' layout, the statements the store sends, and their preparation: on first use,
by a computed id for a fresh process's first requests (:func:`known_prepared`), and the schema
created where it is missing."""
from __future__ import annotations

import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from ..base import MiB
from ..errors import SchemaLayoutError
from .options import opts


# the columns (and their kind) of the two tables: a table of another layout is refused by name
TABLE_LAYOUT = {"scope": "partition_key", "path": "partition_key", "version": "partition_key",
                "grp": "partition_key", "chunk": "clustering", "manifest": "regular", "data": "regular"}
INDEX_LAYOUT = {"scope": "partition_key", "path": "clustering", "version": "clustering", "groups": "regular",
                "committed": "regular"}
# an object's head row (manifest, and the data of a small object) is in partition (scope, path, '', 0)
HEAD_VERSION, HEAD_GROUP = "", 0
DEFAULT_CHUNK_SIZE = MiB
#: an object kept at one replica: its chunks in ``<keyspace>_r1`` (same tables), its version ending
#: so, which is how reads and purges find them; its head and index rows stay at the store's factor
SINGLE_REPLICA_KEYSPACE_SUFFIX, SINGLE_REPLICA_VERSION_SUFFIX = "_r1", "-r1"
#: tries of one CREATE while a keyspace made through another member reaches this one (0.1 s, 0.2 s, ...: 4.5 s in all)
SCHEMA_ATTEMPTS = 10
#: the namespace of :func:`table_id`
TABLE_ID_NAMESPACE = uuid.UUID("6a5f4c1e-2b8d-5e7a-9c3f-41d2b7e0a8c9")


#: driver ``Cluster`` -> {prepared id: the statement last registered under it}, kept alive
_registered: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_registered_lock = threading.Lock()


def keep_registered(cluster, stmt) -> None:
    """Register ``stmt`` with ``cluster``'s registry of prepared ids and keep it alive as long as the
    cluster. The driver holds that registry weakly, by the last statement registered under an id
    (every prepare registers its own), and re-prepares a batch answered UNPREPARED (after a table's
    ALTER or a node's restart) only from there: a statement registered by a store or a first request
    that has since gone would leave the id unknown, and the driver raised AttributeError on every
    batch after, in every store of the process on that cluster."""
    with _registered_lock:  # the registry and what is kept name the same statement for an id
        _registered.setdefault(cluster, {})[stmt.query_id] = stmt
        cluster.add_prepared(stmt.query_id, stmt)


def table_id(keyspace: str, table: str) -> uuid.UUID:
    """The id every process gives ``keyspace.table`` when it creates it (``WITH ID``). Cassandra
    before 5.1 lets two coordinators that create the same table at once give it two ids; the
    schema then settles on one, and what was written under the other is lost ("table ... does
    not exist" on three hosts' first steps at once). With one id per name, concurrent creations
    agree. A table dropped and made again gets its old id back: Cassandra recycles a dropped
    table's commit log, and every row here carries a write-unique version and a TTL."""
    return uuid.uuid5(TABLE_ID_NAMESPACE, f"{keyspace}.{table}".lower())  # unquoted names: Cassandra lowers them

DEFAULT_CHUNKS_PER_PARTITION = 1
CASSANDRA_BATCH_WARN_BYTES = 5 * 1024  # Cassandra's default batch_size_warn_threshold
BATCH_MARGIN_BYTES = 1024  # the node counts cells' timestamps and TTLs too


def storage_bytes(value: str) -> int:
    """Bytes of a Cassandra data-storage setting as ``system_views.settings`` shows it ("5KiB")."""
    units = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
    for unit in ("KiB", "MiB", "GiB", "B"):
        if value.endswith(unit) and value[: -len(unit)].strip().isdigit():
            return int(value[: -len(unit)]) * units[unit]
    return CASSANDRA_BATCH_WARN_BYTES


# chunks are pickled arrays, video, models: mostly incompressible, and the client's codec
# option compresses the rest; Cassandra compressing them again costs CPU on both paths
TABLE_OPTIONS = "compression = {'enabled': 'false'}"


def table_gc_grace_seconds(replication_factor: int) -> int:
    """The tables' gc_grace_seconds: 0 with one replica (tombstones of purged runs can go at the next
    compaction: no replica needs them for a repair), else 3 hours."""
    return 0 if replication_factor == 1 else 3 * 3600

CQL_TYPES = {"text": "VarcharType", "blob": "BytesType", "int": "Int32Type", "boolean": "BooleanType"}


def known_prepared(cql: str, keyspace: str, table: str, markers: tuple[tuple[str, str], ...],
                    partition_key: tuple[int, ...], protocol_version: int):
    """The driver's ``PreparedStatement`` for ``cql`` made without asking the node.

    A node files a prepared statement under the MD5 of its text when the connection has no
    keyspace (``QueryProcessor.computeId`` in Cassandra 3 to 5; ours never has one, every name is
    qualified), and keeps it across restarts (``system.prepared_statements``). An EXECUTE by that
    id skips the PREPARE round trip and the node's parse of the text (a 10 KiB insert sent as text
    took 2.75 ms against 1.30 ms prepared, in a loop here). A node that does not hold the id answers
    UNPREPARED, and the driver prepares the text (it is registered with the cluster for that) and
    executes again, as for any statement the node has evicted. ``markers``: ``(column, type)``
    of each bind marker in order; ``partition_key``: the markers that make the partition key,
    which the driver routes by. For protocol v4 and older: v5's EXECUTE also carries a hash of
    the result's metadata. Apache Cassandra 2 to 5 (and so DSE) and ScyllaDB all compute the id
    this way; a server that did not would make the driver prepare again and again until the
    request times out (its re-prepare of a batch does not compare ids): ``ASGARD_CQL_FIRST=text``
    sends a fresh process's first requests as text instead."""
    import hashlib

    from cassandra import cqltypes
    from cassandra.protocol import ColumnMetadata
    from cassandra.query import PreparedStatement

    columns = [ColumnMetadata(keyspace, table, name, getattr(cqltypes, CQL_TYPES[kind])) for name, kind in markers]
    # keyspace None: what Session.prepare gives a connection without one (the driver checks it
    # against the connection's when it prepares again)
    return PreparedStatement(columns, hashlib.md5(cql.encode("utf-8")).digest(), list(partition_key), cql,
                             None, protocol_version, None, None)


@dataclass(frozen=True)
class TableLayout:
    """Where a store's objects live and how they are read and written.

    Attributes:
        keyspace, table: the objects' table (``<table>_index`` beside it).
        consistency: the consistency level's name of every read and write.
        replication_factor, durable_writes: the keyspace's, when the store creates it.
    """

    keyspace: str
    table: str
    consistency: str
    replication_factor: int
    durable_writes: bool

    @property
    def qualified_table(self) -> str:
        return f"{self.keyspace}.{self.table}"

    @property
    def qualified_index(self) -> str:
        return f"{self.keyspace}.{self.table}_index"


# the bind markers, (column, type) in order, of the statements a fresh process sends first,
# and which of them make the partition key (the driver routes by it)
FIRST_MARKERS = {
    "insert_head": (("scope", "text"), ("path", "text"), ("version", "text"), ("grp", "int"),
                    ("manifest", "blob"), ("data", "blob"), ("[ttl]", "int")),
    "insert_index": (("scope", "text"), ("path", "text"), ("version", "text"), ("groups", "int"),
                     ("committed", "boolean"), ("[ttl]", "int")),
    "select_head": (("scope", "text"), ("path", "text"), ("version", "text"), ("grp", "int")),
}
FIRST_PARTITION_KEY = {"insert_head": (0, 1, 2, 3), "insert_index": (0,), "select_head": (0, 1, 2, 3)}


def statement_texts(layout: TableLayout) -> dict[str, str]:
    """The CQL of every statement the store sends, by name."""
    t, ix = layout.qualified_table, layout.qualified_index
    return {
        "insert_chunk": f"INSERT INTO {t} (scope, path, version, grp, chunk, data) VALUES (?, ?, ?, ?, ?, ?) USING TTL ?",
        "insert_head": (f"INSERT INTO {t} (scope, path, version, grp, chunk, manifest, data) "
                        "VALUES (?, ?, ?, ?, 0, ?, ?) USING TTL ?"),
        "insert_index": (f"INSERT INTO {ix} (scope, path, version, groups, committed) VALUES (?, ?, ?, ?, ?) "
                         "USING TTL ?"),
        # every partition key column bound, '' and 0 included: the driver routes by the whole key
        "select_head": f"SELECT manifest, data FROM {t} WHERE scope = ? AND path = ? AND version = ? AND grp = ? AND chunk = 0",
        "select_chunk": f"SELECT data FROM {t} WHERE scope = ? AND path = ? AND version = ? AND grp = ? AND chunk = ?",
        "select_index": f"SELECT path, version, groups, committed FROM {ix} WHERE scope = ?",
        "select_index_path": f"SELECT path, version, groups, committed FROM {ix} WHERE scope = ? AND path = ?",
        "delete_partition": f"DELETE FROM {t} WHERE scope = ? AND path = ? AND version = ? AND grp = ?",
        "delete_index_scope": f"DELETE FROM {ix} WHERE scope = ?",
        "delete_index_path": f"DELETE FROM {ix} WHERE scope = ? AND path = ?",
    }


class Statements:
    """A store's statements, prepared on first use on its connection's session, and its two
    tables, created where missing or refused by name where another layout holds them.

    Args:
        connection: the store's :class:`~.connection.Connection`; what is prepared is kept in its
            :class:`~.connection.SessionState` (a new session prepares again).
        requests: the :class:`~.retry.Requests` that prepares and creates, resending as needed.
        layout: the :class:`TableLayout`.
        prefix: put before each statement's name where the session's state files it: two
            layouts (the store's keyspace and its single-replica sibling) share one session.
    """

    def __init__(self, connection, requests, layout: TableLayout, prefix: str = ""):
        self.connection, self.requests, self.layout, self.prefix = connection, requests, layout, prefix
        self.texts = statement_texts(layout)
        self._at_level: dict[tuple[int, str], tuple[Any, Any]] = {}

    @property
    def prepared(self) -> dict[str, Any]:
        """The statements prepared on the current session, by name."""
        return self.connection.state.prepared

    def get(self, name: str):
        """The prepared statement ``name``, prepared on first use (a step that only writes small
        outputs prepares two statements, not ten). A keyspace or table that does not exist yet
        is created then, and the prepare retried. A prepare already under way in the background
        (:meth:`prepare_later`) is waited for, not sent twice."""
        session = self.connection.session
        state = self.connection.state
        stmt = state.prepared.get(self.prefix + name)
        if stmt is not None:
            return stmt
        pending = state.preparing.pop(self.prefix + name, None)
        if pending is not None:
            try:
                pending.result()
            except Exception:  # prepared below, on this thread, with the errors mapped
                pass
            stmt = state.prepared.get(self.prefix + name)
            if stmt is not None:
                return stmt
        return self.prepare(session, name, state)

    def prepare(self, session, name: str, state):
        """Prepare ``name`` on ``session`` and file it in ``state`` (that session's)."""
        from cassandra import ConsistencyLevel, InvalidRequest

        cql = self.texts[name]
        for attempt in range(3):
            try:
                stmt = self.requests.execute(session, cql, prepare=True)
                break
            except InvalidRequest:
                if attempt == 2:
                    raise
                self.check_layout(session)  # before creating anything beside a table of another layout
                self.create_schema(session)
        stmt.consistency_level = getattr(ConsistencyLevel, self.layout.consistency)
        stmt.is_idempotent = True  # every statement here may be resent (the same cells, a delete)
        keep_registered(session.cluster, stmt)  # the driver registered it too, but weakly
        if self.layout.keyspace not in state.routed:
            self.route_by_token(session, state)
        state.prepared[self.prefix + name] = stmt
        return stmt

    def at_level(self, name: str, consistency: str | None):
        """Statement ``name`` at ``consistency`` (a level's name; None or the layout's own: the
        prepared statement itself): a copy of the prepared one with its own level, same id."""
        import copy

        from cassandra import ConsistencyLevel

        stmt = self.get(name)
        if consistency is None or consistency == self.layout.consistency:
            return stmt
        key = (id(stmt), consistency)  # a new session's statement is a new object: copied afresh
        copied = self._at_level.get(key)
        if copied is None or copied[0] is not stmt:
            copied = (stmt, copy.copy(stmt))
            copied[1].consistency_level = getattr(ConsistencyLevel, consistency)
            self._at_level[key] = copied
        return copied[1]

    def prepare_later(self, session, *names: str) -> None:
        """Prepare ``names`` on the driver's executor, off the caller's path: a fresh process's
        first request went as text (:meth:`.early.FirstRequests.batch`), and the next one finds
        the statement prepared, or waits for its prepare (which was sent a round trip earlier)."""
        state = self.connection.state
        for name in names:
            if self.prefix + name not in state.prepared and self.prefix + name not in state.preparing:
                try:
                    state.preparing[self.prefix + name] = session.submit(self.prepare, session, name, state)
                except RuntimeError:  # the session is shutting down: prepared on use, if ever
                    return

    def known(self, name: str, cluster):
        """Statement ``name`` by its computed prepared id (:func:`known_prepared`), or None where
        that does not apply (protocol v5, or turned off). Sessions here never set a keyspace."""
        if opts().first_requests != "known" or cluster.protocol_version > 4:
            return None
        from cassandra import ConsistencyLevel

        layout = self.layout
        table = layout.table + "_index" if name == "insert_index" else layout.table
        stmt = known_prepared(self.texts[name], layout.keyspace, table, FIRST_MARKERS[name],
                              FIRST_PARTITION_KEY[name], cluster.protocol_version)
        stmt.consistency_level = getattr(ConsistencyLevel, layout.consistency)
        stmt.is_idempotent = True
        keep_registered(cluster, stmt)  # the driver prepares it again from there when a node answers UNPREPARED
        return stmt

    def route_by_token(self, session, state=None) -> None:
        """Give the driver our keyspace's replication, so that on a ring every request goes to a
        replica of its partition (token-aware) rather than through a coordinator's extra hop. The
        driver learns it from the full schema, which it no longer reads at connect (see
        ``_connect``); one row of ``system_schema.keyspaces`` is enough, and a single node needs
        none."""
        cluster, keyspace = session.cluster, self.layout.keyspace
        (state or self.connection.state).routed.add(keyspace)
        if len(cluster.metadata.all_hosts()) < 2 or keyspace in cluster.metadata.keyspaces:
            return
        from cassandra.metadata import KeyspaceMetadata

        row = self.requests.execute(session, "SELECT durable_writes, replication FROM system_schema.keyspaces "
                                             "WHERE keyspace_name = %s", (keyspace,)).one()
        if row is None:
            return
        replication = dict(row.replication)
        strategy = replication.pop("class")
        cluster.metadata.keyspaces[keyspace] = KeyspaceMetadata(keyspace, row.durable_writes, strategy, replication)
        if cluster.metadata.token_map is not None:
            cluster.metadata.token_map.rebuild_keyspace(keyspace, build_if_absent=True)

    def ensure_routed(self, session) -> None:
        """:meth:`route_by_token` once per session (a ring: the replicas of our keyspace first)."""
        if self.layout.keyspace not in self.connection.state.routed:
            self.route_by_token(session)

    def check_layout(self, session) -> None:
        """Refuse, by name, a table of ours that another layout holds."""
        keyspace, table = self.layout.keyspace, self.layout.table
        rows = self.requests.execute(
            session, "SELECT table_name, column_name, kind FROM system_schema.columns WHERE keyspace_name = %s",
            (keyspace,))
        found: dict[str, dict[str, str]] = {}
        for row in rows:
            found.setdefault(row.table_name, {})[row.column_name] = row.kind
        for name, want in ((table, TABLE_LAYOUT), (f"{table}_index", INDEX_LAYOUT)):
            have = found.get(name)
            if have is not None and any(have.get(col) != kind for col, kind in want.items()):
                raise SchemaLayoutError(
                    f"Table {keyspace}.{name} exists with another layout than this version of "
                    f"asgard-dagster uses (columns {sorted(have)}; expected {sorted(want)}): it was made by "
                    "an earlier version (one partition per run). Its outputs are ephemeral, so nothing needs "
                    f"migrating: drop it (`DROP TABLE {keyspace}.{name};` in cqlsh) and re-run, or "
                    "set keyspace/table to a fresh name."
                )

    def _create(self, session, cql: str) -> None:
        """Run one ``CREATE ... IF NOT EXISTS``. Several processes' first steps create the schema
        at once through different members: a keyspace another member made a moment ago may not
        have reached this statement's coordinator yet ("Keyspace ... doesn't exist"; 1 of 8 first
        puts from 3 processes at once on a fresh ring here), so it is sent again as schema settles."""
        from cassandra import InvalidRequest

        for attempt in range(SCHEMA_ATTEMPTS):
            try:
                self.requests.execute(session, cql)
                return
            except InvalidRequest as exc:
                if attempt == SCHEMA_ATTEMPTS - 1 or "exist" not in str(exc):
                    raise
                time.sleep(0.1 * (attempt + 1))

    def create_schema(self, session) -> None:
        """Create the keyspace and the two tables where they are missing."""
        layout, execute = self.layout, self._create
        execute(session, (
            f"CREATE KEYSPACE IF NOT EXISTS {layout.keyspace} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {layout.replication_factor}}} "
            f"AND durable_writes = {str(layout.durable_writes).lower()}"
        ))
        gc_grace = table_gc_grace_seconds(layout.replication_factor)
        execute(session, (
            f"CREATE TABLE IF NOT EXISTS {layout.qualified_table} ("
            "scope text, path text, version text, grp int, chunk int, manifest blob, data blob, "
            "PRIMARY KEY ((scope, path, version, grp), chunk)) "
            f"WITH ID = {table_id(layout.keyspace, layout.table)} AND gc_grace_seconds = {gc_grace} AND {TABLE_OPTIONS} "
            "AND comment = 'asgard-dagster ephemeral op outputs: heads and chunks'"
        ))
        execute(session, (
            f"CREATE TABLE IF NOT EXISTS {layout.qualified_index} ("
            "scope text, path text, version text, groups int, committed boolean, "
            "PRIMARY KEY ((scope), path, version)) "
            f"WITH ID = {table_id(layout.keyspace, layout.table + '_index')} AND gc_grace_seconds = {gc_grace} "
            "AND comment = 'asgard-dagster: the versions each scope holds, for purge and listing'"
        ))
        # No explicit schema-agreement wait: the driver waits (max_schema_agreement_wait) on the
        # connection that ran each CREATE before returning it. A second wait on the control
        # connection failed CI when that connection had just been closed after a node restart.
