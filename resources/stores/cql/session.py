"""The process's driver sessions: one per process, endpoint, login and TLS settings, opened
with the ride-through (a restarting node is waited for, and the wait is announced at WARNING),
and a fresh process's early start (:class:`EarlyStart`: its first put goes out on a pre-opened
connection while the session opens in the background)."""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any, Iterable

from ..errors import StoreUnavailableError
from .options import opts
from .cluster import build_cluster
from .errors import LOCAL_HINT, connect_failure
from .fallbacks import step_aside

#: Python's thread switch interval while an early put waits (the default is 5 ms)
EARLY_SWITCH_INTERVAL_S = 0.0002
_sessions_lock = threading.Lock()
_sessions: dict[tuple, Any] = {}


class DirectSlot:
    """A process's :class:`~.direct_connection.DirectConnection` to one host, and the lock its user
    holds; a thread that finds it taken goes the session's way rather than wait."""

    __slots__ = ("lock", "conn", "retry_at")

    def __init__(self):
        self.lock, self.conn, self.retry_at = threading.Lock(), None, 0.0


#: ``(session_key, address, port)`` -> the process's direct connection to that host
direct_slots: dict[tuple, DirectSlot] = {}


def direct_slot(key: tuple) -> DirectSlot:
    slot = direct_slots.get(key)
    if slot is None:
        with _sessions_lock:
            slot = direct_slots.setdefault(key, DirectSlot())
    return slot
log = logging.getLogger("asgard.resources.stores.cql")


def connect(contact_points: tuple[str, ...], port: int, username: str | None, password: str | None,
             connect_timeout: float, ride_through_seconds: float = 0.0, tls: tuple | None = None):
    """One driver Cluster/Session per process, endpoint, login and TLS settings (a forked step gets
    its own). A node that refuses connections (restarting) is tried again for
    ``ride_through_seconds``; a refused login or TLS mismatch fails at once, saying what to fix.
    ``tls``: ``(ca_file, certfile, keyfile, verify_hostname)`` or None for a plain connection."""
    deadline = time.monotonic() + ride_through_seconds
    announced = False
    while True:
        try:
            return _connect_once(contact_points, port, username, password, connect_timeout, tls)
        except StoreUnavailableError as exc:
            hint, retry = connect_failure(exc.__cause__, contact_points, port, tls, connect_timeout)
            left = deadline - time.monotonic()
            if not retry or left <= 0:
                raise StoreUnavailableError(exc.backend, exc.where, hint, exc.__cause__) from exc.__cause__
            if not announced:  # said at once: a wrong address must not wait a minute in silence
                announced = True
                log.warning("cannot reach Cassandra at %s (%s); trying again for up to %.0f s more "
                            "(ride_through_seconds), then failing with StoreUnavailableError. %s",
                            exc.where, _cause(exc.__cause__), left, hint)
            time.sleep(0.5)


def _cause(exc: BaseException | None) -> str:
    """The driver's reason in one line: NoHostAvailable's per-host errors, or the exception."""
    errors = getattr(exc, "errors", None)
    if isinstance(errors, dict) and errors:
        return "; ".join(f"{host}: {error}" for host, error in errors.items())
    return repr(exc)


def session_key(contact_points: tuple[str, ...], port: int, username: str | None, password: str | None,
                 tls: tuple | None) -> tuple:
    # the password and the TLS settings are part of the identity: a wrong password or a plain
    # connection must not reuse a session opened with good ones
    return (os.getpid(), contact_points, port, username, hash(password), tls, opts().fast_read)


def _open(cluster, contact_points: tuple[str, ...], port: int, drop: bool = True):
    """``cluster.connect()``, its connect errors as :class:`StoreUnavailableError`; with ``drop``,
    the pre-opened connections no pool took are closed afterwards."""
    from cassandra.cluster import NoHostAvailable

    try:
        return cluster.connect()
    except (NoHostAvailable, OSError) as exc:
        cluster.shutdown()
        where = ",".join(f"{h}:{port}" for h in contact_points)
        raise StoreUnavailableError("Cassandra", where, LOCAL_HINT, exc) from exc
    finally:
        if drop:
            cluster.drop_preopened()


def _connect_once(contact_points: tuple[str, ...], port: int, username: str | None, password: str | None,
                  connect_timeout: float, tls: tuple | None = None):
    key = session_key(contact_points, port, username, password, tls)
    with _sessions_lock:
        cached = _sessions.get(key)
        if not isinstance(cached, EarlyStart):
            if cached is not None and not cached.is_shutdown:
                return cached
            cluster = build_cluster(contact_points, port, username=username, password=password, connect_timeout=connect_timeout, tls=tls)
            if opts().preopen:
                cluster.preopen()
            session = _open(cluster, contact_points, port)
            _sessions[key] = session
            return session
    return cached.session(connect_timeout)  # opened in the background (outside the lock: it takes it)


