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
* The index has one small row per written version in the scope's partition: a put of a small
  object is one request (an UNLOGGED batch of its head and index row, up to ``batch_bytes``;
  above, the two rows sent together), a get one read; a large put sends its index row with its
  chunks, then head and ``committed = true`` together.
  Nothing is read before a write: superseded versions are left to their TTL and to the
  scope's purge, which reads the index and deletes each listed partition, then the index.

Every row is written ``USING TTL``. Chunks are written with a bounded window of asynchronous
requests (the driver's ``execute_async``), the backpressure that keeps the driver from
reporting "Connection ... is overloaded". A small put's rows, a get's head read and (on a
single node) a get's chunk reads go on a blocking connection of the process's own, written and
answered on the calling thread (:mod:`.cql_direct`); anything that fails there goes the
driver's way.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import Any, Iterator

from .base import IN_PLACE, MiB, ObjectKey, ObjectStore, output_buffer
# a RESULT body's last blob found without decoding it, here and on the direct connection
from .cql_direct import RESULT_OPCODE as _RESULT_OPCODE, last_blob_prefix as _last_blob_prefix
from .errors import SchemaLayoutError, StoreConfigError, StoreFullError, StoreUnavailableError

# the columns (and their kind) of the two tables: a table of another layout is refused by name
TABLE_LAYOUT = {"scope": "partition_key", "path": "partition_key", "version": "partition_key",
                "grp": "partition_key", "chunk": "clustering", "manifest": "regular", "data": "regular"}
INDEX_LAYOUT = {"scope": "partition_key", "path": "clustering", "version": "clustering", "groups": "regular",
                "committed": "regular"}
# an object's head row (manifest, and the data of a small object) is in partition (scope, path, '', 0)
HEAD_VERSION, HEAD_GROUP = "", 0
DEFAULT_CHUNK_SIZE = MiB
DEFAULT_CHUNKS_PER_PARTITION = 1
DEFAULT_BATCH_BYTES = int(os.environ.get("ASGARD_CQL_BATCH", str(40 * 1024)))
CASSANDRA_BATCH_WARN_BYTES = 5 * 1024  # Cassandra's default batch_size_warn_threshold
BATCH_MARGIN_BYTES = 1024  # the node counts cells' timestamps and TTLs too


def _storage_bytes(value: str) -> int:
    """Bytes of a Cassandra data-storage setting as ``system_views.settings`` shows it ("5KiB")."""
    units = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
    for unit in ("KiB", "MiB", "GiB", "B"):
        if value.endswith(unit) and value[: -len(unit)].strip().isdigit():
            return int(value[: -len(unit)]) * units[unit]
    return CASSANDRA_BATCH_WARN_BYTES
# chunks are pickled arrays, video, models: mostly incompressible, and the client's codec
# option compresses the rest; Cassandra compressing them again costs CPU on both paths
TABLE_OPTIONS = "compression = {'enabled': 'false'}"
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
CONSISTENCY_LEVELS = ("ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE", "ANY")

_sessions: dict[tuple, Any] = {}


class _MissingSchemaFilter:
    """The driver logs every failed prepare at ERROR; a keyspace or table that does not exist
    yet is the normal first use here (the store creates it and prepares again)."""

    def filter(self, record) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        text = str(exc).lower() if exc else ""
        return not (record.getMessage().startswith("Error preparing query")
                    and ("does not exist" in text or "unconfigured table" in text))


logging.getLogger("cassandra.cluster").addFilter(_MissingSchemaFilter())
log = logging.getLogger(__name__)
_sessions_lock = threading.Lock()


def _is_busy(exc: BaseException) -> bool:
    """True for the driver's "Connection ... is overloaded": its socket buffer is full."""
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionBusy

    if isinstance(exc, ConnectionBusy):
        return True
    return isinstance(exc, NoHostAvailable) and bool(exc.errors) and all(
        isinstance(e, ConnectionBusy) for e in exc.errors.values())


def _is_reconnecting(exc: BaseException) -> bool:
    """True for a connection the driver lost and is re-establishing, a node that is stopping
    or starting (the node restarted, a retune does that, or dropped the socket), or a replica
    that is down or draining: ``Unavailable`` (fewer replicas alive than the consistency needs,
    even after :class:`RideThroughRetryPolicy` lowered it: replication factor 1 with its one
    replica restarting) or a ``Read``/``WriteTimeout`` (a replica that stopped answering as it
    drained). Every statement here is idempotent (an INSERT of the same cells, a DELETE), so it
    is safe to send again, for ``ride_through_seconds`` at most."""
    from cassandra import ReadTimeout, Unavailable, WriteTimeout
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionException
    from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage

    if isinstance(exc, (ConnectionException, Unavailable, ReadTimeout, WriteTimeout)):
        return True
    # A draining node answers "Server is shutting down" as Overloaded (code 1001) before it closes
    # the socket (a CI run failed on exactly that); a starting one answers IsBootstrapping.
    transient = (ConnectionException, OSError, OverloadedErrorMessage, IsBootstrappingErrorMessage)
    return isinstance(exc, NoHostAvailable) and all(
        isinstance(e, transient) for e in (exc.errors or {}).values())


def _is_disk_full(exc: BaseException) -> bool:
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


def _is_schema_settling(exc: BaseException) -> bool:
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


#: chunk groups a stream's index row names ahead of the ones written (one index write per 64)
STREAM_GROUPS_AHEAD = 64

#: how long a request resends while a new table settles (it took milliseconds when seen)
SCHEMA_SETTLE_SECONDS = 10.0


PROTOCOL_VERSION = int(os.environ.get("ASGARD_CQL_PROTOCOL", "4"))
BUFFER_BYTES = int(os.environ.get("ASGARD_CQL_BUFFER", str(1024 * 1024)))
PROTOCOL_COMPRESSION = os.environ.get("ASGARD_CQL_COMPRESSION", "") or False  # e.g. "lz4" on a slow network


def _large_buffer_connection_class():
    """The driver's default reactor (libev) with 1 MiB socket reads and writes instead of 4 KiB:
    a 1 MiB chunk then costs one Python-level socket call each way, not 256 (1 MiB read 13%
    faster than 256 KiB here, and the server spent less CPU per byte sending)."""
    from cassandra.cluster import DefaultConnection

    return type("LargeBufferConnection", (_quick_start_connection_class(DefaultConnection),),
                {"in_buffer_size": BUFFER_BYTES, "out_buffer_size": BUFFER_BYTES})


#: the CQL version a connection announces in STARTUP when it skips OPTIONS: Cassandra 3 to 5
#: accept any 3.x here (it refuses only below 3.0), and every statement of this store is CQL 3.0
STARTUP_CQL_VERSION = "3.0.0"
#: 0: every connection asks OPTIONS first and waits for REGISTER, as the driver does (A/B)
QUICK_START = int(os.environ.get("ASGARD_CQL_QUICKSTART", "1"))


def _quick_start_connection_class(base):
    """``base`` opening in fewer round trips, for a step process that connects afresh:

    * no OPTIONS before STARTUP when the client asks for no frame compression (the default
      here): the driver sends OPTIONS only to pick a compression and, with none set, a CQL
      version (the first the node lists), so STARTUP can go first; with compression set, the
      driver's negotiation as before.
    * the control connection's REGISTER (for topology, status and schema events) is sent and
      not waited for: its peers and local queries follow on the same connection at once. A
      node that refuses it defuncts the connection, and the driver opens the control
      connection again, as when its queries fail.
    """
    import ipaddress
    import socket

    from cassandra.connection import ConnectionException
    from cassandra.protocol import ReadyMessage, RegisterMessage

    class QuickStartConnection(base):
        def _get_socket_addresses(self):
            # an IP address is its own address: no getaddrinfo, whose first call in a process
            # imports the IDNA codec (stringprep, unicodedata; 2 ms of a step's connect here)
            address, port = self.endpoint.resolve()
            if QUICK_START and getattr(self.endpoint, "socket_family", None) == socket.AF_UNSPEC:
                try:
                    ip = ipaddress.ip_address(address)
                except ValueError:
                    pass
                else:
                    if ip.version == 4:
                        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]
                    return [(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port, 0, 0))]
            return base._get_socket_addresses(self)

        def _send_options_message(self):
            if not QUICK_START or self.compression:
                return base._send_options_message(self)
            self.cql_version = self.cql_version or STARTUP_CQL_VERSION
            self._compressor = None
            self._send_startup_message(None, no_compact=self.no_compact)

        def register_watchers(self, type_callback_dict, register_timeout=None):
            if not QUICK_START:
                return base.register_watchers(self, type_callback_dict, register_timeout)
            if self.is_closed or self.is_defunct:
                raise ConnectionException("Connection %s is already closed" % (self,))
            for event_type, callback in type_callback_dict.items():
                self._push_watchers[event_type].add(callback)

            def registered(response):
                with self.lock:
                    self.in_flight -= 1
                if not isinstance(response, ReadyMessage):
                    self.defunct(ConnectionException(f"REGISTER for events refused: {response!r}", self.endpoint))

            with self.lock:
                request_id = self.get_request_id()
                self.in_flight += 1
            self.send_msg(RegisterMessage(event_list=list(type_callback_dict)), request_id, registered)

    QuickStartConnection.__name__ = "QuickStartConnection"
    return QuickStartConnection


