"""The one chain a small put's rows and a head read go through, fastest first.

* ``early``: a fresh process's first request, on the pre-opened connection while its session
  still opens (:class:`.session.EarlyStart`);
* ``first``: a first request before its statement is prepared, by the statement's computed
  prepared id or as text (:class:`.early.FirstRequests`);
* ``direct``: the process's own connection to the host the driver would pick, answered on the
  calling thread (:class:`.direct.DirectRequests`);
* ``session``: the driver's pool, which prepares, retries and maps errors (:mod:`.retry`).

Each sender sends, or steps aside and the next one tries: a sender steps aside when it does not
apply (the statement is prepared already, the process has a session, the session has request
listeners) or when what it tried failed; the reason goes to :mod:`.fallbacks` (a WARNING once
per process and reason, and a count) where stepping aside is not the normal course. The session
never steps aside: what fails there is retried or raised typed. Every resend of a put keeps the
put's one write timestamp (:func:`.cluster.pinned_timestamp`), so a put that went through the
node on one sender and is resent on the next never lands on top of a newer put.

Usage (inside :class:`~.store.CassandraObjectStore`)::

    taken = put_rows(store, RowsPut(head, index, batched=True, first=True))   # "direct", ...
    found = read_head(store, key)   # (row, sink), or False for no head row
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..base import ObjectKey
from .fallbacks import ProcessCounts
from .options import opts
from .retry import release
from .statements import HEAD_GROUP, HEAD_VERSION


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


class Sender:
    """One way to send. ``put`` returns True once the rows are written, False to step aside;
    ``read_head`` returns ``(row, sink)``, False for no row, or None to step aside."""

    name = ""

    def put(self, store, rows: RowsPut) -> bool:
        return False

    def read_head(self, store, key: ObjectKey):
        return None


def _fresh(store) -> bool:
    """No session in this process yet (a step's first request)."""
    return store._session is None or store._session_pid != os.getpid()


def _first_requests() -> bool:
    return opts().first_requests != "prepare"


class EarlySender(Sender):
    name = "early"

    def put(self, store, rows: RowsPut) -> bool:
        if not (rows.first and _first_requests() and opts().early_first and _fresh(store)):
            return False
        if "insert_head" in store._prepared and "insert_index" in store._prepared:
            return False
        return store._write_early(rows.groups)

    def read_head(self, store, key: ObjectKey):
        if not (_first_requests() and opts().early_first and _fresh(store)) or "select_head" in store._prepared:
            return None
        return store._read_head_early(key)


class FirstSender(Sender):
    name = "first"

    def put(self, store, rows: RowsPut) -> bool:
        if not (rows.first and _first_requests()):
            return False
        if "insert_head" in store._prepared and "insert_index" in store._prepared:
            return False
        return store._write_first(*rows.groups)

    def read_head(self, store, key: ObjectKey):
        if not _first_requests() or "select_head" in store._prepared:
            return None
        return store._read_head_first(key)


class DirectSender(Sender):
    name = "direct"

    def put(self, store, rows: RowsPut) -> bool:
        if store._direct is None:
            return False
        from cassandra.protocol import BatchMessage, ExecuteMessage
        from cassandra.query import BatchType

        bound = [store._statement(name).bind(params) for name, params in rows.requests]
        if rows.batched:
            level = bound[0].prepared_statement.consistency_level

            def messages(ts):
                return [BatchMessage(BatchType.UNLOGGED, [(True, b.prepared_statement.query_id, b.values)
                                                          for b in bound], level, None, ts)]
        else:
            def messages(ts):
                return [ExecuteMessage(b.prepared_statement.query_id, b.values, b.prepared_statement.consistency_level,
                                       timestamp=ts) for b in bound]
        return store._send_direct(messages, bound[0]) is not None

    def read_head(self, store, key: ObjectKey):
        if store._direct is None or "select_head" not in store._prepared:
            return None
        return store._read_head_direct(key)


class SessionSender(Sender):
    name = "session"

    def put(self, store, rows: RowsPut) -> bool:
        if rows.batched:
            from cassandra.query import BatchStatement, BatchType

            bound = [store._statement(name).bind(params) for name, params in rows.requests]
            batch = BatchStatement(BatchType.UNLOGGED)
            for b in bound:
                batch.add(b)
            batch.consistency_level = bound[0].prepared_statement.consistency_level
            batch.is_idempotent = True
            store._execute(store.session, batch)
            return True
        # two requests at once, awaited together: one round trip, without the window machinery
        # of _pipelined
        session = store.session
        statements = [(store._statement(name), params) for name, params in rows.requests]
        futures = [session.execute_async(stmt, params, timeout=store.request_timeout) for stmt, params in statements]
        failed = None
        for future in futures:
            try:
                future.result()
            except Exception as exc:  # resent below through the retrying path, or raised typed
                failed = failed or exc
            release(future)
        if failed is not None:  # idempotent: resend through the path that retries and maps errors
            for _ in store._pipelined((i, name, params) for i, (name, params) in enumerate(rows.requests)):
                pass
        return True

    def read_head(self, store, key: ObjectKey):
        sink = store._head_sink()
        stmt = store._statement("select_head")  # prepared first, if it must be: the sink is the read's
        row = store._into(sink, store._execute, store.session, stmt, (key.scope, key.path, HEAD_VERSION,
                                                                     HEAD_GROUP)).one()
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


def put_rows(store, rows: RowsPut) -> str:
    """Send ``rows`` down the chain; the name of the sender that wrote them."""
    for sender in SENDERS:
        if sender.put(store, rows):
            _took("put", sender.name)
            return sender.name
    raise AssertionError("the session sender never steps aside")  # pragma: no cover


def read_head(store, key: ObjectKey) -> Any:
    """The head row of ``key`` down the chain: ``(row, sink)`` (``sink`` None or the buffer an
    inline value came into), or False for no head row."""
    for sender in SENDERS:
        found = sender.read_head(store, key)
        if found is not None:
            _took("read", sender.name)
            return found
    raise AssertionError("the session sender never steps aside")  # pragma: no cover
