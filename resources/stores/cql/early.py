"""A fresh process's first put and get: one round trip, not three.

A step process connects afresh; its first put waited for the whole connect and then prepared
its statements. Here the first requests go by their statements' computed prepared ids
(:func:`.statements.known_prepared`), or as text, and, while the session still opens, on the
pre-opened connection (:class:`.session.EarlyStart`). Anything refused goes the prepared way
(:meth:`~.retry.Requests.execute`), which creates a missing table or explains one.
Measured: a fresh process's first put 0.93x Redis's (``scripts/first_put.py ab``, 15 rounds,
docs/results/issue13-direct.txt).
"""
from __future__ import annotations


from ..base import ObjectKey
from ..errors import StoreFullError
from .errors import FULL_HINT, is_disk_full
from .retry import release
from .session import early_start
from .statements import CQL_TYPES, FIRST_MARKERS, FIRST_PARTITION_KEY, HEAD_GROUP, HEAD_VERSION
from .transport import into


class FirstRequests:
    """A fresh process's first put and head read, sent before their statements are prepared.

    Args:
        connection: the store's :class:`~.connection.Connection`.
        requests: the :class:`~.retry.Requests` a batch is resent through.
        statements: the store's :class:`~.statements.Statements` (their known ids, and the
            statements it prepares afterwards).
    """

    def __init__(self, connection, requests, statements):
        self.connection, self.requests, self.statements = connection, requests, statements

    def batch(self, requests: tuple[tuple[str, tuple], ...], cluster):
        """An UNLOGGED batch of ``requests`` for a fresh process's first put, without a prepare
        round trip first, routed to a replica of the first one's partition as a prepared batch is:
        each statement by its known id (:meth:`.statements.Statements.known`), or else as CQL text
        with its values bound by the protocol (``?`` markers: the values are not rendered into the
        text). A batch of one statement is one mutation, which the node never checks against its
        batch size thresholds (Cassandra's ``verifyBatchSize``). Also returns the known
        statements, by name."""
        from cassandra import ConsistencyLevel
        from cassandra.query import BatchStatement, BatchType

        layout = self.statements.layout
        batch = BatchStatement(BatchType.UNLOGGED, consistency_level=getattr(ConsistencyLevel, layout.consistency))
        known = {name: self.statements.known(name, cluster) for name, _ in requests}
        if all(known.values()):
            for name, params in requests:
                batch.add(known[name], params)  # keyspace and routing key: the first one's
        else:
            from cassandra import cqltypes

            known = {}
            texts, version = self.statements.texts, cluster.protocol_version

            def ser(value, kind):
                return None if value is None else getattr(cqltypes, CQL_TYPES[kind]).serialize(value, version)

            for name, params in requests:
                # the driver's own way to add a statement with serialized values (its add() would
                # render them into the text as literals: a 10 KiB blob as 20 KiB of hex)
                batch._add_statement_and_params(
                    False, texts[name], [ser(v, k) for v, (_, k) in zip(params, FIRST_MARKERS[name])])
            name, params = requests[0]
            batch.keyspace = layout.keyspace
            batch.routing_key = [ser(params[i], FIRST_MARKERS[name][i][1]) for i in FIRST_PARTITION_KEY[name]]
        batch.is_idempotent = True
        return batch, known

    def write(self, *groups: tuple[tuple[str, tuple], ...]) -> bool:
        """Send ``groups`` (each one request: a batch of its rows) without preparing first, and
        together (:meth:`batch`); statements that went as text are then prepared in the
        background. False if the node refused them as invalid (a missing keyspace or table, a
        table of another layout): the caller sends the rows again the prepared way
        (idempotent), which creates the table or explains it."""
        from cassandra import InvalidRequest

        session = self.connection.session
        self.statements.ensure_routed(session)
        execute, timeout = self.requests.execute, self.connection.endpoint.request_timeout
        batches = [self.batch(g, session.cluster) for g in groups]
        try:
            if len(batches) == 1:
                execute(session, batches[0][0])
            else:
                futures = [session.execute_async(b, timeout=timeout) for b, _ in batches]
                failed = None
                for future in futures:
                    try:
                        future.result()
                    except Exception as exc:
                        failed = failed or exc
                    release(future)
                if failed is not None:  # idempotent: once more through the path that retries
                    if isinstance(failed, InvalidRequest):
                        raise failed
                    for batch, _ in batches:
                        execute(session, batch)
        except InvalidRequest as exc:
            if is_disk_full(exc):
                raise StoreFullError("Cassandra", self.connection.endpoint.where, str(exc), FULL_HINT) from exc
            return False
        prepared = self.connection.state.prepared
        for batch, known in batches:
            prepared.update(known)
        self.statements.prepare_later(session, *(name for group in groups for name, _ in group if name not in prepared))
        return True

    def write_early(self, groups) -> bool:
        """A fresh process's first put on the pre-opened connection while its session opens
        (:class:`.session.EarlyStart`). The node that takes it coordinates it to the partition's replicas
        at our consistency level, as a request the driver did not route by token. False (the
        caller sends it the session's way; the rows are idempotent) if this process has a session
        already, the connection is not there, or the node refused a request."""
        from cassandra.protocol import BatchMessage

        early = self._early_start()
        if early is None:
            return False
        try:
            cluster = early.cluster
            batches = [self.batch(g, cluster) for g in groups]
            messages = [BatchMessage(b.batch_type, b._statements_and_parameters, b.consistency_level, None,
                                     cluster.timestamp_generator(), None) for b, _ in batches]
            answers = early.send(messages, timeout=self.connection.endpoint.request_timeout)
        finally:
            early.release()
        if answers is None or not all(ok for ok, _ in answers):
            return False
        for _, known in batches:
            self.connection.state.prepared.update(known)
        self.connection.early_cluster = cluster
        return True

    def read_head(self, key: ObjectKey, sink):
        """The head row of ``key`` read without preparing first: by the statement's known id, or
        else as text (its statement then prepared in the background), its data received into
        ``sink`` where it can be. ``(row, sink)``, False for no row, or None if the node refused
        the statement (a missing table: the prepared path creates it)."""
        from cassandra import ConsistencyLevel, InvalidRequest
        from cassandra.cqltypes import Int32Type, UTF8Type
        from cassandra.query import SimpleStatement

        session = self.connection.session
        self.statements.ensure_routed(session)
        layout = self.statements.layout
        params = (key.scope, key.path, HEAD_VERSION, HEAD_GROUP)
        known = self.statements.known("select_head", session.cluster)
        if known is not None:
            stmt = known.bind(params)
        else:
            version = session.cluster.protocol_version
            # two short text values, rendered as quoted literals by the driver's encoder
            stmt = SimpleStatement(self.statements.texts["select_head"].replace("?", "%s"),
                                   consistency_level=getattr(ConsistencyLevel, layout.consistency),
                                   keyspace=layout.keyspace, is_idempotent=True)
            stmt.routing_key = [UTF8Type.serialize(key.scope, version), UTF8Type.serialize(key.path, version),
                                UTF8Type.serialize(HEAD_VERSION, version), Int32Type.serialize(HEAD_GROUP, version)]
        try:
            row = into(sink, self.requests.execute, session, stmt, None if known is not None else params).one()
        except InvalidRequest:
            return None
        if known is not None:
            self.connection.state.prepared["select_head"] = known
        else:
            self.statements.prepare_later(session, "select_head")
        return False if row is None else (row, sink)

    def read_head_early(self, key: ObjectKey):
        """A fresh process's first get (a step's first request is usually its input's) on the
        pre-opened connection while the session opens (:class:`.session.EarlyStart`), by the statement's
        known id. ``(row, None)``, False for no row, or None to go the session's way: this
        process has a session already, the node does not hold the id, or it refused."""
        from cassandra.protocol import ExecuteMessage
        from cassandra.query import named_tuple_factory

        early = self._early_start()
        if early is None:
            return None
        try:
            known = self.statements.known("select_head", early.cluster)
            if known is None:
                return None
            bound = known.bind((key.scope, key.path, HEAD_VERSION, HEAD_GROUP))
            answers = early.send([ExecuteMessage(known.query_id, bound.values, known.consistency_level)],
                                 timeout=self.connection.endpoint.request_timeout)
        finally:
            early.release()
        if not answers or not answers[0][0]:
            return None
        result = answers[0][1]
        rows = named_tuple_factory(result.column_names, result.parsed_rows or [])
        self.connection.state.prepared["select_head"] = known
        self.connection.early_cluster = early.cluster
        return (rows[0], None) if rows else False

    def _early_start(self):
        e = self.connection.endpoint
        return early_start(e.contact_points, e.port, e.username, e.password, e.connect_timeout, e.tls)