#: frame bodies up to this size are parsed out of the connection's reusable receive buffer
READ_BUFFER_BYTES = BUFFER_BYTES
#: the receive buffer a connection starts with (grown to READ_BUFFER_BYTES on demand)
FIRST_READ_BUFFER_BYTES = min(64 * 1024, READ_BUFFER_BYTES)
# 0: the driver's own frame reading (for comparison: scripts/ab_store.py variant {"_fast_read": 0})
FAST_READ = int(os.environ.get("ASGARD_CQL_FASTREAD", "1"))
# 0: chunks decoded by the driver and copied, not received in place (A/B: scripts/ab_store.py)
IN_PLACE_READ = int(os.environ.get("ASGARD_CQL_INPLACE", "1"))


class _Sink:
    """Where a read's last blob column is received: ``view``, exactly the blob's length (the
    output buffer's slice for a chunk), or, if None, a fresh output buffer made for a blob of
    ``min_bytes`` or more (an object's head row, its size unknown until it comes). ``filled``
    once every byte is there; a reply of another shape (an error, no row, another length) is
    decoded the usual way instead."""

    __slots__ = ("view", "min_bytes", "filled")

    def __init__(self, view: memoryview | None = None, min_bytes: int = 0):
        self.view, self.min_bytes, self.filled = view, min_bytes, False


#: an inline object's data of this size or more is received straight into its output buffer
#: (below, the driver's copies cost less than making a buffer for it)
HEAD_SINK_BYTES = 64 * 1024


#: the sink of the request this thread sends next (set around one ``execute_async``)
_next_sink = threading.local()
def _connection_class():
    base = _large_buffer_connection_class()
    return _fast_read_connection_class(base) if FAST_READ else base


def _fast_read_connection_class(base):
    """``base`` reading frames with ``recv_into`` into buffers it keeps, not through the driver's
    BytesIO: the driver copies each frame 4-5 times before decoding it (``recv``, ``write``,
    ``getvalue``, ``read``, and what remains on reset), and a fresh 1 MiB ``bytes`` per ``recv``
    page-faults. Here a frame that fits the receive buffer is copied once out of it; a larger one
    (a 1 MiB chunk) is received straight into a body buffer reused from frame to frame. Client
    CPU, driver's reading vs this (scripts/ab_store.py, same run, A/A twice): 64 MiB read
    2.38/2.30 vs 2.08 s/GB; 10 KiB put+get 0.52/0.54 vs 0.47/0.45 ms/op. Only for protocol v4
    and older without TLS on libev; anything else reads the driver's way."""
    import socket

    from cassandra.connection import NONBLOCKING, _Frame, frame_header_v3
    try:
        from cassandra.io.libevreactor import LibevConnection, libev
    except ImportError:  # no libev: the driver's own reactor and reading
        return base
    if not issubclass(base, LibevConnection):
        return base

    class FastReadConnection(base):
        _rbuf = None
        _sinks: dict | None = None

        def send_msg(self, msg, request_id, cb, *args, **kwargs):
            sink = getattr(_next_sink, "sink", None)
            if sink is None or not self._fast():
                return base.send_msg(self, msg, request_id, cb, *args, **kwargs)
            _next_sink.sink = None  # this request's, no other's
            if self._sinks is None:
                self._sinks = {}
            self._sinks[request_id] = sink  # before sending: the reply cannot come first
            try:
                return base.send_msg(self, msg, request_id, cb, *args, **kwargs)
            except BaseException:
                self._sinks.pop(request_id, None)
                raise

        def _take_sink(self, frame, body_len: int, at: int):
            """``(sink, prefix length)`` of ``frame``'s request if the reply is one row of one blob
            of the sink's length, its body's first bytes at ``at`` in the receive buffer; else None
            (decoded the usual way). The sink is dropped either way: one reply per request."""
            sink = self._sinks.pop(frame.stream, None) if self._sinks else None
            if (sink is None or frame.flags or frame.opcode != _RESULT_OPCODE
                    or frame.stream not in self._requests):  # not in it: timed out, the reply is dropped
                return None
            shape = _last_blob_prefix(self._rbuf, at, min(self._rend, at + body_len))
            if shape is None or shape[0] + shape[1] != body_len:
                return None
            if sink.view is None:
                if shape[1] < sink.min_bytes:
                    return None
                sink.view = output_buffer(shape[1])
            elif shape[1] != sink.view.nbytes:
                return None
            return sink, shape[0]

        def _sunk(self, frame, sink, prefix: bytes):
            """Hand the request its reply with the blob left out (received into the sink)."""
            sink.filled = True
            body = prefix[:-4] + b"\x00\x00\x00\x00"  # the blob: zero bytes long
            self.process_msg(_Frame(frame.version, frame.flags, frame.stream, frame.opcode, 9, 9 + len(body)), body)

        def _fast(self) -> bool:
            return self.protocol_version < 5 and self.ssl_context is None and not self.ssl_options

        def handle_read(self, watcher, revents, errno=None):
            if revents & libev.EV_ERROR or not self._fast():
                return base.handle_read(self, watcher, revents, errno)
            if self._rbuf is None:
                # small at first (a control connection, a step's few small requests): grown to
                # READ_BUFFER_BYTES by the first frame that needs it (_parse); 1 MiB zeroed up
                # front cost 0.5 ms of CPU per connection, in every fresh step process
                self._rbuf = bytearray(FIRST_READ_BUFFER_BYTES)
                self._rview = memoryview(self._rbuf)
                self._rstart = self._rend = 0
                self._big = self._big_frame = self._big_store = self._big_sink = None
                self._big_pos = 0
            sock = self._socket
            try:
                while True:
                    if self._big_frame is not None:
                        n = sock.recv_into(self._big[self._big_pos:])
                        if not n:
                            return self.close()
                        self._big_pos += n
                        if self._big_pos == len(self._big):
                            frame, body = self._big_frame, self._big
                            self._big_frame = None
                            if self._big_sink is not None:
                                sink, prefix = self._big_sink
                                self._big_sink = None
                                self._sunk(frame, sink, prefix)
                            else:
                                self.process_msg(frame, body)
                        continue
                    if self._rend == len(self._rbuf):  # compact: unparsed bytes to the front
                        left = self._rend - self._rstart
                        self._rbuf[:left] = self._rbuf[self._rstart:self._rend]  # a copy: they overlap
                        self._rstart, self._rend = 0, left
                    n = sock.recv_into(self._rview[self._rend:])
                    if not n:
                        return self.close()
                    self._rend += n
                    self._parse()
            except socket.error as err:
                if err.args and err.args[0] in NONBLOCKING:
                    return
                self.defunct(err)

        def _parse(self):
            buf, view = self._rbuf, self._rview
            while self._rend - self._rstart >= 9:
                start = self._rstart
                flags, stream, op, body_len = frame_header_v3.unpack_from(buf, start + 1)
                frame = _Frame(buf[start] & 0x7F, flags, stream, op, 9, 9 + body_len)
                have = self._rend - start - 9
                if have >= body_len:
                    self._rstart = start + 9 + body_len
                    taken = self._take_sink(frame, body_len, start + 9) if self._sinks else None
                    if taken is not None:
                        sink, prefix = taken
                        sink.view[:] = view[start + 9 + prefix:self._rstart]
                        self._sunk(frame, sink, bytes(view[start + 9:start + 9 + prefix]))
                    else:
                        self.process_msg(frame, bytes(view[start + 9:self._rstart]))
                elif len(buf) < READ_BUFFER_BYTES and 9 + body_len > len(buf):
                    # the first frame over the first buffer: the full-size buffer from now on,
                    # the frame's bytes so far at its front (the reading loop receives the rest)
                    grown = bytearray(max(READ_BUFFER_BYTES, len(buf)))
                    grown[:self._rend - start] = view[start:self._rend]
                    self._rbuf, self._rview = grown, memoryview(grown)
                    self._rstart, self._rend = 0, self._rend - start
                    return
                elif 9 + body_len > len(buf):  # larger than the buffer: straight into the body buffer
                    # reused from frame to frame (the decoder copies out of it); a fresh one per
                    # frame page-faulted as much as the copies it saved (64 MiB read, client CPU).
                    # A chunk read with a sink: its blob straight into the output buffer instead.
                    taken = self._take_sink(frame, body_len, start + 9) if self._sinks else None
                    if taken is not None:
                        sink, prefix = taken
                        at = start + 9 + prefix
                        self._big = sink.view
                        self._big_pos = self._rend - at
                        self._big[:self._big_pos] = view[at:self._rend]
                        self._big_sink = (sink, bytes(view[start + 9:at]))
                        self._big_frame = frame
                        self._rstart = self._rend = 0
                        return
                    if self._big_store is None or len(self._big_store) < body_len:
                        self._big_store = bytearray(body_len)
                    self._big = memoryview(self._big_store)[:body_len]
                    self._big[:have] = view[start + 9:self._rend]
                    self._big_pos, self._big_frame = have, frame
                    self._rstart = self._rend = 0
                    return
                else:
                    if start + 9 + body_len > len(buf):  # it fits the buffer, not from where it starts
                        buf[:self._rend - start] = buf[start:self._rend]  # a copy: they overlap
                        self._rstart, self._rend = 0, self._rend - start
                    return
            if self._rstart == self._rend:
                self._rstart = self._rend = 0

    FastReadConnection.__name__ = "FastReadConnection"
    return FastReadConnection


