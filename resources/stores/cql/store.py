"""Cassandra object store.

Two tables, after Netflix Astyanax's chunked object store (every chunk group its own
partition), so a run's outputs spread over the ring by token and no partition outgrows one
object's chunk group::

    CREATE TABLE <keyspace>.<table> (                  -- manifests and chunks
        scope text, path text, version text, grp int, chunk int, manifest blob, data blob,
        PRIMARY KEY ((scope, path, version, grp), chunk))
    CREATE TABLE <keyspace>.<table>_index (            -- what a scope holds, for purge and listing
        scope text, path text, version text, groups int, committed boolean,
        PRIMARY KEY ((scope), path, version))

* The *head* of ``path`` is the partition ``(scope, path, '', 0)``, one row: the manifest and,
  for a small object (up to ``inline_bytes``), its data. It is the commit point: a reader
  reads it first and sees the previous complete object or the new one, never a torn one.
* Chunk ``i`` of a version lives in partition ``(scope, path, version, i // chunks_per_partition)``.
* A version put with ``replicas=1`` under a store of a higher factor keeps its chunks in the same
  table of the sibling keyspace ``<keyspace>_r1`` (factor 1, made on first use); the version ends
  in ``-r1``, which is how reads and the purge find them. Its head and index rows stay here.
* The index has one small row per written version in the scope's partition: a put of a small
  object is one request (an UNLOGGED batch of its head and index row, up to ``batch_bytes``;
  above, the two rows sent together), a get one read; a large put sends its index row with its
  chunks, then head and ``committed = true`` together.
  Nothing is read before a write: superseded versions are left to their TTL and to the
  scope's purge, which reads the index and deletes each listed partition, then the index.

Every row is written ``USING TTL``. Chunks are written with a bounded window of asynchronous
requests (the driver's ``execute_async``), the backpressure that keeps the driver from
reporting "Connection ... is overloaded". A small put's rows and a get's head read go down one
chain of senders (:mod:`.senders`: early, first, direct, session), each sending or stepping
aside for the next; (on a single node) a get's chunk reads go on a blocking connection of the
process's own, written and answered on the calling thread (:mod:`.direct`); anything that fails
there goes the driver's way.

The client is a package, a module a job, and the store is one class that owns its collaborators,
each given what it needs (no mixins): :mod:`.options` (the switches, and their environment
overrides), :mod:`.cluster` (the one way to build a driver ``Cluster``), :mod:`.session` (the
process's sessions), :mod:`.connection` (a store's endpoint, session and what is known on it),
:mod:`.transport` (the driver's connection classes), :mod:`.statements` (layout, statements,
schema), :mod:`.retry` (requests resent, errors mapped), :mod:`.senders`, :mod:`.early`,
:mod:`.direct` and :mod:`.direct_connection`, :mod:`.errors` (what a driver error means),
:mod:`.fallbacks` (a fast path stepping aside).
"""

from __future__ import annotations

from typing import Any, Iterator

from ..base import IN_PLACE, MiB, ObjectKey, ObjectStore
from ..errors import StoreConfigError
from ..results import AUTO_READS, CHUNK_READS, NEAREST_ONE, QUORUM_READS
from ..settings import CASSANDRA
from .options import opts
from .cluster import pinned_timestamp
from .connection import Connection, Endpoint
from .direct import DirectRequests
from .early import FirstRequests
from .retry import STREAM_GROUPS_AHEAD, Requests
from .senders import Paths, RowsPut, put_rows, read_head
from .statements import (BATCH_MARGIN_BYTES, CASSANDRA_BATCH_WARN_BYTES, DEFAULT_CHUNK_SIZE,
                         DEFAULT_CHUNKS_PER_PARTITION, HEAD_GROUP, HEAD_VERSION, SINGLE_REPLICA_KEYSPACE_SUFFIX,
                         SINGLE_REPLICA_VERSION_SUFFIX, Statements, TableLayout, storage_bytes)
from .transport import Sink

CONSISTENCY_LEVELS = ("ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE", "ANY")

