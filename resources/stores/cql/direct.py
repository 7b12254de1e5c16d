"""Direct requests: a store's small requests, and on a single node its chunk reads, written and
answered on the calling thread, on a blocking connection of the process's own
(:class:`~.direct_connection.DirectConnection`) to the host the driver's token-aware policy would
pick. Anything that fails there, or any answer but a result, goes the session's way
(:mod:`.fallbacks` counts it), which has the driver's retry, reconnection and ride-through; a
put's resend keeps its write timestamp (:func:`.cluster.pinned_timestamp`)."""
from __future__ import annotations

import contextlib
import threading
import time

from ..base import IN_PLACE, ObjectKey
from .fallbacks import step_aside
from .session import direct_slot
from .statements import HEAD_GROUP, HEAD_VERSION
from .transport import HEAD_SINK_BYTES, Sink

#: after a direct connection fails (a node restarting, a refused login), requests go the
#: session's way for this long before it is opened again
DIRECT_RETRY_SECONDS = 1.0
#: a node forgets its prepared ids when it restarts, and those of a table when it is altered (a
#: retune's ALTER): the session's way prepares them again, the driver's normal course
UNPREPARED = "the node no longer held a prepared statement (it restarted, or the table was altered)"


class HeadRow(tuple):
    """A head row read on a direct connection, shaped as the session's rows are."""

    __slots__ = ()

    def __new__(cls, manifest, data):
        return tuple.__new__(cls, (manifest, data))

    manifest = property(lambda self: self[0])
    data = property(lambda self: self[1])


class DirectRefused(Exception):
    """The node answered a direct request with other than a result (the session's way then)."""


