"""Sending again: the driver's retry policy of every store session (:func:`ride_through_retry_policy`)
and the store's own resends (:class:`Requests`): a restarting node ridden through for
``ride_through_seconds``, a full socket buffer backed off, a table still settling waited for,
and what is left mapped to the store's typed errors. Every statement the store sends is
idempotent, and a put's rows keep their write timestamp across resends
(:func:`.cluster.pinned_timestamp`), so a resend stores the same cells and never overwrites a
newer write."""
from __future__ import annotations

import time
from typing import Any, Iterator

from ..errors import StoreFullError, StoreUnavailableError
from .errors import (FULL_HINT, LOCAL_HINT, is_busy, is_disk_full, is_reconnecting, is_replica_schema_behind,
                     is_schema_settling, restart_errors)
from .transport import Sink, into


#: chunk groups a stream's index row names ahead of the ones written (one index write per 64)
STREAM_GROUPS_AHEAD = 64
#: how long a request resends while a new table settles (it took milliseconds when seen)
SCHEMA_SETTLE_SECONDS = 10.0


def ride_through_retry_policy():
    """The driver retry policy of every store session: a request at ``QUORUM``/``LOCAL_QUORUM``
    that the coordinator refuses as ``Unavailable`` (a replica is known down: a member is
    restarting) is sent once more at ``ONE``/``LOCAL_ONE``; anything else as the driver's default.

    Why this is safe for this store (replication factor 2, a rolling restart). While every
    replica is up, reads and writes are at QUORUM, which at RF 2 is both replicas: a read sees
    every acknowledged write. Only while a replica is down (the coordinator says so) does a
    request fall to one replica, and that is the one live replica, which holds (a) every write
    made while both were up (both acknowledged it) and (b) every write made while the other was
    down (it alone took them, and keeps hints for the other). The rolling restart takes the next
    member down only once the hints to the others are delivered
    (``CassandraCluster.wait_hints_delivered``), so (b) holds for every member in turn. And the
    coordinator that says a replica is down is the live one: a restarted member opens its CQL port
    only once it sees its peers up (``CassandraCluster.rolling_restart``); before that, with its
    port open, it refused QUORUM and a request fell to ONE on its own stale replica. Once the
    restarted member is back, QUORUM again asks both replicas and the newer cells win, so a
    reader never takes a replica's stale head (an asset re-materialized while it was down) for
    the current one. ONE throughout would not do: a reader routed to the member just back, before
    its hints arrive, finds no head (a missing output, a failed step) or the previous one.
    ``ALL``, ``TWO``, ``THREE`` and ``EACH_QUORUM`` are never lowered: who asks for them gets
    them, and waits out a restart (``ride_through_seconds``) or fails."""
    from cassandra import ConsistencyLevel
    from cassandra.policies import RetryPolicy

    lower = {ConsistencyLevel.QUORUM: ConsistencyLevel.ONE, ConsistencyLevel.LOCAL_QUORUM: ConsistencyLevel.LOCAL_ONE}

    class RideThroughRetryPolicy(RetryPolicy):
        def on_unavailable(self, query, consistency, required_replicas, alive_replicas, retry_num):
            if consistency in lower and alive_replicas >= 1 and retry_num == 0:
                return self.RETRY, lower[consistency]
            return super().on_unavailable(query, consistency, required_replicas, alive_replicas, retry_num)

    return RideThroughRetryPolicy()