def ssl_context(ca_file: str, certfile: str | None = None, keyfile: str | None = None,
                verify_hostname: bool = True):
    """A client :class:`ssl.SSLContext` that trusts only ``ca_file`` (not the system's CAs: a node's
    certificate comes from its own CA), with an optional client certificate, TLS 1.2 at least."""
    import ssl

    for name, path in (("ssl_ca_file", ca_file), ("ssl_certfile", certfile), ("ssl_keyfile", keyfile)):
        if path and not os.path.isfile(path):
            raise StoreConfigError(f"{name} {path!r} is not a readable file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname on
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_verify_locations(cafile=ca_file)
        if certfile:
            context.load_cert_chain(certfile, keyfile or None)
    except ssl.SSLError as exc:
        raise StoreConfigError(f"cannot load TLS files (ssl_ca_file={ca_file!r}, ssl_certfile={certfile!r}, "
                               f"ssl_keyfile={keyfile!r}): {exc}") from exc
    # the driver then passes each node's address as server_hostname: an IP must be in the SAN
    context.check_hostname = verify_hostname
    return context


def _speaks_tls(host: str, port: int, timeout: float) -> bool:
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


def _failure(exc: BaseException, contact_points: tuple[str, ...], port: int, tls: tuple | None,
             connect_timeout: float) -> tuple[str, bool]:
    """``(hint, worth retrying)`` for a first connection that failed."""
    import ssl

    from cassandra import AuthenticationFailed

    # NoHostAvailable carries {host: exception} from the control connection, but a plain list of
    # hosts when the session's pools all failed after it (a node going down between the two)
    raw = getattr(exc, "errors", None)
    errors = list(raw.values() if isinstance(raw, dict) else []) or [exc]
    if any(isinstance(e, AuthenticationFailed) for e in errors):
        return AUTH_HINT, False
    if tls is not None:
        # the driver re-raises a failed handshake as a plain OSError carrying the SSL message
        if any(isinstance(e, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(e) for e in errors):
            return CERT_HINT, False
        if any(isinstance(e, ssl.SSLError) or "[SSL" in str(e) for e in errors):
            return NO_TLS_HINT, False
    elif any(_speaks_tls(h, port, connect_timeout) for h in contact_points):
        return NEEDS_TLS_HINT, False  # a plain client will never get in: no ride-through wait
    return LOCAL_HINT, True


def _connect(contact_points: tuple[str, ...], port: int, username: str | None, password: str | None,
             connect_timeout: float, ride_through_seconds: float = 0.0, tls: tuple | None = None):
    """One driver Cluster/Session per process, endpoint, login and TLS settings (a forked step gets
    its own). A node that refuses connections (restarting) is tried again for
    ``ride_through_seconds``; a refused login or TLS mismatch fails at once, saying what to fix.
    ``tls``: ``(ca_file, certfile, keyfile, verify_hostname)`` or None for a plain connection."""
    deadline = time.monotonic() + ride_through_seconds
    while True:
        try:
            return _connect_once(contact_points, port, username, password, connect_timeout, tls)
        except StoreUnavailableError as exc:
            hint, retry = _failure(exc.__cause__, contact_points, port, tls, connect_timeout)
            if not retry or time.monotonic() >= deadline:
                raise StoreUnavailableError(exc.backend, exc.where, hint, exc.__cause__) from exc.__cause__
            time.sleep(0.5)


def _session_key(contact_points: tuple[str, ...], port: int, username: str | None, password: str | None,
                 tls: tuple | None) -> tuple:
    # the password and the TLS settings are part of the identity: a wrong password or a plain
    # connection must not reuse a session opened with good ones
    return (os.getpid(), contact_points, port, username, hash(password), tls, FAST_READ)


def _new_cluster(contact_points: tuple[str, ...], port: int, username: str | None, password: str | None,
                 connect_timeout: float, tls: tuple | None):
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.policies import ExponentialReconnectionPolicy, RoundRobinPolicy, TokenAwarePolicy

    auth = PlainTextAuthProvider(username=username, password=password or "") if username else None
    context = ssl_context(*tls) if tls else None
    return _cluster_class()(
        _endpoints(contact_points, port), port=port, auth_provider=auth, connect_timeout=connect_timeout,
        ssl_context=context,
        control_connection_timeout=connect_timeout,
        load_balancing_policy=TokenAwarePolicy(RoundRobinPolicy()),
        default_retry_policy=ride_through_retry_policy(),
        protocol_version=PROTOCOL_VERSION,
        connection_class=_connection_class(),
        # a local node restarted by the tuner is back in seconds: the driver's default
        # back-off (1 s doubling to 10 min) kept the session away for up to a minute
        reconnection_policy=ExponentialReconnectionPolicy(base_delay=0.2, max_delay=5.0),
        # every step process connects afresh: skip what a step does not use. The full schema
        # (every keyspace's tables, read at connect) cost 50-60 ms of a ~80 ms connect here;
        # preparing on every host costs a round trip per host (a host without the statement
        # answers UNPREPARED and the driver prepares it there on first use).
        schema_metadata_enabled=False,
        prepare_on_all_hosts=False,
        # The driver asks for LZ4 frame compression whenever the lz4 package is importable;
        # our chunks are mostly incompressible (and the codec option compresses the rest once,
        # on the client), so the server compressed every response and decompressed every
        # request for nothing: 5-8% of its CPU samples in a read profile here.
        compression=PROTOCOL_COMPRESSION,
    )


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
    key = _session_key(contact_points, port, username, password, tls)
    with _sessions_lock:
        cached = _sessions.get(key)
        if not isinstance(cached, _EarlyStart):
            if cached is not None and not cached.is_shutdown:
                return cached
            cluster = _new_cluster(contact_points, port, username, password, connect_timeout, tls)
            if PREOPEN:
                cluster.preopen()
            session = _open(cluster, contact_points, port)
            _sessions[key] = session
            return session
    return cached.session(connect_timeout)  # opened in the background (outside the lock: it takes it)


class _EarlyStart:
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
                return None
            conn = self._first_connection.result(timeout=timeout)
            if conn is None or conn.is_closed or conn.is_defunct:
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
        except Exception:
            return None


def _early_start(contact_points: tuple[str, ...], port: int, username: str | None, password: str | None,
                 connect_timeout: float, tls: tuple | None) -> _EarlyStart | None:
    """An :class:`_EarlyStart` for a process that has no session to this cluster yet, else None
    (also when connections are not pre-opened: there is none to send on)."""
    if not PREOPEN:
        return None
    key = _session_key(contact_points, port, username, password, tls)
    with _sessions_lock:
        if key in _sessions:
            return None
        early = _EarlyStart(key, _new_cluster(contact_points, port, username, password, connect_timeout, tls),
                            contact_points, port, connect_timeout)
        _sessions[key] = early
        return early


#: how a fresh process sends its first put and get (A/B): "known" executes them by their prepared
#: id, computed here (:func:`_known_prepared`); "text" sends their CQL text for the node to parse;
#: "prepare" prepares them first, a round trip more (also ASGARD_CQL_UNPREPARED=0, as before)
FIRST_REQUESTS = os.environ.get("ASGARD_CQL_FIRST") or (
    "prepare" if os.environ.get("ASGARD_CQL_UNPREPARED") == "0" else "known")
#: 0: the session's pools connect after the control connection, as the driver does (A/B)
PREOPEN = int(os.environ.get("ASGARD_CQL_PREOPEN", "1"))
#: 0: a fresh process's first put waits for the session, as before (A/B of _EarlyStart)
EARLY_FIRST = int(os.environ.get("ASGARD_CQL_EARLY", "1"))
#: Python's thread switch interval while an early put waits (the default is 5 ms)
EARLY_SWITCH_INTERVAL_S = 0.0002


_CQL_TYPES = {"text": "VarcharType", "blob": "BytesType", "int": "Int32Type", "boolean": "BooleanType"}


def _known_prepared(cql: str, keyspace: str, table: str, markers: tuple[tuple[str, str], ...],
                    partition_key: tuple[int, ...], protocol_version: int):
    """The driver's ``PreparedStatement`` for ``cql`` made without asking the node.

    A node files a prepared statement under the MD5 of its text when the connection has no
    keyspace (``QueryProcessor.computeId`` in Cassandra 3 to 5; ours never has one, every name is
    qualified), and keeps it across restarts (``system.prepared_statements``). An EXECUTE by that
    id skips the PREPARE round trip and the node's parse of the text (a 10 KiB insert sent as text
    took 2.75 ms against 1.30 ms prepared, in a loop here). A node that does not hold the id answers
    UNPREPARED, and the driver prepares the text (it is registered with the cluster for that) and
    executes again, as for any statement the node has evicted. ``markers``: ``(column, type)``
    of each bind marker in order; ``partition_key``: the markers that make the partition key,
    which the driver routes by. For protocol v4 and older: v5's EXECUTE also carries a hash of
    the result's metadata. Apache Cassandra 2 to 5 (and so DSE) and ScyllaDB all compute the id
    this way; a server that did not would make the driver prepare again and again until the
    request times out (its re-prepare of a batch does not compare ids): ``ASGARD_CQL_FIRST=text``
    sends a fresh process's first requests as text instead."""
    import hashlib

    from cassandra import cqltypes
    from cassandra.protocol import ColumnMetadata
    from cassandra.query import PreparedStatement

    columns = [ColumnMetadata(keyspace, table, name, getattr(cqltypes, _CQL_TYPES[kind])) for name, kind in markers]
    # keyspace None: what Session.prepare gives a connection without one (the driver checks it
    # against the connection's when it prepares again)
    return PreparedStatement(columns, hashlib.md5(cql.encode("utf-8")).digest(), list(partition_key), cql,
                             None, protocol_version, None, None)


def _endpoints(contact_points: tuple[str, ...], port: int) -> list:
    """The driver's contact points, an IP address as its endpoint (what the driver would resolve
    it to): the driver then calls no ``getaddrinfo`` for it, whose first call in a process
    imports the IDNA codec (2 ms of a fresh step's connect here). A host name stays a name, for
    the driver to resolve (to one or several addresses) as before."""
    import ipaddress

    from cassandra.connection import DefaultEndPoint

    out = []
    for host in contact_points:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            out.append(host)
        else:
            out.append(DefaultEndPoint(host, port))
    return out


def _cluster_class():
    """The driver's ``Cluster``, which can open a connection to each contact point while its
    control connection starts (:meth:`preopen`): a fresh process's session then has its pool's
    first connection by the time the control connection has read the topology, instead of
    opening it afterwards (a TCP connect and a STARTUP, two round trips, off a step's first
    request). A pre-opened connection is exactly the one the pool would open (the same
    ``connection_factory``, so the same TLS, login and protocol settings); one that failed or
    that no pool took is closed, and the pool opens its own as before."""
    from concurrent.futures import Future

    from cassandra.cluster import Cluster

    class PreopeningCluster(Cluster):
        _preopened: dict | None = None

        preopened_futures: list = []

        def preopen(self) -> None:
            self.connection_class.initialize_reactor()
            self._preopened, self.preopened_futures = {}, []
            for endpoint in self.endpoints_resolved:
                future: Future = Future()

                def run(endpoint=endpoint, future=future):
                    try:
                        future.set_result(Cluster.connection_factory(self, endpoint))
                    except BaseException as exc:  # the pool tries again, and reports
                        future.set_exception(exc)

                self._preopened[endpoint] = future
                self.preopened_futures.append(future)
                threading.Thread(target=run, name="asgard-preopen", daemon=True).start()

        def connection_factory(self, endpoint, *args, **kwargs):
            preopened = self._preopened
            future = (preopened.pop(endpoint, None)
                      if preopened and not kwargs.get("is_control_connection") and not args else None)
            if future is not None:
                try:
                    conn = future.result(timeout=self.connect_timeout)
                except Exception:
                    conn = None
                if conn is not None and not (conn.is_closed or conn.is_defunct):
                    conn._on_orphaned_stream_released = kwargs.get("on_orphaned_stream_released")
                    return conn
            return super().connection_factory(endpoint, *args, **kwargs)

        def drop_preopened(self) -> None:
            """Close the pre-opened connections no pool took (now, or when they finish)."""
            preopened, self._preopened = self._preopened or {}, None
            while preopened:
                try:
                    _, future = preopened.popitem()  # atomic: a pool taking one at once gets None
                except KeyError:
                    break
                future.add_done_callback(lambda f: f.exception() is None and f.result().close())

    return PreopeningCluster


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


def _release(future) -> None:
    """A finished ResponseFuture and its (cancelled) timer refer to each other, so it and the
    chunk it carries waited for Python's cycle collector: 100 MiB of a 256 MiB read was such
    garbage. Dropping the timer frees both as soon as the caller is done with them."""
    future._timer = None


#: 0: a store's small requests go through the driver's event loop like the rest (A/B of
#: cql_direct; scripts/ab_direct.py)
DIRECT = int(os.environ.get("ASGARD_CQL_DIRECT", "1"))
#: after a direct connection fails (a node restarting, a refused login), requests go the
#: session's way for this long before it is opened again
DIRECT_RETRY_SECONDS = 1.0


class _HeadRow(tuple):
    """A head row read on a direct connection, shaped as the session's rows are."""

    __slots__ = ()

    def __new__(cls, manifest, data):
        return tuple.__new__(cls, (manifest, data))

    manifest = property(lambda self: self[0])
    data = property(lambda self: self[1])


class _DirectRefused(Exception):
    """The node answered a direct request with other than a result (the session's way then)."""


class _DirectSlot:
    """A process's :class:`~.cql_direct.DirectConnection` to one host, and the lock its user
    holds; a thread that finds it taken goes the session's way rather than wait."""

    __slots__ = ("lock", "conn", "retry_at")

    def __init__(self):
        self.lock, self.conn, self.retry_at = threading.Lock(), None, 0.0


_direct_slots: dict[tuple, _DirectSlot] = {}


def close_sessions() -> None:
    """Shut down every cached driver session of this process. A session to a node that has gone
    keeps a reconnection timer, which at interpreter exit fails noisily ("cannot schedule new
    futures after shutdown"); a long-lived process that is done with Cassandra calls this."""
    with _sessions_lock:
        sessions = list(_sessions.values())
        _sessions.clear()
    for session in sessions:
        session.cluster.shutdown()
    with _sessions_lock:
        # this process's only: a forked child's copies of its parent's may be locked for good
        slots = [_direct_slots.pop(key) for key in list(_direct_slots) if key[0][0] == os.getpid()]
    for slot in slots:
        with slot.lock:
            if slot.conn is not None:
                slot.conn.close()
                slot.conn = None


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
            chunk reads on a blocking connection of this process's own (:mod:`~asgard.resources.stores.cql_direct`), written and answered on
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

    #: chunks received straight into the output buffer (False: decoded by the driver, then copied)
    in_place_read = bool(IN_PLACE_READ)

    def __init__(
        self,
        contact_points: list[str] | tuple[str, ...] = ("127.0.0.1",),
        port: int = 9042,
        keyspace: str = "asgard",
        table: str = "objects",
        replication_factor: int = 1,
        consistency: str = "LOCAL_QUORUM",
        username: str | None = None,
        password: str | None = None,
        ssl_ca_file: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_verify_hostname: bool = True,
        connect_timeout: float = 5.0,
        request_timeout: float = 30.0,
        chunks_per_partition: int = DEFAULT_CHUNKS_PER_PARTITION,
        durable_writes: bool = False,
        ride_through_seconds: float = 60.0,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        direct_requests: bool | None = None,
        **kwargs,
    ):
        kwargs.setdefault("chunk_size", DEFAULT_CHUNK_SIZE)
        # an object of up to two chunks is still one row: a 1 MiB array plus its pickle header
        # is one read, not a head read followed by two chunk reads
        kwargs.setdefault("inline_bytes", 2 * kwargs["chunk_size"])
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
        self.username, self.password = username, password
        self.connect_timeout, self.request_timeout = connect_timeout, request_timeout
        self.chunks_per_partition = chunks_per_partition
        self.durable_writes = durable_writes
        self.ride_through_seconds = ride_through_seconds
        if batch_bytes < 0:
            raise StoreConfigError(f"batch_bytes must be 0 or more, got {batch_bytes}")
        self.batch_bytes = batch_bytes
        self.direct_requests = bool(DIRECT) if direct_requests is None else bool(direct_requests)
        self._prepared: dict[str, Any] = {}  # statements prepared on self._session
        self._preparing: dict[str, Any] = {}  # prepares under way in the background (futures)
        self._routed = False  # our keyspace's replication given to the driver (_route_by_token)
        self._batch_warn: int | None = None  # the connected node's batch_size_warn_threshold
        self._batch_warn_reading = False  # read in the background, off the first put's path
        self._session, self._session_pid = None, None
        self._early_cluster = None  # the cluster an early first request went through (_EarlyStart)

    # --- connection and schema ----------------------------------------------------------
    @property
    def session(self):
        session = self._session
        if session is None or session.is_shutdown or self._session_pid != os.getpid():
            session = _connect(self.contact_points, self.port, self.username, self.password, self.connect_timeout,
                               self.ride_through_seconds, self.tls)
            # statements known before the session (an early first put or get) were filed with its cluster
            if session is not self._session and not (self._session is None and session.cluster is self._early_cluster):
                self._prepared, self._preparing, self._batch_warn = {}, {}, None
                self._routed = self._batch_warn_reading = False
            self._session, self._session_pid = session, os.getpid()
        return session

    @property
    def qualified_table(self) -> str:
        return f"{self.keyspace}.{self.table}"

    @property
    def qualified_index(self) -> str:
        return f"{self.keyspace}.{self.table}_index"

    def _statements(self) -> dict[str, str]:
        t, ix = self.qualified_table, self.qualified_index
        return {
            "insert_chunk": f"INSERT INTO {t} (scope, path, version, grp, chunk, data) VALUES (?, ?, ?, ?, ?, ?) USING TTL ?",
            "insert_head": (f"INSERT INTO {t} (scope, path, version, grp, chunk, manifest, data) "
                            "VALUES (?, ?, ?, ?, 0, ?, ?) USING TTL ?"),
            "insert_index": (f"INSERT INTO {ix} (scope, path, version, groups, committed) VALUES (?, ?, ?, ?, ?) "
                             "USING TTL ?"),
            # every partition key column bound, '' and 0 included: the driver routes by the whole key
            "select_head": f"SELECT manifest, data FROM {t} WHERE scope = ? AND path = ? AND version = ? AND grp = ? AND chunk = 0",
            "select_chunk": f"SELECT data FROM {t} WHERE scope = ? AND path = ? AND version = ? AND grp = ? AND chunk = ?",
            "select_index": f"SELECT path, version, groups, committed FROM {ix} WHERE scope = ?",
            "select_index_path": f"SELECT path, version, groups, committed FROM {ix} WHERE scope = ? AND path = ?",
            "delete_partition": f"DELETE FROM {t} WHERE scope = ? AND path = ? AND version = ? AND grp = ?",
            "delete_index_scope": f"DELETE FROM {ix} WHERE scope = ?",
            "delete_index_path": f"DELETE FROM {ix} WHERE scope = ? AND path = ?",
        }

    def _statement(self, name: str):
        """The prepared statement ``name``, prepared on first use (a step that only writes small
        outputs prepares two statements, not ten). A keyspace or table that does not exist yet
        is created then, and the prepare retried. A prepare already under way in the background
        (:meth:`_prepare_later`) is waited for, not sent twice."""
        session = self.session
        stmt = self._prepared.get(name)
        if stmt is not None:
            return stmt
        pending = self._preparing.pop(name, None)
        if pending is not None:
            try:
                pending.result()
            except Exception:  # prepared below, on this thread, with the errors mapped
                pass
            stmt = self._prepared.get(name)
            if stmt is not None:
                return stmt
        return self._prepare(session, name)

    def _prepare(self, session, name: str):
        from cassandra import ConsistencyLevel, InvalidRequest

        cql = self._statements()[name]
        for attempt in range(3):
            try:
                stmt = self._execute(session, cql, prepare=True)
                break
            except InvalidRequest as exc:
                if attempt == 2:
                    raise
                self._on_prepare_error(session, exc)
        stmt.consistency_level = getattr(ConsistencyLevel, self.consistency)
        stmt.is_idempotent = True  # every statement here may be resent (the same cells, a delete)
        if not self._routed:
            self._route_by_token(session)
        self._prepared[name] = stmt
        return stmt

    def _prepare_later(self, session, *names: str) -> None:
        """Prepare ``names`` on the driver's executor, off the caller's path: a fresh process's
        first request went as text (:meth:`_first`), and the next one finds the statement
        prepared, or waits for its prepare (which was sent a round trip earlier)."""
        for name in names:
            if name not in self._prepared and name not in self._preparing:
                try:
                    self._preparing[name] = session.submit(self._prepare, session, name)
                except RuntimeError:  # the session is shutting down: prepared on use, if ever
                    return

    # the bind markers, (column, type) in order, of the statements a fresh process sends first,
    # and which of them make the partition key (the driver routes by it)
    _FIRST_MARKERS = {
        "insert_head": (("scope", "text"), ("path", "text"), ("version", "text"), ("grp", "int"),
                        ("manifest", "blob"), ("data", "blob"), ("[ttl]", "int")),
        "insert_index": (("scope", "text"), ("path", "text"), ("version", "text"), ("groups", "int"),
                         ("committed", "boolean"), ("[ttl]", "int")),
        "select_head": (("scope", "text"), ("path", "text"), ("version", "text"), ("grp", "int")),
    }
    _FIRST_PARTITION_KEY = {"insert_head": (0, 1, 2, 3), "insert_index": (0,), "select_head": (0, 1, 2, 3)}

    def _known(self, name: str, cluster):
        """Statement ``name`` by its computed prepared id (:func:`_known_prepared`), or None where
        that does not apply (protocol v5, or turned off). Sessions here never set a keyspace."""
        if FIRST_REQUESTS != "known" or cluster.protocol_version > 4:
            return None
        from cassandra import ConsistencyLevel

        table = self.table + "_index" if name == "insert_index" else self.table
        stmt = _known_prepared(self._statements()[name], self.keyspace, table, self._FIRST_MARKERS[name],
                               self._FIRST_PARTITION_KEY[name], cluster.protocol_version)
        stmt.consistency_level = getattr(ConsistencyLevel, self.consistency)
        stmt.is_idempotent = True
        # the driver prepares it again from here when a node answers UNPREPARED
        cluster.add_prepared(stmt.query_id, stmt)
        return stmt

    def _first(self, requests: tuple[tuple[str, tuple], ...], cluster):
        """An UNLOGGED batch of ``requests`` for a fresh process's first put, without a prepare
        round trip first, routed to a replica of the first one's partition as a prepared batch is:
        each statement by its known id (:meth:`_known`), or else as CQL text with its values bound
        by the protocol (``?`` markers: the values are not rendered into the text). A batch of one
        statement is one mutation, which the node never checks against its batch size thresholds
        (Cassandra's ``verifyBatchSize``). Also returns the known statements, by name."""
        from cassandra import ConsistencyLevel
        from cassandra.query import BatchStatement, BatchType

        batch = BatchStatement(BatchType.UNLOGGED, consistency_level=getattr(ConsistencyLevel, self.consistency))
        known = {name: self._known(name, cluster) for name, _ in requests}
        if all(known.values()):
            for name, params in requests:
                batch.add(known[name], params)  # keyspace and routing key: the first one's
        else:
            from cassandra import cqltypes

            known = {}
            texts, version = self._statements(), cluster.protocol_version

            def ser(value, kind):
                return None if value is None else getattr(cqltypes, _CQL_TYPES[kind]).serialize(value, version)

            for name, params in requests:
                # the driver's own way to add a statement with serialized values (its add() would
                # render them into the text as literals: a 10 KiB blob as 20 KiB of hex)
                batch._add_statement_and_params(
                    False, texts[name], [ser(v, k) for v, (_, k) in zip(params, self._FIRST_MARKERS[name])])
            name, params = requests[0]
            batch.keyspace = self.keyspace
            batch.routing_key = [ser(params[i], self._FIRST_MARKERS[name][i][1])
                                 for i in self._FIRST_PARTITION_KEY[name]]
        batch.is_idempotent = True
        return batch, known

    def _write_first(self, *groups: tuple[tuple[str, tuple], ...]) -> bool:
        """Send ``groups`` (each one request: a batch of its rows) without preparing first, and
        together (:meth:`_first`); statements that went as text are then prepared in the
        background. False if the node refused them as invalid (a missing keyspace or table, a
        table of another layout): the caller sends the rows again the prepared way
        (idempotent), which creates the table or explains it."""
        from cassandra import InvalidRequest

        if EARLY_FIRST and (self._session is None or self._session_pid != os.getpid()) and self._write_early(groups):
            return True
        session = self.session
        if not self._routed:  # a ring: the replicas of our keyspace, before routing by token
            self._route_by_token(session)
        batches = [self._first(g, session.cluster) for g in groups]
        try:
            if len(batches) == 1:
                self._execute(session, batches[0][0])
            else:
                futures = [session.execute_async(b, timeout=self.request_timeout) for b, _ in batches]
                failed = None
                for future in futures:
                    try:
                        future.result()
                    except Exception as exc:
                        failed = failed or exc
                    _release(future)
                if failed is not None:  # idempotent: once more through the path that retries
                    if isinstance(failed, InvalidRequest):
                        raise failed
                    for batch, _ in batches:
                        self._execute(session, batch)
        except InvalidRequest as exc:
            if _is_disk_full(exc):
                raise StoreFullError("Cassandra", self._where(), str(exc), FULL_HINT) from exc
            return False
        for batch, known in batches:
            self._prepared.update(known)
        self._prepare_later(session, *(name for group in groups for name, _ in group if name not in self._prepared))
        return True

    def _write_early(self, groups) -> bool:
        """A fresh process's first put on the pre-opened connection while its session opens
        (:class:`_EarlyStart`). The node that takes it coordinates it to the partition's replicas
        at our consistency level, as a request the driver did not route by token. False (the
        caller sends it the session's way; the rows are idempotent) if this process has a session
        already, the connection is not there, or the node refused a request."""
        from cassandra.protocol import BatchMessage

        early = _early_start(self.contact_points, self.port, self.username, self.password, self.connect_timeout,
                             self.tls)
        if early is None:
            return False
        try:
            cluster = early.cluster
            batches = [self._first(g, cluster) for g in groups]
            messages = [BatchMessage(b.batch_type, b._statements_and_parameters, b.consistency_level, None,
                                     cluster.timestamp_generator(), None) for b, _ in batches]
            answers = early.send(messages, timeout=self.request_timeout)
        finally:
            early.release()
        if answers is None or not all(ok for ok, _ in answers):
            return False
        for _, known in batches:
            self._prepared.update(known)
        self._early_cluster = cluster
        return True

    def _route_by_token(self, session) -> None:
        """Give the driver our keyspace's replication, so that on a ring every request goes to a
        replica of its partition (token-aware) rather than through a coordinator's extra hop. The
        driver learns it from the full schema, which it no longer reads at connect (see
        ``_connect``); one row of ``system_schema.keyspaces`` is enough, and a single node needs
        none."""
        cluster = session.cluster
        self._routed = True
        if len(cluster.metadata.all_hosts()) < 2 or self.keyspace in cluster.metadata.keyspaces:
            return
        from cassandra.metadata import KeyspaceMetadata

        row = self._execute(session, "SELECT durable_writes, replication FROM system_schema.keyspaces "
                                     "WHERE keyspace_name = %s", (self.keyspace,)).one()
        if row is None:
            return
        replication = dict(row.replication)
        strategy = replication.pop("class")
        cluster.metadata.keyspaces[self.keyspace] = KeyspaceMetadata(
            self.keyspace, row.durable_writes, strategy, replication)
        if cluster.metadata.token_map is not None:
            cluster.metadata.token_map.rebuild_keyspace(self.keyspace, build_if_absent=True)

    def _on_prepare_error(self, session, exc: BaseException) -> None:
        """A prepare failed: create what is missing, or explain a table of another layout."""
        self._check_layout(session)  # before creating anything beside a table of another layout
        self._ensure_schema(session)

    def _check_layout(self, session) -> None:
        rows = self._execute(
            session, "SELECT table_name, column_name, kind FROM system_schema.columns WHERE keyspace_name = %s",
            (self.keyspace,))
        found: dict[str, dict[str, str]] = {}
        for row in rows:
            found.setdefault(row.table_name, {})[row.column_name] = row.kind
        for table, want in ((self.table, TABLE_LAYOUT), (f"{self.table}_index", INDEX_LAYOUT)):
            have = found.get(table)
            if have is not None and any(have.get(col) != kind for col, kind in want.items()):
                raise SchemaLayoutError(
                    f"Table {self.keyspace}.{table} exists with another layout than this version of "
                    f"asgard-dagster uses (columns {sorted(have)}; expected {sorted(want)}): it was made by "
                    "an earlier version (one partition per run). Its outputs are ephemeral, so nothing needs "
                    f"migrating: drop it (`DROP TABLE {self.keyspace}.{table};` in cqlsh) and re-run, or "
                    "set keyspace/table to a fresh name."
                )

    def _ensure_schema(self, session) -> None:
        self._execute(session, (
            f"CREATE KEYSPACE IF NOT EXISTS {self.keyspace} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {self.replication_factor}}} "
            f"AND durable_writes = {str(self.durable_writes).lower()}"
        ))
        # gc_grace 0 with one replica: tombstones of purged runs can go at the next compaction
        gc_grace = 0 if self.replication_factor == 1 else 3 * 3600
        self._execute(session, (
            f"CREATE TABLE IF NOT EXISTS {self.qualified_table} ("
            "scope text, path text, version text, grp int, chunk int, manifest blob, data blob, "
            "PRIMARY KEY ((scope, path, version, grp), chunk)) "
            f"WITH gc_grace_seconds = {gc_grace} AND {TABLE_OPTIONS} "
            "AND comment = 'asgard-dagster ephemeral op outputs: heads and chunks'"
        ))
        self._execute(session, (
            f"CREATE TABLE IF NOT EXISTS {self.qualified_index} ("
            "scope text, path text, version text, groups int, committed boolean, "
            "PRIMARY KEY ((scope), path, version)) "
            f"WITH gc_grace_seconds = {gc_grace} "
            "AND comment = 'asgard-dagster: the versions each scope holds, for purge and listing'"
        ))
        # No explicit schema-agreement wait: the driver waits (max_schema_agreement_wait) on the
        # connection that ran each CREATE before returning it. A second wait on the control
        # connection failed CI when that connection had just been closed after a node restart.

    def _execute(self, session, statement, params=None, prepare=False):
        from cassandra import InvalidRequest, OperationTimedOut, ReadTimeout, Unavailable, WriteTimeout
        from cassandra.cluster import NoHostAvailable
        from cassandra.connection import ConnectionException
        from cassandra.protocol import ServerError

        start = time.monotonic()
        deadline = start + self._reconnect_window
        while True:
            try:
                if prepare:
                    return session.prepare(statement)
                return session.execute(statement, params, timeout=self.request_timeout)
            except (NoHostAvailable, ServerError) as exc:
                if not prepare and _is_schema_settling(exc) and time.monotonic() < start + SCHEMA_SETTLE_SECONDS:
                    time.sleep(0.05)
                    continue
                if not isinstance(exc, NoHostAvailable):
                    raise
                if _is_reconnecting(exc) and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                raise StoreUnavailableError("Cassandra", self._where(), LOCAL_HINT, exc) from exc
            except (OperationTimedOut, Unavailable, ReadTimeout, WriteTimeout, ConnectionException) as exc:
                # a restarting node: the driver reconnects within its back-off (0.2 s, doubling to 5 s)
                if _is_reconnecting(exc) and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                raise StoreUnavailableError("Cassandra", self._where(), LOCAL_HINT, exc) from exc
            except InvalidRequest as exc:
                if _is_disk_full(exc):
                    raise StoreFullError("Cassandra", self._where(), str(exc), FULL_HINT) from exc
                raise

    @property
    def _reconnect_window(self) -> float:
        """Seconds a request resends while the driver reconnects to a restarting node."""
        return max(self.connect_timeout, self.ride_through_seconds)

    def _where(self) -> str:
        return ",".join(f"{h}:{self.port}" for h in self.contact_points)

    def ping(self) -> None:
        self._execute(self.session, "SELECT release_version FROM system.local")

    def ensure_schema(self) -> None:
        """Create the keyspace and tables now if they are missing (otherwise the first put or get
        does): for callers that read or alter their options before any output is stored."""
        self._statement("select_head")

    def _run(self, name: str, params) -> Any:
        return self._execute(self.session, self._statement(name), params)

    def _together(self, *requests: tuple[str, tuple]) -> None:
        """A few requests sent at once and awaited together: one round trip, without the
        window machinery of :meth:`_pipelined` (a small put's head and index row)."""
        session = self.session
        statements = [(self._statement(name), params) for name, params in requests]
        if self._direct is not None:
            from cassandra.protocol import ExecuteMessage

            bound = [stmt.bind(params) for stmt, params in statements]
            if self._send_direct(lambda ts: [ExecuteMessage(b.prepared_statement.query_id, b.values,
                                                            b.prepared_statement.consistency_level, timestamp=ts)
                                             for b in bound], bound[0]):
                return
        futures = [session.execute_async(stmt, params, timeout=self.request_timeout) for stmt, params in statements]
        failed = None
        for future, (stmt, params) in zip(futures, statements):
            try:
                future.result()
            except Exception as exc:  # resent below through the retrying path, or raised typed
                failed = failed or exc
            _release(future)
        if failed is not None:  # idempotent: resend through the path that retries and maps errors
            for _ in self._pipelined((i, name, params) for i, (name, params) in enumerate(requests)):
                pass

    def _pipelined(self, items: Iterator[tuple[Any, str, tuple]],
                   sinks: dict[Any, _Sink] | None = None) -> Iterator[tuple[Any, list]]:
        """Run prepared statements ``(tag, name, params)`` with at most ``concurrency`` requests in
        flight, yielding ``(tag, rows)`` as they complete. The next item is not pulled until a
        slot frees (backpressure); a request the driver refuses because its socket is full
        ("Connection ... is overloaded") is retried after a short pause instead of failing.
        A request whose tag has a sink in ``sinks`` may have its blob received into it."""
        import queue
        from collections import deque

        session = self.session
        reconnect_deadline: float | None = None
        done: queue.Queue = queue.Queue()
        pending: dict = {}
        retries: deque = deque()
        items = iter(items)
        exhausted, in_flight = False, 0

        def submit(tag, statement, params, attempt):
            future = self._into(sinks.get(tag) if sinks else None, session.execute_async, statement, params,
                                timeout=self.request_timeout)
            pending[id(future)] = future
            future.add_callbacks(
                lambda rows, f=id(future): done.put((f, tag, statement, params, attempt, rows, None)),
                lambda exc, f=id(future): done.put((f, tag, statement, params, attempt, None, exc)),
            )

        while True:
            while in_flight < self.concurrency and (retries or not exhausted):
                if retries:
                    submit(*retries.popleft())
                else:
                    try:
                        tag, name, params = next(items)
                    except StopIteration:
                        exhausted = True
                        break
                    submit(tag, self._statement(name), params, 0)
                in_flight += 1
            if in_flight == 0:
                return
            key, tag, statement, params, attempt, rows, exc = done.get()
            in_flight -= 1
            _release(pending.pop(key))
            if exc is None:
                yield tag, rows
            elif _is_busy(exc) and attempt < 200:
                time.sleep(min(0.0005 * 2 ** min(attempt, 8), 0.05))
                retries.append((tag, statement, params, attempt + 1))
            elif _is_schema_settling(exc) and attempt < SCHEMA_SETTLE_SECONDS / 0.05:
                time.sleep(0.05)
                retries.append((tag, statement, params, attempt + 1))
            elif _is_reconnecting(exc):
                # a restarting node: resend until the driver reconnects, for the ride-through at most
                if reconnect_deadline is None:
                    reconnect_deadline = time.monotonic() + self._reconnect_window
                if time.monotonic() >= reconnect_deadline:
                    raise self._map_error(exc) from exc
                time.sleep(0.2)
                retries.append((tag, statement, params, attempt + 1))
            else:
                raise self._map_error(exc) from exc

    def _map_error(self, exc: BaseException) -> BaseException:
        from cassandra import OperationTimedOut, Unavailable, WriteTimeout, ReadTimeout
        from cassandra.cluster import NoHostAvailable

        if _is_disk_full(exc):
            return StoreFullError("Cassandra", self._where(), str(exc), FULL_HINT)
        if isinstance(exc, (NoHostAvailable, OperationTimedOut, Unavailable, WriteTimeout, ReadTimeout)):
            return StoreUnavailableError("Cassandra", self._where(), LOCAL_HINT, exc)
        return exc

    # --- layout -----------------------------------------------------------------------
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

        def all_items():
            announced = self.groups(count) if count is not None else 0
            yield -1, "insert_index", (key.scope, key.path, version, announced, False, ttl)
            for i, data in chunks:
                if i // per >= announced:
                    announced = i // per + STREAM_GROUPS_AHEAD
                    yield -1, "insert_index", (key.scope, key.path, version, announced, False, ttl)
                yield i, "insert_chunk", (key.scope, key.path, version, i // per, i, data, ttl)

        for _ in self._pipelined(all_items()):
            pass

    def _read_chunks(self, key: ObjectKey, version: str, count: int) -> Iterator[tuple[int, bytes]]:
        return self._read_chunks_into(key, version, count, None)

    def _read_chunks_into(self, key: ObjectKey, version: str, count: int,
                          targets: list[memoryview] | None) -> Iterator[tuple[int, Any]]:
        """Each chunk's blob received from the socket straight into its target, on a connection
        that reads frames itself (``_fast_read_connection_class``): one copy (the kernel's), not
        four (into the frame buffer, into the driver's ``bytes``, into the output buffer). A reply
        of another shape, or no ``targets``, comes decoded as usual for the caller to copy."""
        per = self.chunks_per_partition
        done: set = set()
        if targets and self._receives_in_place and self._direct is not None:
            yield from self._read_chunks_direct(key, version, count, targets, done)
        left = [i for i in range(count) if i not in done]
        if not left:
            return
        sinks = {i: _Sink(targets[i]) for i in left} if targets and self._receives_in_place else None
        items = ((i, "select_chunk", (key.scope, key.path, version, i // per, i)) for i in left)
        for i, rows in self._pipelined(items, sinks):  # a callback's rows: a list
            if sinks is not None and sinks[i].filled:
                yield i, IN_PLACE
            else:
                yield i, (rows[0].data if rows else None)

    def _write_manifest(self, key: ObjectKey, manifest, inline) -> None:
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
            self._together(head, index)
            return
        warn = self._batch_warn
        batched = size <= CASSANDRA_BATCH_WARN_BYTES - BATCH_MARGIN_BYTES or (
            warn is not None and size <= warn - BATCH_MARGIN_BYTES)
        if FIRST_REQUESTS != "prepare" and ("insert_head" not in self._prepared or "insert_index" not in self._prepared):
            # a fresh process's first put: one round trip instead of three
            groups = ((head, index),) if batched else ((head,), (index,))
            written = self._write_first(*groups)
        else:
            written = False
        if not written:
            if batched:
                self._batch(head, index)
            else:
                self._together(head, index)
        if warn is None and not batched:
            self._read_batch_warn_later()  # for the next put; this one did not wait for it

    def _read_batch_warn_later(self) -> None:
        """Start reading the node's ``batch_size_warn_threshold`` (:meth:`_batch_warn_bytes`)
        without waiting: a fresh process's first put sends its two rows as two requests at once
        rather than wait a round trip for it, and the puts after batch by it."""
        if self._batch_warn is not None or self._batch_warn_reading:
            return
        if self._session is None or self._session_pid != os.getpid():
            return  # the session is still opening (the first put went early): the next put reads it
        self._batch_warn_reading = True
        session = self.session
        future = session.execute_async(
            "SELECT value FROM system_views.settings WHERE name = 'batch_size_warn_threshold'",
            timeout=self.request_timeout)

        def done(rows):
            self._batch_warn = _storage_bytes(rows[0].value) if rows else CASSANDRA_BATCH_WARN_BYTES

        def failed(exc):  # no virtual tables (before 4.0), not readable by this role, or lost:
            # the default; a lost connection reads it again with the next session
            self._batch_warn = CASSANDRA_BATCH_WARN_BYTES

        future.add_callbacks(done, failed)

    def _batch_warn_bytes(self) -> int:
        """The node's ``batch_size_warn_threshold``, read once per session: over it the node logs
        a WARN for every batch (not rate-limited, javap of 5.0.9's BatchStatement), so a small
        put batches only under it (the local node's is 50 KiB; Cassandra's default 5 KiB)."""
        if self._batch_warn is None:
            try:
                row = self._execute(self.session, "SELECT value FROM system_views.settings "
                                                  "WHERE name = 'batch_size_warn_threshold'").one()
                self._batch_warn = _storage_bytes(row.value) if row is not None else CASSANDRA_BATCH_WARN_BYTES
            except Exception:  # no virtual tables (before 4.0), or not readable by this role
                self._batch_warn = CASSANDRA_BATCH_WARN_BYTES
        return self._batch_warn

    def _batch(self, *requests: tuple[str, tuple]) -> None:
        """Rows of a few partitions in ONE request, an UNLOGGED batch (no batchlog: each
        partition's row is still written atomically, and the head alone is the commit point)."""
        from cassandra.protocol import BatchMessage
        from cassandra.query import BatchStatement, BatchType

        bound = [self._statement(name).bind(params) for name, params in requests]
        level = bound[0].prepared_statement.consistency_level
        if self._direct is not None and self._send_direct(
                lambda ts: [BatchMessage(BatchType.UNLOGGED, [(True, b.prepared_statement.query_id, b.values)
                                                               for b in bound], level, None, ts)], bound[0]):
            return
        batch = BatchStatement(BatchType.UNLOGGED)
        for b in bound:
            batch.add(b)
        batch.consistency_level = level
        batch.is_idempotent = True
        self._execute(self.session, batch)

    # --- direct requests (cql_direct) -------------------------------------------------
    @property
    def _direct(self):
        """This process's established session if requests may go direct, else None: turned off,
        no session yet (a fresh process's first request goes early, :class:`_EarlyStart`), a
        protocol the direct connection does not speak, or listeners on the session."""
        session = self._session
        if (not self.direct_requests or session is None or self._session_pid != os.getpid() or session.is_shutdown
                or session.cluster.protocol_version > 4 or getattr(session, "_request_init_callbacks", None)):
            # a session with request-init listeners (someone's metrics or tracing) sees every
            # request: they go its way
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
        """This process's :class:`~.cql_direct.DirectConnection` to ``host``, held for the block;
        None if another thread holds it, or it failed less than ``DIRECT_RETRY_SECONDS`` ago, or
        it cannot be opened. An exception out of the block closes it (its state is unknown)."""
        from .cql_direct import DirectConnection

        session = self._session
        address, port = host.endpoint.address, host.endpoint.port
        key = (_session_key(self.contact_points, self.port, self.username, self.password, self.tls), address, port)
        slot = _direct_slots.get(key)
        if slot is None:
            with _sessions_lock:
                slot = _direct_slots.setdefault(key, _DirectSlot())
        if not slot.lock.acquire(blocking=False):
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
                        log.debug("no direct connection to %s:%s, requests go the session's way: %r",
                                  address, port, exc)
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
                    log.debug("direct connection to %s:%s dropped, requests go the session's way: %r",
                              address, port, exc)
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
        except Exception:
            return None
        if all(isinstance(a[0] if type(a) is tuple else a, ResultMessage) for a in answers):
            return answers
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
                        raise _DirectRefused(answer)
                    done.add(i)
                    yield i, (IN_PLACE if filled else (answer.parsed_rows[0][0] if answer.parsed_rows else None))
        except Exception:
            return

    def _read_manifest(self, key: ObjectKey):
        row = None
        if FIRST_REQUESTS != "prepare" and "select_head" not in self._prepared:
            row = self._read_head_first(key)  # a fresh process's first get: one round trip
        if row is None and self._direct is not None and "select_head" in self._prepared:
            row = self._read_head_direct(key)
        if row is None:
            sink = self._head_sink()
            stmt = self._statement("select_head")  # prepared first, if it must be: the sink is the read's
            row = self._into(sink, self._execute, self.session, stmt,
                             (key.scope, key.path, HEAD_VERSION, HEAD_GROUP)).one()
        elif row is False:
            row = None
        else:
            row, sink = row
        if row is None or row.manifest is None:
            return None
        # a large inline object came into a buffer of its own: the reader's, used as is
        return row.manifest, (sink.view if sink is not None and sink.filled else row.data)

    @property
    def _receives_in_place(self) -> bool:
        return bool(FAST_READ and self.in_place_read)

    def _head_sink(self) -> _Sink | None:
        return _Sink(min_bytes=HEAD_SINK_BYTES) if self._receives_in_place else None

    @staticmethod
    def _into(sink: _Sink | None, send, *args, **kwargs):
        """``send(*args, **kwargs)``, its one request's last blob received into ``sink`` if it can be."""
        _next_sink.sink = sink
        try:
            return send(*args, **kwargs)
        finally:
            _next_sink.sink = None

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
            sink = _Sink(blob)
            sink.filled = True
        if not answer.parsed_rows:
            return False
        manifest, data = answer.parsed_rows[0]
        return _HeadRow(manifest, data), sink

    def _read_head_first(self, key: ObjectKey):
        """The head row of ``key`` read without preparing first: by the statement's known id
        (:meth:`_known`), or else as text (its statement then prepared in the background).
        ``(row, its sink)``, False for no row, or None if the node refused the statement (a
        missing table: the prepared path creates it)."""
        from cassandra import ConsistencyLevel, InvalidRequest
        from cassandra.cqltypes import Int32Type, UTF8Type
        from cassandra.query import SimpleStatement

        if EARLY_FIRST and (self._session is None or self._session_pid != os.getpid()):
            row = self._read_head_early(key)
            if row is not None:
                return row
        session = self.session
        if not self._routed:
            self._route_by_token(session)
        params = (key.scope, key.path, HEAD_VERSION, HEAD_GROUP)
        known = self._known("select_head", session.cluster)
        if known is not None:
            stmt = known.bind(params)
        else:
            version = session.cluster.protocol_version
            # two short text values, rendered as quoted literals by the driver's encoder
            stmt = SimpleStatement(self._statements()["select_head"].replace("?", "%s"),
                                   consistency_level=getattr(ConsistencyLevel, self.consistency),
                                   keyspace=self.keyspace, is_idempotent=True)
            stmt.routing_key = [UTF8Type.serialize(key.scope, version), UTF8Type.serialize(key.path, version),
                                UTF8Type.serialize(HEAD_VERSION, version), Int32Type.serialize(HEAD_GROUP, version)]
        sink = self._head_sink()
        try:
            row = self._into(sink, self._execute, session, stmt, None if known is not None else params).one()
        except InvalidRequest:
            return None
        if known is not None:
            self._prepared["select_head"] = known
        else:
            self._prepare_later(session, "select_head")
        return False if row is None else (row, sink)

    def _read_head_early(self, key: ObjectKey):
        """A fresh process's first get (a step's first request is usually its input's) on the
        pre-opened connection while the session opens (:class:`_EarlyStart`), by the statement's
        known id. ``(row, None)``, False for no row, or None to go the session's way: this
        process has a session already, the node does not hold the id, or it refused."""
        from cassandra.protocol import ExecuteMessage
        from cassandra.query import named_tuple_factory

        early = _early_start(self.contact_points, self.port, self.username, self.password, self.connect_timeout,
                             self.tls)
        if early is None:
            return None
        try:
            known = self._known("select_head", early.cluster)
            if known is None:
                return None
            bound = known.bind((key.scope, key.path, HEAD_VERSION, HEAD_GROUP))
            answers = early.send([ExecuteMessage(known.query_id, bound.values, known.consistency_level)],
                                 timeout=self.request_timeout)
        finally:
            early.release()
        if not answers or not answers[0][0]:
            return None
        result = answers[0][1]
        rows = named_tuple_factory(result.column_names, result.parsed_rows or [])
        self._prepared["select_head"] = known
        self._early_cluster = early.cluster
        return (rows[0], None) if rows else False

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
        """Delete the partitions the index rows ``rows`` name."""
        items = ((None, "delete_partition", (scope, *p)) for p in self._partitions_of(rows))
        for _ in self._pipelined(items):
            pass

    def _delete_key(self, key: ObjectKey) -> None:
        self._delete_listed(key.scope, self._index(key.scope, key.path))
        self._run("delete_index_path", (key.scope, key.path))

    def purge_scope(self, scope: str) -> None:
        self._delete_listed(scope, self._index(scope))
        self._run("delete_index_scope", (scope,))

    def list_paths(self, scope: str) -> list[str]:
        return sorted({r.path for r in self._index(scope) if r.committed})

    def partitions(self, scope: str) -> list[tuple[str, str, int]]:
        """``(path, version, grp)`` of every partition the scope's index names (heads included)."""
        return self._partitions_of(self._index(scope))