class DirectRequests:
    """A store's small requests, and on a single node its chunk reads, on the process's direct
    connection to the host the driver would pick.

    Args:
        connection: the store's :class:`~.connection.Connection` (its session, endpoint and login).
        statements: the store's :class:`~.statements.Statements` (prepared ids, the keyspace).
        enabled: the store's ``direct_requests``; False sends everything the session's way.
    """

    def __init__(self, connection, statements, enabled: bool):
        self.connection, self.statements, self.enabled = connection, statements, enabled

    def session(self):
        """This process's established session if requests may go direct, else None: turned off,
        no session yet (a fresh process's first request goes early, :class:`.session.EarlyStart`), a
        protocol the direct connection does not speak, or listeners on the session."""
        if not self.enabled:
            return None
        session = self.connection.established()
        if session is None:
            return None
        if session.cluster.protocol_version > 4:
            step_aside("direct", "protocol v5 session (the direct connection speaks v3/v4)")
            return None
        if getattr(session, "_request_init_callbacks", None):
            # a session with request-init listeners (someone's metrics or tracing) sees every
            # request: they go its way
            step_aside("direct", "the session has request-init listeners", warn=False)
            return None
        return session

    def host(self, session, routing):
        """The host the driver would send ``routing`` (a bound statement) to, or None if it is down."""
        cluster = session.cluster
        hosts = cluster.metadata.all_hosts()
        if len(hosts) == 1:
            host = hosts[0]
        else:
            policy = cluster.profile_manager.default.load_balancing_policy
            host = next(iter(policy.make_query_plan(self.statements.layout.keyspace, routing)), None)
        return None if host is None or host.is_up is False else host

    @contextlib.contextmanager
    def connected(self, session, host):
        """This process's :class:`~.direct_connection.DirectConnection` to ``host``, held for the block;
        None if another thread holds it, or it failed less than ``DIRECT_RETRY_SECONDS`` ago, or
        it cannot be opened. An exception out of the block closes it (its state is unknown)."""
        from .direct_connection import DirectConnection

        endpoint = self.connection.endpoint
        address, port = host.endpoint.address, host.endpoint.port
        slot = direct_slot((endpoint.session_key(), address, port))
        if not slot.lock.acquire(blocking=False):
            step_aside("direct", "the connection is in use by another thread", warn=False)
            yield None
            return
        try:
            conn = slot.conn
            if conn is None:
                if time.monotonic() < slot.retry_at:
                    yield None
                    return
                cluster = session.cluster

                def open_connection():
                    try:
                        slot.conn = DirectConnection(
                            address, port, cluster.protocol_version, endpoint.request_timeout, endpoint.connect_timeout,
                            cluster.ssl_context, cluster.auth_provider, session.client_protocol_handler)
                    except Exception as exc:
                        step_aside("direct", "the direct connection could not be opened", f"{address}:{port}: {exc!r}")
                        slot.retry_at = time.monotonic() + DIRECT_RETRY_SECONDS

                if cluster.auth_provider is not None or cluster.ssl_context is not None:
                    # a TLS handshake and a login (a bcrypt check on the node) took 78 ms here
                    # (docs/results/issue13-direct.txt): opened on a thread of its own, which holds
                    # the slot meanwhile, while this request and the next go the session's way
                    slot.retry_at = float("inf")  # one opening at a time

                    def open_later():
                        with slot.lock:
                            slot.retry_at = 0.0
                            open_connection()

                    threading.Thread(target=open_later, name="asgard-direct-connect", daemon=True).start()
                    yield None
                    return
                open_connection()  # a plain connection: a connect and a STARTUP, 0.3 ms here
                conn = slot.conn
                if conn is None:
                    yield None
                    return
            try:
                yield conn
            except BaseException as exc:  # GeneratorExit too: a reader left answers unread
                conn.close()
                slot.conn = None
                if isinstance(exc, DirectRefused) and is_unprepared(exc.args[0]):
                    step_aside("direct", UNPREPARED, exc, warn=False)  # closed: answers were in flight
                elif isinstance(exc, Exception):
                    step_aside("direct", "the direct connection failed", f"{address}:{port}: {exc!r}")
                    slot.retry_at = time.monotonic() + DIRECT_RETRY_SECONDS
                raise
        finally:
            slot.lock.release()

    def send(self, messages, routing, result_metadata=None, sink_min_bytes: int | None = None):
        """Send ``messages(timestamp)`` on the direct connection (:meth:`connected`) to the host
        the driver would pick for ``routing`` (a bound statement), and return their answers; None
        (the caller sends them the session's way, which retries and maps errors) if any is not a
        result, the connection fails, or another thread is using it."""
        from cassandra.protocol import ResultMessage

        session = self.connection.established()
        host = None if session is None else self.host(session, routing)
        if host is None:
            return None
        try:
            with self.connected(session, host) as conn:
                if conn is None:
                    return None
                msgs = messages(session.cluster.timestamp_generator())
                if len(msgs) == 1:
                    answers = [conn.request(msgs[0], result_metadata, sink_min_bytes)]
                else:
                    answers = conn.requests(msgs)
        except Exception:  # counted where the connection was dropped (connected)
            return None
        refused = next((a for a in answers if not isinstance(a[0] if type(a) is tuple else a, ResultMessage)), None)
        if refused is None:
            return answers
        if is_unprepared(refused):
            step_aside("direct", UNPREPARED, refused, warn=False)
        else:
            step_aside("direct", "the node answered other than with a result", refused)
        return None

    def read_chunks(self, key: ObjectKey, version: str, count: int, targets: list[memoryview], done: set,
                    chunks_per_partition: int, concurrency: int):
        """Chunks ``(i, IN_PLACE or data)`` read on the direct connection, ``concurrency`` in
        flight, each blob received into its target on the calling thread; ``done`` collects
        the indexes yielded. Stops early (the caller reads the rest the session's way) if the
        connection is not there or fails, or the node answers other than with a result. A
        single node only: on a ring each chunk's replica differs, and the pool routes them."""
        from cassandra.protocol import ExecuteMessage, ResultMessage

        session = self.connection.established()
        if session is None:
            return
        hosts = session.cluster.metadata.all_hosts()
        if len(hosts) != 1 or hosts[0].is_up is False:
            return
        stmt = self.statements.get("select_chunk")
        per, skip = chunks_per_partition, bool(stmt.result_metadata)
        items = ((i, ExecuteMessage(stmt.query_id, stmt.bind((key.scope, key.path, version, i // per, i)).values,
                                    stmt.consistency_level, skip_meta=skip)) for i in range(count))
        try:
            with self.connected(session, hosts[0]) as conn:
                if conn is None:
                    return
                for i, answer, filled in conn.pipeline(items, concurrency, targets.__getitem__,
                                                       stmt.result_metadata):
                    if not isinstance(answer, ResultMessage):
                        raise DirectRefused(answer)
                    done.add(i)
                    yield i, (IN_PLACE if filled else (answer.parsed_rows[0][0] if answer.parsed_rows else None))
        except Exception:  # counted where the connection was dropped (connected)
            return

    def read_head(self, key: ObjectKey, in_place: bool):
        """The head row of ``key`` on the direct connection (:meth:`send`): ``(row, sink)``, False
        for no row, or None to read it the session's way. With ``in_place``, an inline object's
        data of ``HEAD_SINK_BYTES`` or more is received into a buffer of its own, as on the
        pool's connections (:func:`.transport.head_sink`)."""
        from cassandra.protocol import ExecuteMessage

        stmt = self.connection.state.prepared["select_head"]
        bound = stmt.bind((key.scope, key.path, HEAD_VERSION, HEAD_GROUP))
        answers = self.send(
            lambda ts: [ExecuteMessage(stmt.query_id, bound.values, stmt.consistency_level,
                                       skip_meta=bool(stmt.result_metadata))],
            bound, stmt.result_metadata, HEAD_SINK_BYTES if in_place else None)
        if answers is None:
            return None
        answer, sink = answers[0], None
        if type(answer) is tuple:
            answer, blob = answer
            sink = Sink(blob)
            sink.filled = True
        if not answer.parsed_rows:
            return False
        manifest, data = answer.parsed_rows[0]
        return HeadRow(manifest, data), sink


def is_unprepared(answer) -> bool:
    """Whether ``answer`` (a message or ``(message, blob)``) is the node's UNPREPARED error."""
    from cassandra.protocol import PreparedQueryNotFound

    return isinstance(answer[0] if type(answer) is tuple else answer, PreparedQueryNotFound)