def execute_when_writable(session, statement, params=None, timeout: float = 60.0):
    """``session.execute``, sent again while the driver refuses it unsent because the connection's
    socket buffer is full ("Connection ... is overloaded": nothing went out, so any statement may go
    again), for ``timeout`` at most: a session whose runs keep writes in flight (a retune's ALTER
    on the store's own session under the live-dip workload failed so in CI)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return session.execute(statement, params, timeout=timeout)
        except Exception as exc:
            if not is_busy(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def release(future) -> None:
    """A finished ResponseFuture and its (cancelled) timer refer to each other, so it and the
    chunk it carries waited for Python's cycle collector: 100 MiB of a 256 MiB read was such
    garbage. Dropping the timer frees both as soon as the caller is done with them."""
    future._timer = None



class Requests:
    """The store's requests through the driver's session, sent again while that is worth it, and
    what is left mapped to the store's typed errors.

    Args:
        connection: the store's :class:`~.connection.Connection` (its session and endpoint).
    """

    def __init__(self, connection):
        self.connection = connection

    def execute(self, session, statement, params=None, prepare=False):
        """``session.execute(statement, params)`` (or ``session.prepare(statement)``), resent
        while a node restarts or a new table settles; a failure as a typed store error."""
        from cassandra import CoordinationFailure, InvalidRequest
        from cassandra.cluster import NoHostAvailable
        from cassandra.protocol import ServerError

        endpoint = self.connection.endpoint
        start = time.monotonic()
        deadline = start + endpoint.reconnect_window
        while True:
            try:
                if prepare:
                    return session.prepare(statement)
                return execute_when_writable(session, statement, params, endpoint.request_timeout)
            except (NoHostAvailable, ServerError, CoordinationFailure) as exc:
                if not prepare and is_schema_settling(exc) and time.monotonic() < start + SCHEMA_SETTLE_SECONDS:
                    time.sleep(0.05)
                    continue
                if is_replica_schema_behind(exc) and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                if not isinstance(exc, NoHostAvailable):
                    raise
                if is_reconnecting(exc) and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                raise StoreUnavailableError("Cassandra", endpoint.where, LOCAL_HINT, exc) from exc
            except restart_errors() as exc:
                # a restarting node: the driver reconnects within its back-off (0.2 s, doubling to 5 s)
                if is_reconnecting(exc) and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                raise StoreUnavailableError("Cassandra", endpoint.where, LOCAL_HINT, exc) from exc
            except InvalidRequest as exc:
                if is_disk_full(exc):
                    raise StoreFullError("Cassandra", endpoint.where, str(exc), FULL_HINT) from exc
                raise

    def pipelined(self, items: Iterator[tuple[Any, Any, tuple]], concurrency: int,
                  sinks: dict[Any, Sink] | None = None) -> Iterator[tuple[Any, list]]:
        """Run prepared statements ``(tag, statement, params)`` with at most ``concurrency``
        requests in flight, yielding ``(tag, rows)`` as they complete. The next item is not pulled
        until a slot frees (backpressure); a request the driver refuses because its socket is full
        ("Connection ... is overloaded") is retried after a short pause instead of failing.
        A request whose tag has a sink in ``sinks`` may have its blob received into it."""
        import queue
        from collections import deque

        session = self.connection.session
        timeout = self.connection.endpoint.request_timeout
        reconnect_deadline: float | None = None
        done: queue.Queue = queue.Queue()
        pending: dict = {}
        retries: deque = deque()
        items = iter(items)
        exhausted, in_flight = False, 0

        def submit(tag, statement, params, attempt):
            future = into(sinks.get(tag) if sinks else None, session.execute_async, statement, params,
                          timeout=timeout)
            pending[id(future)] = future
            future.add_callbacks(
                lambda rows, f=id(future): done.put((f, tag, statement, params, attempt, rows, None)),
                lambda exc, f=id(future): done.put((f, tag, statement, params, attempt, None, exc)),
            )

        while True:
            while in_flight < concurrency and (retries or not exhausted):
                if retries:
                    submit(*retries.popleft())
                else:
                    try:
                        tag, statement, params = next(items)
                    except StopIteration:
                        exhausted = True
                        break
                    submit(tag, statement, params, 0)
                in_flight += 1
            if in_flight == 0:
                return
            key, tag, statement, params, attempt, rows, exc = done.get()
            in_flight -= 1
            release(pending.pop(key))
            if exc is None:
                yield tag, rows
            elif is_busy(exc) and attempt < 200:
                time.sleep(min(0.0005 * 2 ** min(attempt, 8), 0.05))
                retries.append((tag, statement, params, attempt + 1))
            elif is_schema_settling(exc) and attempt < SCHEMA_SETTLE_SECONDS / 0.05:
                time.sleep(0.05)
                retries.append((tag, statement, params, attempt + 1))
            elif is_reconnecting(exc) or is_replica_schema_behind(exc):
                # a restarting node, or a replica yet to get the schema: resend for the ride-through at most
                if reconnect_deadline is None:
                    reconnect_deadline = time.monotonic() + self.connection.endpoint.reconnect_window
                if time.monotonic() >= reconnect_deadline:
                    raise self.map_error(exc) from exc
                time.sleep(0.2)
                retries.append((tag, statement, params, attempt + 1))
            else:
                raise self.map_error(exc) from exc

    def map_error(self, exc: BaseException) -> BaseException:
        """The store's typed error for a driver error a request ended with (others as they are)."""
        from cassandra.cluster import NoHostAvailable

        where = self.connection.endpoint.where
        if is_disk_full(exc):
            return StoreFullError("Cassandra", where, str(exc), FULL_HINT)
        if isinstance(exc, (NoHostAvailable, *restart_errors())):
            return StoreUnavailableError("Cassandra", where, LOCAL_HINT, exc)
        return exc
