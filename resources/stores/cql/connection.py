"""A store's connection to its cluster: where and how it connects (:class:`Endpoint`), this
process's driver session (:class:`Connection`), and what is known on that session
(:class:`SessionState`). The store's other collaborators (:mod:`.retry`, :mod:`.statements`,
:mod:`.early`, :mod:`.direct`, :mod:`.senders`) take a :class:`Connection` as an argument."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .session import connect, session_key


@dataclass(frozen=True)
class Endpoint:
    """Where a store connects and how: the contact points and port, the login, TLS, and the
    timeouts of its requests.

    Attributes:
        contact_points, port: hosts to contact first and their CQL port.
        username, password: PasswordAuthenticator credentials, or None.
        tls: ``(ca_file, certfile, keyfile, verify_hostname)``, or None for plain connections.
        connect_timeout, request_timeout: seconds.
        ride_through_seconds: how long a request keeps resending while a node restarts.
    """

    contact_points: tuple[str, ...]
    port: int
    username: str | None
    password: str | None = field(repr=False)
    tls: tuple | None
    connect_timeout: float
    request_timeout: float
    ride_through_seconds: float

    @property
    def where(self) -> str:
        """``host:port,...``, as errors name the cluster."""
        return ",".join(f"{h}:{self.port}" for h in self.contact_points)

    @property
    def reconnect_window(self) -> float:
        """Seconds a request resends while the driver reconnects to a restarting node."""
        return max(self.connect_timeout, self.ride_through_seconds)

    def session_key(self) -> tuple:
        """The key of this process's driver session for this endpoint (:func:`.session.session_key`)."""
        return session_key(self.contact_points, self.port, self.username, self.password, self.tls)


class SessionState:
    """What a store knows of one driver session; a new session starts a new one.

    Attributes:
        prepared: statements prepared on the session, by name.
        preparing: prepares under way in the background (futures), by name.
        routed: the keyspaces whose replication the driver was given (token-aware routing).
        batch_warn: the connected node's ``batch_size_warn_threshold`` in bytes, once read.
        batch_warn_reading: whether that read is under way.
    """

    __slots__ = ("prepared", "preparing", "routed", "batch_warn", "batch_warn_reading")

    def __init__(self):
        self.prepared: dict[str, Any] = {}
        self.preparing: dict[str, Any] = {}
        self.routed: set[str] = set()
        self.batch_warn: int | None = None
        self.batch_warn_reading = False


class Connection:
    """This process's driver session to an :class:`Endpoint` (one per process: a forked step opens
    its own), and the :class:`SessionState` that goes with it.

    Attributes:
        endpoint: the :class:`Endpoint`.
        state: the :class:`SessionState` of the current session.
        early_cluster: the driver ``Cluster`` a fresh process's first request went through while
            its session opened (:class:`.session.EarlyStart`); the session it becomes keeps the
            statements that request filed.
    """

    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        self.state = SessionState()
        self.early_cluster = None
        self._session, self._pid = None, None

    @property
    def session(self):
        """This process's session, opened (with the ride-through) if there is none yet."""
        session = self._session
        if session is None or session.is_shutdown or self._pid != os.getpid():
            e = self.endpoint
            session = connect(e.contact_points, e.port, e.username, e.password, e.connect_timeout,
                              e.ride_through_seconds, e.tls)
            # statements known before the session (an early first put or get) were filed with its cluster
            if session is not self._session and not (self._session is None and session.cluster is self.early_cluster):
                self.state = SessionState()
            self._session, self._pid = session, os.getpid()
        return session

    @property
    def fresh(self) -> bool:
        """No session in this process yet (a step's first request)."""
        return self._session is None or self._pid != os.getpid()

    def established(self):
        """This process's open session, or None if there is none yet (or it was shut down)."""
        session = self._session
        if session is None or self._pid != os.getpid() or session.is_shutdown:
            return None
        return session
