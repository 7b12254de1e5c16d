"""Direct requests: a store's small requests, and on a single node its chunk reads, written and
answered on the calling thread, on a blocking connection of the process's own
(:class:`~.direct_connection.DirectConnection`) to the host the driver's token-aware policy would
pick. Anything that fails there, or any answer but a result, goes the session's way
(:mod:`.fallbacks` counts it), which has the driver's retry, reconnection and ride-through; a
put's resend keeps its write timestamp (:func:`.cluster.pinned_timestamp`)."""
from __future__ import annotations

import contextlib
import os
import threading
import time

from ..base import IN_PLACE, ObjectKey
from .fallbacks import step_aside
from .session import direct_slot, session_key
from .statements import HEAD_GROUP, HEAD_VERSION
from .transport import HEAD_SINK_BYTES, Sink

#: after a direct connection fails (a node restarting, a refused login), requests go the
#: session's way for this long before it is opened again
DIRECT_RETRY_SECONDS = 1.0


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
    """A mixin of :class:`~.store.CassandraObjectStore`: its small requests, and on a single node
    its chunk reads, on the process's direct connection to the host the driver would pick."""

    @property
    def _direct(self):
        """This process's established session if requests may go direct, else None: turned off,
        no session yet (a fresh process's first request goes early, :class:`.session.EarlyStart`), a
        protocol the direct connection does not speak, or listeners on the session."""
        session = self._session
        if not self.direct_requests or session is None or self._session_pid != os.getpid() or session.is_shutdown:
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

    def _direct_host(self, routing):
        """The host the driver would send ``routing`` (a bound statement) to, or None if it is down."""
        cluster = self._session.cluster
        hosts = cluster.metadata.all_hosts()
        if len(hosts) == 1:
            host = hosts[0]
        else:
            host = next(iter(cluster._default_load_balancing_policy.make_query_plan(self.keyspace, routing)), None)
        return None if host is None or host.is_up is False else host

    @contextlib.contextmanager
    def _direct_connection(self, host):
        """This process's :class:`~.direct_connection.DirectConnection` to ``host``, held for the block;
        None if another thread holds it, or it failed less than ``DIRECT_RETRY_SECONDS`` ago, or
        it cannot be opened. An exception out of the block closes it (its state is unknown)."""
        from .direct_connection import DirectConnection

        session = self._session
        address, port = host.endpoint.address, host.endpoint.port
        slot = direct_slot((session_key(self.contact_points, self.port, self.username, self.password, self.tls),
                            address, port))
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
                            address, port, cluster.protocol_version, self.request_timeout, self.connect_timeout,
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
                if isinstance(exc, Exception):
                    step_aside("direct", "the direct connection failed", f"{address}:{port}: {exc!r}")
                    slot.retry_at = time.monotonic() + DIRECT_RETRY_SECONDS
                raise
        finally:
            slot.lock.release()

    def _send_direct(self, messages, routing, result_metadata=None, sink_min_bytes: int | None = None):
        """Send ``messages(timestamp)`` on the direct connection (:meth:`_direct_connection`) to
        the host the driver would pick for ``routing`` (a bound statement), and return their
        answers; None (the caller sends them the session's way, which retries and maps errors)
        if any is not a result, the connection fails, or another thread is using it."""
        from cassandra.protocol import ResultMessage

        host = self._direct_host(routing)
        if host is None:
            return None
        try:
            with self._direct_connection(host) as conn:
                if conn is None:
                    return None
                msgs = messages(self._session.cluster.timestamp_generator())
                if len(msgs) == 1:
                    answers = [conn.request(msgs[0], result_metadata, sink_min_bytes)]
                else:
                    answers = conn.requests(msgs)
        except Exception:  # counted where the connection was dropped (_direct_connection)
            return None
        if all(isinstance(a[0] if type(a) is tuple else a, ResultMessage) for a in answers):
            return answers
        step_aside("direct", "the node answered other than with a result",
                   next(a for a in answers if not isinstance(a[0] if type(a) is tuple else a, ResultMessage)))
        return None

    def _read_chunks_direct(self, key: ObjectKey, version: str, count: int, targets: list[memoryview],
                            done: set):
        """Chunks ``(i, IN_PLACE or data)`` read on the direct connection, ``concurrency`` in
        flight, each blob received into its target on the calling thread; ``done`` collects
        the indexes yielded. Stops early (the caller reads the rest the session's way) if the
        connection is not there or fails, or the node answers other than with a result. A
        single node only: on a ring each chunk's replica differs, and the pool routes them."""
        from cassandra.protocol import ExecuteMessage, ResultMessage

        session = self._session
        hosts = session.cluster.metadata.all_hosts()
        if len(hosts) != 1 or hosts[0].is_up is False:
            return
        stmt = self._statement("select_chunk")
        per, skip = self.chunks_per_partition, bool(stmt.result_metadata)
        items = ((i, ExecuteMessage(stmt.query_id, stmt.bind((key.scope, key.path, version, i // per, i)).values,
                                    stmt.consistency_level, skip_meta=skip)) for i in range(count))
        try:
            with self._direct_connection(hosts[0]) as conn:
                if conn is None:
                    return
                for i, answer, filled in conn.pipeline(items, self.concurrency, targets.__getitem__,
                                                       stmt.result_metadata):
                    if not isinstance(answer, ResultMessage):
                        raise DirectRefused(answer)
                    done.add(i)
                    yield i, (IN_PLACE if filled else (answer.parsed_rows[0][0] if answer.parsed_rows else None))
        except Exception:  # counted where the connection was dropped (_direct_connection)
            return

    def _read_head_direct(self, key: ObjectKey):
        """The head row of ``key`` on the direct connection (:meth:`_send_direct`): ``(row, sink)``,
        False for no row, or None to read it the session's way. An inline object's data of
        ``HEAD_SINK_BYTES`` or more is received into a buffer of its own, as on the pool's
        connections (:meth:`_head_sink`)."""
        from cassandra.protocol import ExecuteMessage

        stmt = self._prepared["select_head"]
        bound = stmt.bind((key.scope, key.path, HEAD_VERSION, HEAD_GROUP))
        answers = self._send_direct(
            lambda ts: [ExecuteMessage(stmt.query_id, bound.values, stmt.consistency_level,
                                       skip_meta=bool(stmt.result_metadata))],
            bound, stmt.result_metadata, HEAD_SINK_BYTES if self._receives_in_place else None)
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

