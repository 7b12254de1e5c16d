"""What a driver error means for the store: the hints a typed error carries, which failures are
worth sending again (a restarting node, a full socket, a table that is settling), and what a
first connection that failed says about the cluster (login, TLS, nothing listening)."""
from __future__ import annotations

import logging

LOCAL_HINT = "Start the local node with `asgard cassandra up`, or point contact_points/port at your cluster."
NEEDS_TLS_HINT = (
    "The node requires TLS and this client connected without it: set ssl_ca_file to the CA that signed the "
    "node's certificate (a node of `asgard cassandra up --secure` keeps it in its conf/tls/ca.pem), and "
    "username/password (EnvVar) to a role of the node.")
NO_TLS_HINT = ("The TLS handshake failed: check that the node has client_encryption_options enabled on this "
               "port, or leave ssl_ca_file unset for a node without TLS.")
CERT_HINT = (
    "The node's certificate does not verify against ssl_ca_file: point ssl_ca_file at the CA that signed it (for a "
    "node of `asgard cassandra up --secure`, its conf/tls/ca.pem). If you connect by a name or address that the "
    "certificate does not list, connect by one it lists; ssl_verify_hostname=False skips only the name check.")
AUTH_HINT = (
    "The node refused the login: check username and password (the EnvVars they come from). A node of `asgard "
    "cassandra up --secure` has the superuser asgard_admin, its password in the node's superuser.password.")


class _MissingSchemaFilter:
    """The driver logs every failed prepare at ERROR; a keyspace or table that does not exist
    yet is the normal first use here (the store creates it and prepares again)."""

    def filter(self, record) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        text = str(exc).lower() if exc else ""
        return not (record.getMessage().startswith("Error preparing query")
                    and ("does not exist" in text or "unconfigured table" in text))


logging.getLogger("cassandra.cluster").addFilter(_MissingSchemaFilter())


def is_busy(exc: BaseException) -> bool:
    """True for the driver's "Connection ... is overloaded": its socket buffer is full."""
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionBusy

    if isinstance(exc, ConnectionBusy):
        return True
    return isinstance(exc, NoHostAvailable) and bool(exc.errors) and all(
        isinstance(e, ConnectionBusy) for e in exc.errors.values())


def restart_errors() -> tuple[type[BaseException], ...]:
    """The driver's exceptions that a node stopping, starting or stalling raises on its own (not in
    ``NoHostAvailable``): one declaration for :func:`is_reconnecting` and the store's resends."""
    from cassandra import OperationTimedOut, ReadTimeout, Unavailable, WriteTimeout
    from cassandra.connection import ConnectionException
    from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage

    # A ring member's JVM stalls 6-14 s under load ("local pause" in its system.log, once with its
    # CQL port open) and keeps its connections open: a prepare sent to it times out at 10 s.
    # A draining node answers "Server is shutting down" as Overloaded (code 1001) before it closes
    # the socket (a CI run failed on exactly that); a starting one answers IsBootstrapping. The
    # driver raises either bare where it re-prepared a statement the restarted node forgot
    # (ResponseFuture._execute_after_prepare; CI: a ride-through run's head read), else in NoHostAvailable.
    return (ConnectionException, Unavailable, ReadTimeout, WriteTimeout, OperationTimedOut,
            OverloadedErrorMessage, IsBootstrappingErrorMessage)


def is_reconnecting(exc: BaseException) -> bool:
    """True for a connection the driver lost and is re-establishing, a node that is stopping
    or starting (the node restarted, a retune does that, or dropped the socket), or a replica
    that is down or draining: ``Unavailable`` (fewer replicas alive than the consistency needs,
    even after :class:`RideThroughRetryPolicy` lowered it: replication factor 1 with its one
    replica restarting) or a ``Read``/``WriteTimeout`` (a replica that stopped answering as it
    drained), or a node that stopped answering at all: ``OperationTimedOut``, the driver's own
    timeout (a prepare's is the session's 10 s), on a connection that stays open while the node's
    JVM stalls. Every statement here is idempotent (an INSERT of the same cells, a DELETE), so it
    is safe to send again, for ``ride_through_seconds`` at most."""
    from cassandra import OperationTimedOut
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionException
    from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage

    if isinstance(exc, restart_errors()):
        return True
    transient = (ConnectionException, OSError, OperationTimedOut, OverloadedErrorMessage, IsBootstrappingErrorMessage)
    return isinstance(exc, NoHostAvailable) and all(
        isinstance(e, transient) for e in (exc.errors or {}).values())