class CassandraObjectStore(ObjectStore):
    """Objects in Cassandra, every chunk group its own partition (layout in the module docstring).

    Example::

        store = CassandraObjectStore(contact_points=["127.0.0.1"], keyspace="asgard")
        store.put(ObjectKey.for_run(run_id, "step", "result"), value)
        store.purge_scope(f"run/{run_id}")

    Args:
        contact_points, port: hosts to contact first and their CQL port.
        keyspace, table: where objects live (created on first use; ``<table>_index`` beside it).
        replication_factor: SimpleStrategy factor used when the keyspace is created.
        consistency: consistency level of every read and write. ``LOCAL_QUORUM`` (the default) or
            ``QUORUM`` falls to one replica for a request that meets a replica known to be down, so
            a ring with replication factor 2 keeps serving through a rolling restart and a read
            still sees every acknowledged write (:func:`ride_through_retry_policy` says why).
        username, password: PasswordAuthenticator credentials (from the environment: Dagster's
            ``EnvVar`` on the resource and IO manager).
        ssl_ca_file: PEM file of the CA that signed the nodes' certificates; given, every
            connection is TLS (TLS 1.2 or later), and only that CA is trusted. None: plain.
        ssl_certfile, ssl_keyfile: PEM client certificate and its key, for a cluster that requires
            client certificates (``require_client_auth``); optional.
        ssl_verify_hostname: check that each node's certificate names the address it is reached
            at (a node of ``asgard cassandra up --secure`` has its IP in the SAN). False checks
            only the signature: for nodes reached through addresses their certificates do not list.
        chunks_per_partition: chunks of one version kept together in one partition (1: every
            chunk its own partition, as Astyanax does).
        durable_writes: the keyspace's ``durable_writes`` when the store creates it. False (the
            default) skips the commit log: outputs are recomputable by re-running their step, and
            the commit log cost 40% of the node's CPU per byte written here. A node that crashes
            (not one that is stopped or restarted, which flushes) loses the outputs it had not yet
            flushed; re-execute the run. Set True to keep them across crashes too.
        connect_timeout, request_timeout: seconds.
        batch_bytes: a small put whose head row (manifest, inline data, key) is at most this
            many bytes is ONE request, an UNLOGGED batch of its head and index rows (10 KiB put+get:
            client CPU 0.42 vs 0.47 ms/op, ops/s +4-15%, ``scripts/ab_store.py small``), and also
            under the node's ``batch_size_warn_threshold`` (read from ``system_views.settings``
            in the background after a session's first put over 4 KiB, which goes as two
            requests at once rather than wait for it; 5 KiB by default, 50 KiB on the project's
            local node), over which the node logs a warning per batch; larger, the two rows go
            as two requests at once. Keep it under the
            cluster's ``batch_size_fail_threshold`` (50 KiB by default), which refuses bigger
            batches. 0: never.
        ride_through_seconds: how long a request (and a first connection) keeps retrying while
            the node is unreachable because it restarts (a retune's restart took 9.3-15.9 s here
            under load, ``asgard bench startup``; a ring member's 10.5-26.8 s in the rolling
            test), or a replica is down or draining; then :class:`StoreUnavailableError`. At
            replication factor 2 a request does not wait for a restarting member (QUORUM falls to
            the live replica); at 1 it waits out the restart, which 60 s covers twice over. Every statement
            is idempotent, so a retried write stores the same cells. 0 fails at once.
        direct_requests: send a small put's rows, a get's head read and (on a single node) its
            chunk reads on a blocking connection of this process's own (:mod:`.direct`), written and answered on
            the calling thread, rather than through the driver's event-loop thread; a request
            that fails there goes the driver's way, and so does every request while the session
            has request-init listeners (metrics, tracing). Default on (``ASGARD_CQL_DIRECT=0``
            turns it off): the figures are in that module's docstring.
        Common options (``chunk_size``, ``ttl_seconds``, ``concurrency``, ``codec``,
        ``inline_bytes``, ...) as in :class:`~asgard.resources.stores.base.ObjectStore`.
    """

    backend = "cassandra"
    # Cassandra refuses mutations over half a commitlog segment (32 MiB by default)
    max_chunk_size = 15 * MiB
    has_replication_factor = True

    #: chunks received straight into the output buffer (False: decoded by the driver, then copied)
    in_place_read = True

    def __init__(
        self,
        contact_points: list[str] | tuple[str, ...] = CASSANDRA["contact_points"].default,
        port: int = CASSANDRA["port"].default,
        keyspace: str = CASSANDRA["keyspace"].default,
        table: str = CASSANDRA["table"].default,
        replication_factor: int = CASSANDRA["replication_factor"].default,
        consistency: str = CASSANDRA["consistency"].default,
        username: str | None = None,
        password: str | None = None,
        ssl_ca_file: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_verify_hostname: bool = CASSANDRA["ssl_verify_hostname"].default,
        connect_timeout: float = CASSANDRA["connect_timeout"].default,
        request_timeout: float = CASSANDRA["request_timeout"].default,
        chunks_per_partition: int = DEFAULT_CHUNKS_PER_PARTITION,
        durable_writes: bool = CASSANDRA["durable_writes"].default,
        ride_through_seconds: float = CASSANDRA["ride_through_seconds"].default,
        chunk_reads: str = CASSANDRA["chunk_reads"].default,
        batch_bytes: int | None = None,
        direct_requests: bool | None = None,
        **kwargs,
    ):
        kwargs.setdefault("chunk_size", DEFAULT_CHUNK_SIZE)
        # an object of up to two chunks is still one row: a 1 MiB array plus its pickle header
        # is one read, not a head read followed by two chunk reads
        # (capped: a chunk of over half the largest one would make the default refuse itself)
        kwargs.setdefault("inline_bytes", min(2 * kwargs["chunk_size"], self.max_chunk_size))
        super().__init__(**kwargs)
        for name, value in (("keyspace", keyspace), ("table", table)):
            # the index table's name adds "_index"; Cassandra refuses names over 48 characters
            limit = 48 - (len("_index") if name == "table" else 0)
            if not value or not value.replace("_", "").isalnum() or not value[0].isalpha() or not value.isascii():
                raise StoreConfigError(f"{name} {value!r} is not a valid CQL identifier (letters, digits, _)")
            if len(value) > limit:
                raise StoreConfigError(f"{name} {value!r} is {len(value)} characters; Cassandra allows {limit} "
                                       "here: choose a shorter name")
        if consistency.upper() not in CONSISTENCY_LEVELS:
            raise StoreConfigError(f"consistency {consistency!r} is not one of {CONSISTENCY_LEVELS}")
        if replication_factor < 1:
            raise StoreConfigError("replication_factor must be at least 1")
        if chunk_reads not in CHUNK_READS:
            raise StoreConfigError(f"chunk_reads {chunk_reads!r} is not one of {CHUNK_READS}")
        if ride_through_seconds < 0:
            raise StoreConfigError(f"ride_through_seconds must be 0 or more, got {ride_through_seconds}")
        if chunks_per_partition < 1:
            raise StoreConfigError(f"chunks_per_partition must be at least 1, got {chunks_per_partition}")
        if (ssl_certfile or ssl_keyfile) and not ssl_ca_file:
            raise StoreConfigError("ssl_certfile/ssl_keyfile need ssl_ca_file too: set it to the CA that signed the "
                                   "nodes' certificates (a client certificate alone does not turn TLS on)")
        if ssl_keyfile and not ssl_certfile:
            raise StoreConfigError("ssl_keyfile is set without ssl_certfile: give the client certificate too")
        # as a tuple it is hashable: part of the driver session's cache key
        self.tls = (ssl_ca_file, ssl_certfile or None, ssl_keyfile or None, bool(ssl_verify_hostname)) \
            if ssl_ca_file else None
        self.contact_points = tuple(contact_points)
        self.port = port
        self.keyspace, self.table = keyspace.lower(), table.lower()
        self.replication_factor = replication_factor
        self.consistency = consistency.upper()
        self.username = username
        self.connect_timeout, self.request_timeout = connect_timeout, request_timeout
        self.chunks_per_partition = chunks_per_partition
        self.durable_writes = durable_writes
        self.ride_through_seconds = ride_through_seconds
        self.chunk_reads, self.chunk_read_fallbacks = chunk_reads, 0
        batch_bytes = opts().batch_bytes if batch_bytes is None else batch_bytes
        if batch_bytes < 0:
            raise StoreConfigError(f"batch_bytes must be 0 or more, got {batch_bytes}")
        self.batch_bytes = batch_bytes
        direct_requests = opts().direct if direct_requests is None else bool(direct_requests)
        # the collaborators, each given what it needs (python-driver's style: no shared private state)
        self.connection = Connection(Endpoint(self.contact_points, port, username, password, self.tls,
                                              connect_timeout, request_timeout, ride_through_seconds))
        self.requests = Requests(self.connection)
        self.statements = Statements(self.connection, self.requests, TableLayout(
            self.keyspace, self.table, self.consistency, replication_factor, durable_writes))
        self._single = None  # the single-replica sibling's statements, made on first use
        self.first_requests = FirstRequests(self.connection, self.requests, self.statements)
        self.direct = DirectRequests(self.connection, self.statements, direct_requests)
        self._paths = Paths(self.connection, self.statements, self.requests, self.first_requests, self.direct,
                            lambda: self.receives_in_place)

    # --- connection and schema ----------------------------------------------------------
    @property
    def session(self):
        """This process's driver session (opened on first use; a forked step opens its own)."""
        return self.connection.session

    def server_hosts(self) -> int | None:
        """The ring's hosts: its members' racks (a host's members share one; the driver's
        metadata, no request), else its members."""
        members = list(self.session.cluster.metadata.all_hosts())
        racks = {m.rack for m in members if m.rack}
        return len(racks) or len(members) or None

    @property
    def direct_requests(self) -> bool:
        """Whether small requests (and a single node's chunk reads) may go direct (:mod:`.direct`)."""
        return self.direct.enabled

    @direct_requests.setter
    def direct_requests(self, enabled: bool) -> None:
        self.direct.enabled = bool(enabled)

    @property
    def password(self) -> str | None:
        return self.connection.endpoint.password

    @property
    def qualified_table(self) -> str:
        return self.statements.layout.qualified_table

    @property
    def qualified_index(self) -> str:
        return self.statements.layout.qualified_index

    def ping(self) -> None:
        self.requests.execute(self.session, "SELECT release_version FROM system.local")

    def ensure_schema(self, single_replica: bool = False) -> None:
        """Create the keyspace and tables now if they are missing (otherwise the first put or get
        does): for callers that read or alter their options before any output is stored; with
        ``single_replica``, the sibling keyspace of ``replicas=1`` puts too."""
        self.statements.get("select_head")
        if single_replica and self.replication_factor > 1:
            self.statements_for(SINGLE_REPLICA_VERSION_SUFFIX).get("select_head")

    # --- replicas per object --------------------------------------------------------------
    def version_for(self, replicas: int | None, inline: bool = False) -> str:
        """A new version; with ``replicas=1`` below the store's factor, one whose chunks go to the
        single-replica sibling keyspace (``<keyspace>_r1``), which the version names, so that
        reads and the scope's purge find them from the manifest and the index rows alone. An
        inline object is its head row, kept where heads are: at the store's factor."""
        version = super().version_for(None)
        if replicas is None or replicas == self.replication_factor:
            return version
        if replicas != 1:
            raise StoreConfigError(f"replicas={replicas}: a put keeps its chunks at the store's factor "
                                   f"({self.replication_factor}) or at 1; choose one of those")
        if len(self.keyspace) + len(SINGLE_REPLICA_KEYSPACE_SUFFIX) > 48:
            raise StoreConfigError(f"keyspace {self.keyspace!r} leaves no room for its single-replica sibling "
                                   f"({self.keyspace}{SINGLE_REPLICA_KEYSPACE_SUFFIX}, over Cassandra's 48 "
                                   "characters): choose a keyspace of 45 characters or fewer")
        return version if inline else version + SINGLE_REPLICA_VERSION_SUFFIX

    def statements_for(self, version: str):
        """The statements of the keyspace that holds ``version``'s chunks."""
        if not version.endswith(SINGLE_REPLICA_VERSION_SUFFIX):
            return self.statements
        if self._single is None:
            layout = self.statements.layout
            self._single = Statements(self.connection, self.requests, TableLayout(
                layout.keyspace + SINGLE_REPLICA_KEYSPACE_SUFFIX, layout.table, layout.consistency, 1,
                layout.durable_writes), prefix="r1.")
        return self._single

    # --- layout -----------------------------------------------------------------------
    def identity(self) -> str:
        return f"cassandra://{self.contact_points[0]}:{self.port}/{self.qualified_table}"

    def uri(self, key: ObjectKey) -> str:
        return f"cassandra://{self.contact_points[0]}:{self.port}/{self.qualified_table}/{key.scope}/{key.path}"

    def groups(self, chunks: int) -> int:
        """Partitions that ``chunks`` chunks of one version occupy."""
        return -(-chunks // self.chunks_per_partition)

    # --- primitives -------------------------------------------------------------------
    def _write_chunks(self, key: ObjectKey, version: str, chunks: Iterator[tuple[int, Any]],
                      count: int | None) -> None:
        ttl, per = self.ttl_seconds, self.chunks_per_partition
        # the version's index row goes out with its first chunks, so a put that dies half-way
        # leaves no partition the scope's purge cannot find (its committed flag stays false).
        # A stream (count None) announces its groups ahead, STREAM_GROUPS_AHEAD at a time: the
        # row never names fewer groups than are written (purge deletes a few empty ones at most).

        # the index row stays at the store's factor; the chunks go where the version says
        index, chunk = self.statements.get, self.statements_for(version).get

        def all_items():
            announced = self.groups(count) if count is not None else 0
            yield -1, index("insert_index"), (key.scope, key.path, version, announced, False, ttl)
            for i, data in chunks:
                if i // per >= announced:
                    announced = i // per + STREAM_GROUPS_AHEAD
                    yield -1, index("insert_index"), (key.scope, key.path, version, announced, False, ttl)
                yield i, chunk("insert_chunk"), (key.scope, key.path, version, i // per, i, data, ttl)

        for _ in self.requests.pipelined(all_items(), self.concurrency):
            pass

    def _read_chunks(self, key: ObjectKey, version: str, count: int) -> Iterator[tuple[int, bytes]]:
        return self._read_chunks_into(key, version, count, None)

    def chunk_reads_for(self, requested: str | None = None) -> tuple[str, str]:
        """``(quorum | nearest-one, why)`` for one read: ``requested`` (an edge's own), else the
        store's ``chunk_reads``; ``auto`` reads at ONE from this host's member where the ring
        spans hosts and has one here, and at the store's level otherwise."""
        choice = requested or self.chunk_reads
        if choice not in CHUNK_READS:
            raise StoreConfigError(f"chunk_reads {choice!r} is not one of {CHUNK_READS}")
        if self.consistency == "ONE":
            return QUORUM_READS, "the store reads at ONE already"
        if choice != AUTO_READS:
            return choice, ("asked for this read" if requested else "the store's chunk_reads")
        from .cluster import is_local_address

        # the members as the session knows them; before it is up, the contact points: deciding
        # never waits for a connection (a fresh process's first get goes ahead of its session)
        session = self.connection.established()
        hosts = [h.address for h in session.cluster.metadata.all_hosts()] if session is not None \
            else list(self.contact_points)
        here = [a for a in hosts if is_local_address(a)]
        if not here:
            return QUORUM_READS, "auto: no member of the ring runs on this host"
        if len(here) == len(hosts):
            return QUORUM_READS, "auto: every member runs on this host: no link between hosts to save"
        return NEAREST_ONE, (f"auto: the ring spans hosts and this host's member ({here[0]}) is asked first for "
                             "each chunk it holds, at ONE: chunks never change once written and are checked "
                             "against the manifest")

    def _read_chunks_into(self, key: ObjectKey, version: str, count: int,
                          targets: list[memoryview] | None, reads: str | None = None) -> Iterator[tuple[int, Any]]:
        """Each chunk's blob received from the socket straight into its target, on a connection
        that reads frames itself (``_fast_read_connection_class``): one copy (the kernel's), not
        four (into the frame buffer, into the driver's ``bytes``, into the output buffer). A reply
        of another shape, or no ``targets``, comes decoded as usual for the caller to copy."""
        per = self.chunks_per_partition
        done: set = set()
        # the direct connection knows the store's own statements only
        if (targets and self.receives_in_place and self.direct.session() is not None
                and self.statements_for(version) is self.statements):
            yield from self.direct.read_chunks(key, version, count, targets, done, per, self.concurrency)
        left = [i for i in range(count) if i not in done]
        if not left:
            return
        # at ONE first where asked (chunks are immutable per version and checked against the
        # manifest): a replica that has nothing yet is asked again at the store's level
        if reads is None:
            reads, _ = self.chunk_reads_for()
        level = "ONE" if reads == NEAREST_ONE else None
        missed: list[int] = []
        for i, data in self._read_chunks_at(key, version, left, targets, level):
            if data is None and level is not None:
                missed.append(i)
            else:
                yield i, data
        if missed:
            self.chunk_read_fallbacks += len(missed)
            yield from self._read_chunks_at(key, version, missed, targets, None)

    def _read_chunks_at(self, key: ObjectKey, version: str, indexes: list[int], targets, level: str | None):
        per = self.chunks_per_partition
        sinks = {i: Sink(targets[i]) for i in indexes} if targets and self.receives_in_place else None
        stmt = self.statements_for(version).at_level("select_chunk", level)
        items = ((i, stmt, (key.scope, key.path, version, i // per, i)) for i in indexes)
        for i, rows in self.requests.pipelined(items, self.concurrency, sinks):  # a callback's rows: a list
            if sinks is not None and sinks[i].filled:
                yield i, IN_PLACE
            else:
                yield i, (rows[0].data if rows else None)

    def _write_manifest(self, key: ObjectKey, manifest, inline) -> None:
        # one write timestamp for the head and index rows, kept by every resend (early, direct,
        # the session's retries): a resend after the node applied a write never lands on top of a
        # newer put of the same path made in between
        with pinned_timestamp():
            self._write_manifest_rows(key, manifest, inline)

    def _write_manifest_rows(self, key: ObjectKey, manifest, inline) -> None:
        groups = 0 if inline is not None else self.groups(manifest.chunks)
        ttl = self.ttl_seconds
        # data = null on a chunked head clears a previous inline value of the same path.
        head = ("insert_head", (key.scope, key.path, HEAD_VERSION, HEAD_GROUP, manifest.to_bytes(), inline, ttl))
        index = ("insert_index", (key.scope, key.path, manifest.version, groups, True, ttl))
        size = (len(head[1][4]) + memoryview(inline).nbytes + 2 * len(key.scope) + 2 * len(key.path)
                + len(manifest.version)) if inline is not None else None
        if size is None or size > self.batch_bytes:
            # Over batch_bytes, two requests in flight together (one round trip): Cassandra
            # refuses a batch over batch_size_fail_threshold (50 KiB by default).
            put_rows(self._paths, RowsPut(head, index, batched=False, first=False))
            return
        warn = self.connection.state.batch_warn
        batched = size <= CASSANDRA_BATCH_WARN_BYTES - BATCH_MARGIN_BYTES or (
            warn is not None and size <= warn - BATCH_MARGIN_BYTES)
        # a fresh process's first put goes before its statements are prepared: one round trip, not three
        put_rows(self._paths, RowsPut(head, index, batched=batched, first=True))
        if warn is None and not batched:
            self._read_batch_warn_later()  # for the next put; this one did not wait for it

    def _read_batch_warn_later(self) -> None:
        """Start reading the node's ``batch_size_warn_threshold`` (:meth:`batch_warn_bytes`)
        without waiting: a fresh process's first put sends its two rows as two requests at once
        rather than wait a round trip for it, and the puts after batch by it."""
        state = self.connection.state
        if state.batch_warn is not None or state.batch_warn_reading:
            return
        session = self.connection.established()
        if session is None:
            return  # the session is still opening (the first put went early): the next put reads it
        state.batch_warn_reading = True
        future = session.execute_async(
            "SELECT value FROM system_views.settings WHERE name = 'batch_size_warn_threshold'",
            timeout=self.request_timeout)

        def done(rows):
            state.batch_warn = storage_bytes(rows[0].value) if rows else CASSANDRA_BATCH_WARN_BYTES

        def failed(exc):  # no virtual tables (before 4.0), not readable by this role, or lost:
            # the default; a lost connection reads it again with the next session
            state.batch_warn = CASSANDRA_BATCH_WARN_BYTES

        future.add_callbacks(done, failed)

    def batch_warn_bytes(self) -> int:
        """The node's ``batch_size_warn_threshold``, read once per session: over it the node logs
        a WARN for every batch (not rate-limited, javap of 5.0.9's BatchStatement), so a small
        put batches only under it (the local node's is 50 KiB; Cassandra's default 5 KiB)."""
        session = self.session
        state = self.connection.state
        if state.batch_warn is None:
            try:
                row = self.requests.execute(session, "SELECT value FROM system_views.settings "
                                                     "WHERE name = 'batch_size_warn_threshold'").one()
                state.batch_warn = storage_bytes(row.value) if row is not None else CASSANDRA_BATCH_WARN_BYTES
            except Exception:  # no virtual tables (before 4.0), or not readable by this role
                state.batch_warn = CASSANDRA_BATCH_WARN_BYTES
        return state.batch_warn

    def _read_manifest(self, key: ObjectKey):
        found = read_head(self._paths, key)  # the chain of senders (a fresh process's first get: one round trip)
        if found is False:
            return None
        row, sink = found
        if row.manifest is None:
            return None
        # a large inline object came into a buffer of its own: the reader's, used as is
        return row.manifest, (sink.view if sink is not None and sink.filled else row.data)

    @property
    def receives_in_place(self) -> bool:
        """Whether reads receive blobs straight into their output buffers (the options, and this class's)."""
        return bool(opts().fast_read and opts().in_place_read and self.in_place_read)

    def _run(self, name: str, params) -> Any:
        return self.requests.execute(self.session, self.statements.get(name), params)

    def _index(self, scope: str, path: str | None = None) -> list:
        if path is None:
            return list(self._run("select_index", (scope,)))
        return list(self._run("select_index_path", (scope, path)))

    @staticmethod
    def _partitions_of(rows: list) -> list[tuple[str, str, int]]:
        """``(path, version, grp)`` of the partitions index rows name: each path's head, and
        every chunk group of each version."""
        heads = [(path, HEAD_VERSION, HEAD_GROUP) for path in {r.path for r in rows}]
        return sorted(heads + [(r.path, r.version, g) for r in rows for g in range(r.groups or 0)])

    def _delete_listed(self, scope: str, rows: list) -> None:
        """Delete the partitions the index rows ``rows`` name (each where its version says)."""
        items = ((None, self.statements_for(p[1]).get("delete_partition"), (scope, *p))
                 for p in self._partitions_of(rows))
        for _ in self.requests.pipelined(items, self.concurrency):
            pass

    def _delete_key(self, key: ObjectKey) -> None:
        self._delete_listed(key.scope, self._index(key.scope, key.path))
        self._run("delete_index_path", (key.scope, key.path))

    def purge_scope(self, scope: str) -> None:
        self._delete_listed(scope, self._index(scope))
        self._run("delete_index_scope", (scope,))
        self.local_copies.purge_scope(scope)  # this host's copies go with the rows

    def list_paths(self, scope: str) -> list[str]:
        return sorted({r.path for r in self._index(scope) if r.committed})

    def partitions(self, scope: str) -> list[tuple[str, str, int]]:
        """``(path, version, grp)`` of every partition the scope's index names (heads included)."""
        return self._partitions_of(self._index(scope))
