"""The one chain a small put's rows and a head read go through, fastest first.

* ``early``: a fresh process's first request, on the pre-opened connection while its session
  still opens (:class:`.session.EarlyStart`);
* ``first``: a first request before its statement is prepared, by the statement's computed
  prepared id or as text (:class:`.early.FirstRequests`);
* ``direct``: the process's own connection to the host the driver would pick, answered on the
  calling thread (:class:`.direct.DirectRequests`);
* ``session``: the driver's pool, which prepares, retries and maps errors (:class:`.retry.Requests`).

Each sender sends, or steps aside and the next one tries: a sender steps aside when it does not
apply (the statement is prepared already, the process has a session, the session has request
listeners) or when what it tried failed; the reason goes to :mod:`.fallbacks` (a WARNING once
per process and reason, and a count) where stepping aside is not the normal course. The session
never steps aside: what fails there is retried or raised typed. Every resend of a put keeps the
put's one write timestamp (:func:`.cluster.pinned_timestamp`), so a put that went through the
node on one sender and is resent on the next never lands on top of a newer put.

Usage (inside :class:`~.store.CassandraObjectStore`, which builds its :class:`Paths` once)::

    taken = put_rows(paths, RowsPut(head, index, batched=True, first=True))   # "direct", ...
    found = read_head(paths, key)   # (row, sink), or False for no head row
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..base import ObjectKey
from .fallbacks import ProcessCounts
from .options import opts
from .retry import release
from .statements import HEAD_GROUP, HEAD_VERSION
from .transport import head_sink, into


@dataclass(frozen=True)
class RowsPut:
    """A small put's head and index rows (``(statement name, params)`` each): ``batched`` as one
    UNLOGGED batch, else as two requests in flight together; ``first`` when the put may go
    before its statements are prepared (under the batch size limits)."""

    head: tuple[str, tuple]
    index: tuple[str, tuple]
    batched: bool
    first: bool

    @property
    def requests(self) -> tuple[tuple[str, tuple], ...]:
        return self.head, self.index

    @property
    def groups(self) -> tuple[tuple[tuple[str, tuple], ...], ...]:
        """One request per group: a batch of its rows."""
        return ((self.head, self.index),) if self.batched else ((self.head,), (self.index,))


@dataclass(frozen=True)
class Paths:
    """What the chain sends with: a store's connection, statements and requests, the two fast
    ways (first requests and direct), and whether reads are received in place."""

    connection: Any
    statements: Any
    requests: Any
    first: Any
    direct: Any
    in_place: Callable[[], bool]


class Sender:
    """One way to send. ``put`` returns True once the rows are written, False to step aside;
    ``read_head`` returns ``(row, sink)``, False for no row, or None to step aside."""

    name = ""

    def put(self, paths: Paths, rows: RowsPut) -> bool:
        return False

    def read_head(self, paths: Paths, key: ObjectKey):
        return None


def _first_requests() -> bool:
    return opts().first_requests != "prepare"


def _prepared(paths: Paths, *names: str) -> bool:
    prepared = paths.connection.state.prepared
    return all(name in prepared for name in names)


class EarlySender(Sender):
    name = "early"

    def put(self, paths: Paths, rows: RowsPut) -> bool:
        if not (rows.first and _first_requests() and opts().early_first and paths.connection.fresh):
            return False
        if _prepared(paths, "insert_head", "insert_index"):
            return False
        return paths.first.write_early(rows.groups)

    def read_head(self, paths: Paths, key: ObjectKey):
        if not (_first_requests() and opts().early_first and paths.connection.fresh) or _prepared(paths, "select_head"):
            return None
        return paths.first.read_head_early(key)


class FirstSender(Sender):
    name = "first"

    def put(self, paths: Paths, rows: RowsPut) -> bool:
        if not (rows.first and _first_requests()):
            return False
        if _prepared(paths, "insert_head", "insert_index"):
            return False
        return paths.first.write(*rows.groups)

    def read_head(self, paths: Paths, key: ObjectKey):
        if not _first_requests() or _prepared(paths, "select_head"):
            return None
        return paths.first.read_head(key, head_sink(paths.in_place()))


class DirectSender(Sender):
    name = "direct"

    def put(self, paths: Paths, rows: RowsPut) -> bool:
        if paths.direct.session() is None:
            return False
        from cassandra.protocol import BatchMessage, ExecuteMessage
        from cassandra.query import BatchType

        bound = [paths.statements.get(name).bind(params) for name, params in rows.requests]
        if rows.batched:
            level = bound[0].prepared_statement.consistency_level

            def messages(ts):
                return [BatchMessage(BatchType.UNLOGGED, [(True, b.prepared_statement.query_id, b.values)
                                                          for b in bound], level, None, ts)]
        else:
            def messages(ts):
                return [ExecuteMessage(b.prepared_statement.query_id, b.values, b.prepared_statement.consistency_level,
                                       timestamp=ts) for b in bound]
        return paths.direct.send(messages, bound[0]) is not None

    def read_head(self, paths: Paths, key: ObjectKey):
        if paths.direct.session() is None or not _prepared(paths, "select_head"):
            return None
        return paths.direct.read_head(key, paths.in_place())


class SessionSender(Sender):
    name = "session"

    def put(self, paths: Paths, rows: RowsPut) -> bool:
        statements, execute = paths.statements, paths.requests.execute
        if rows.batched:
            from cassandra.query import BatchStatement, BatchType

            bound = [statements.get(name).bind(params) for name, params in rows.requests]
            batch = BatchStatement(BatchType.UNLOGGED)
            for b in bound:
                batch.add(b)
            batch.consistency_level = bound[0].prepared_statement.consistency_level
            batch.is_idempotent = True
            execute(paths.connection.session, batch)
            return True
        # two requests at once, awaited together: one round trip, without the window machinery
        # of Requests.pipelined
        session = paths.connection.session
        timeout = paths.connection.endpoint.request_timeout
        statements_params = [(statements.get(name), params) for name, params in rows.requests]
        futures = [session.execute_async(stmt, params, timeout=timeout) for stmt, params in statements_params]
        failed = None
        for future in futures:
            try:
                future.result()
            except Exception as exc:  # resent below through the retrying path, or raised typed
                failed = failed or exc
            release(future)
        if failed is not None:  # idempotent: resend through the path that retries and maps errors
            items = ((i, stmt, params) for i, (stmt, params) in enumerate(statements_params))
            for _ in paths.requests.pipelined(items, len(statements_params)):
                pass
        return True

    def read_head(self, paths: Paths, key: ObjectKey):
        sink = head_sink(paths.in_place())
        stmt = paths.statements.get("select_head")  # prepared first, if it must be: the sink is the read's
        row = into(sink, paths.requests.execute, paths.connection.session, stmt,
                   (key.scope, key.path, HEAD_VERSION, HEAD_GROUP)).one()
        return False if row is None else (row, sink)


#: the chain, fastest first; the session last, and it never steps aside
SENDERS: tuple[Sender, ...] = (EarlySender(), FirstSender(), DirectSender(), SessionSender())


_taken = ProcessCounts()


def _took(kind: str, name: str) -> None:
    _taken.add((kind, name))


def taken() -> dict[str, int]:
    """``{"put: direct": n, "read: early": n, ...}``: which sender took this process's small puts
    and head reads (since it started, or since :func:`reset`)."""
    return _taken.as_dict()


def reset() -> None:
    _taken.reset()


def put_rows(paths: Paths, rows: RowsPut) -> str:
    """Send ``rows`` down the chain; the name of the sender that wrote them."""
    for sender in SENDERS:
        if sender.put(paths, rows):
            _took("put", sender.name)
            return sender.name
    raise AssertionError("the session sender never steps aside")  # pragma: no cover


def read_head(paths: Paths, key: ObjectKey) -> Any:
    """The head row of ``key`` down the chain: ``(row, sink)`` (``sink`` None or the buffer an
    inline value came into), or False for no head row."""
    for sender in SENDERS:
        found = sender.read_head(paths, key)
        if found is not None:
            _took("read", sender.name)
            return found
    raise AssertionError("the session sender never steps aside")  # pragma: no cover