def is_disk_full(exc: BaseException) -> bool:
    """True for a write a replica refused because its data disk is past the node's
    ``data_disk_usage_percentage_fail_threshold`` guardrail (Cassandra 4.1+; applies to roles
    that are not superusers, as an application's role should be)."""
    from cassandra import InvalidRequest
    from cassandra.cluster import NoHostAvailable

    errors = list((exc.errors or {}).values()) if isinstance(exc, NoHostAvailable) else [exc]
    return bool(errors) and all(isinstance(e, InvalidRequest) and "disk usage exceeds" in str(e) for e in errors)


FULL_HINT = ("Free disk on the replicas: purge finished runs (make_purge_on_success_sensor, or purge_run), "
             "lower ttl_seconds so old outputs expire sooner, or add disk or nodes (the limit is the node's "
             "data_disk_usage_percentage_fail_threshold). Outputs already stored are unchanged.")


def is_schema_settling(exc: BaseException) -> bool:
    """True for a table whose schema is visible but not yet usable on a node: a fresh
    deployment's first parallel steps race to create it, and one that finds it already made
    (``IF NOT EXISTS``) can write before the node has opened it ("Unknown CF"; a CI run met it
    once in 64 first puts). It clears within milliseconds, so the request is sent again."""
    from cassandra import InvalidRequest
    from cassandra.cluster import NoHostAvailable
    from cassandra.protocol import ServerError

    errors = list((exc.errors or {}).values()) if isinstance(exc, NoHostAvailable) else [exc]
    return bool(errors) and all(
        isinstance(e, (ServerError, InvalidRequest)) and ("Unknown CF" in str(e) or "unconfigured table" in str(e))
        for e in errors)


def is_replica_schema_behind(exc: BaseException) -> bool:
    """True for a write or read a replica refused because its schema is behind the coordinator's
    (``INCOMPATIBLE_SCHEMA``): the coordinator knows the table, the replica not yet (a keyspace made,
    or a member restarted, moments before; CI met it once: a rolling retune's first run, its put
    at LOCAL_QUORUM refused by the member restarted). It clears once the replica has the schema, and
    every statement the store sends is idempotent, so the request is sent again."""
    from cassandra import CoordinationFailure
    from cassandra.cluster import NoHostAvailable

    errors = list((exc.errors or {}).values()) if isinstance(exc, NoHostAvailable) else [exc]
    return bool(errors) and all(isinstance(e, CoordinationFailure) and "INCOMPATIBLE_SCHEMA" in str(e)
                                for e in errors)


def speaks_tls(host: str, port: int, timeout: float) -> bool:
    """True if ``host:port`` completes a TLS handshake (certificate not checked): tells a node that
    requires TLS from one that is down, when a plain connection failed."""
    import socket
    import ssl

    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname, probe.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            with probe.wrap_socket(sock):
                return True
    except (OSError, ValueError):
        return False


AUTH_UNAVAILABLE_HINT = (
    "The node could not check the login: too few replicas of system_auth answered (members down or "
    "restarting). It is tried again for ride_through_seconds; if it lasts, bring the members back up, and "
    "give system_auth a replica on every host (NetworkTopologyStrategy) so that one host down leaves a quorum.")
#: how Cassandra's PasswordAuthenticator words a login it could not check (its roles read failed),
#: as against a login it refused ("Provided username ... and/or password are incorrect")
AUTH_NOT_PERFORMED = "Unable to perform authentication"


def connect_failure(exc: BaseException, contact_points: tuple[str, ...], port: int, tls: tuple | None,
             connect_timeout: float) -> tuple[str, bool]:
    """``(hint, worth retrying)`` for a first connection that failed."""
    import ssl

    from cassandra import AuthenticationFailed

    # NoHostAvailable carries {host: exception} from the control connection, but a plain list of
    # hosts when the session's pools all failed after it (a node going down between the two)
    raw = getattr(exc, "errors", None)
    errors = list(raw.values() if isinstance(raw, dict) else []) or [exc]
    refused = [e for e in errors if isinstance(e, AuthenticationFailed)]
    if refused and all(AUTH_NOT_PERFORMED in str(e) for e in refused):
        return AUTH_UNAVAILABLE_HINT, True  # system_auth's replicas down: passes like a restart
    if refused:
        return AUTH_HINT, False
    if tls is not None:
        # the driver re-raises a failed handshake as a plain OSError carrying the SSL message
        if any(isinstance(e, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(e) for e in errors):
            return CERT_HINT, False
        if any(isinstance(e, ssl.SSLError) or "[SSL" in str(e) for e in errors):
            return NO_TLS_HINT, False
    elif any(speaks_tls(h, port, connect_timeout) for h in contact_points):
        return NEEDS_TLS_HINT, False  # a plain client will never get in: no ride-through wait
    return LOCAL_HINT, True