class EarlyStart:
    """A fresh process's session, opened in the background while the first put goes out on the
    pre-opened connection (:meth:`send`). Without it, a step's first put waited for the whole
    connect: the control connection's REGISTER and topology reads took 4-5 ms of a first put's
    10-11 ms here, and the put itself went out only after them. The pre-opened connection is
    the one the session's pool takes (:func:`_cluster_class`), authenticated and with the same
    TLS. Until the session is up, :data:`_sessions` holds this object; the next request that
    needs the session waits for it (:meth:`session`)."""

    def __init__(self, key: tuple, cluster, contact_points: tuple[str, ...], port: int, connect_timeout: float):
        from concurrent.futures import Future

        self.key, self.cluster = key, cluster
        self._opened: Future = Future()
        self._sent = threading.Event()
        cluster.preopen()
        self._first_connection = cluster.preopened_futures[0] if cluster.preopened_futures else None
        threading.Thread(target=self._run, args=(contact_points, port, connect_timeout), name="asgard-connect",
                         daemon=True).start()

    def _run(self, contact_points, port, connect_timeout) -> None:
        try:
            session = _open(self.cluster, contact_points, port, drop=False)
        except BaseException as exc:
            with _sessions_lock:
                if _sessions.get(self.key) is self:
                    del _sessions[self.key]
            self._opened.set_exception(exc)
            self.cluster.drop_preopened()
            return
        with _sessions_lock:
            if _sessions.get(self.key) is self:
                _sessions[self.key] = session
        self._opened.set_result(session)
        # a pre-opened connection no pool took is closed once the early requests are done with it
        self._sent.wait(connect_timeout)
        self.cluster.drop_preopened()

    def release(self) -> None:
        """The early requests are done (or none will be sent)."""
        self._sent.set()

    def session(self, connect_timeout: float):
        from concurrent.futures import TimeoutError as FutureTimeout

        try:
            return self._opened.result(timeout=connect_timeout + 5.0)
        except FutureTimeout as exc:
            raise StoreUnavailableError("Cassandra", ",".join(str(e) for e in self.cluster.contact_points), LOCAL_HINT,
                                        exc) from exc

    def send(self, messages: list, timeout: float) -> list | None:
        """``(ok, response or error)`` for each message, sent together on the pre-opened
        connection; None if that connection is not there (the caller then goes the session's way)."""
        try:
            if self._first_connection is None:
                step_aside("early", "no pre-opened connection (more than one contact point?)", warn=False)
                return None
            conn = self._first_connection.result(timeout=timeout)
            if conn is None or conn.is_closed or conn.is_defunct:
                step_aside("early", "the pre-opened connection failed or closed")
                return None
            # the session opens on another thread meanwhile, running Python: at the default 5 ms
            # switch interval the sender (and the reactor, with the answer) waited that long at a
            # time for the GIL
            interval = sys.getswitchinterval()
            sys.setswitchinterval(min(interval, EARLY_SWITCH_INTERVAL_S))
            try:
                # fail_on_error=False: an error answer (no table yet, a statement the node does not
                # hold) is returned, and does not defunct the connection the pool is taking
                return conn.wait_for_responses(*messages, timeout=timeout, fail_on_error=False)
            finally:
                sys.setswitchinterval(interval)
        except Exception as exc:
            # a node that cannot be reached: the connect says so (session.connect), not this path
            unreachable = isinstance(exc, OSError) or type(exc).__name__ == "ConnectionException"
            step_aside("early", "sending on the pre-opened connection failed", exc, warn=not unreachable)
            return None


def early_start(contact_points: tuple[str, ...], port: int, username: str | None, password: str | None,
                 connect_timeout: float, tls: tuple | None) -> EarlyStart | None:
    """An :class:`EarlyStart` for a process that has no session to this cluster yet, else None
    (also when connections are not pre-opened: there is none to send on)."""
    if not opts().preopen:
        return None
    key = session_key(contact_points, port, username, password, tls)
    with _sessions_lock:
        if key in _sessions:
            return None
        early = EarlyStart(key, build_cluster(contact_points, port, username=username, password=password, connect_timeout=connect_timeout, tls=tls),
                            contact_points, port, connect_timeout)
        _sessions[key] = early
        return early


def close_sessions(contact_points: Iterable[str] | None = None) -> None:
    """Shut down every cached driver session of this process, or with ``contact_points`` those
    whose contact points are all among them (a cluster this process is done with). A session to a
    node that has gone keeps a reconnection timer, which at interpreter exit fails noisily ("cannot
    schedule new futures after shutdown"); a long-lived process that is done with Cassandra calls this."""
    gone = None if contact_points is None else set(contact_points)

    def done_with(key: tuple) -> bool:  # a session key: (pid, contact points, port, ...)
        return key[0] == os.getpid() and (gone is None or set(key[1]) <= gone)

    with _sessions_lock:
        sessions = [_sessions.pop(key) for key in list(_sessions) if gone is None or done_with(key)]
    for session in sessions:
        session.cluster.shutdown()
    with _sessions_lock:
        # this process's only: a forked child's copies of its parent's may be locked for good
        slots = [direct_slots.pop(key) for key in list(direct_slots) if done_with(key[0])]
    for slot in slots:
        with slot.lock:
            if slot.conn is not None:
                slot.conn.close()
                slot.conn = None
