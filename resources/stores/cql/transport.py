"""The driver's connection classes as the store's sessions use them: larger socket buffers,
fewer round trips to open (:func:`quick_start_connection_class`), and frames read into buffers the
connection keeps, a chunk's blob straight into the reader's output buffer
(:func:`fast_read_connection_class`). Each class overrides private methods of cassandra-driver
3.30.1: ``tests/test_driver_contract.py`` checks every one against the installed driver.
"""
from __future__ import annotations

import threading

from ..buffers import output_buffer
from .options import opts
from .direct_connection import RESULT_OPCODE as _RESULT_OPCODE, last_blob_prefix as _last_blob_prefix
from .fallbacks import step_aside


def large_buffer_connection_class():
    """The driver's default reactor (libev) with 1 MiB socket reads and writes instead of 4 KiB:
    a 1 MiB chunk then costs one Python-level socket call each way, not 256 (1 MiB read 13%
    faster than 256 KiB here, and the server spent less CPU per byte sending)."""
    from cassandra.cluster import DefaultConnection

    size = opts().buffer_bytes
    return type("LargeBufferConnection", (quick_start_connection_class(DefaultConnection),),
                {"in_buffer_size": size, "out_buffer_size": size})


#: the CQL version a connection announces in STARTUP when it skips OPTIONS: Cassandra 3 to 5
#: accept any 3.x here (it refuses only below 3.0), and every statement of this store is CQL 3.0
STARTUP_CQL_VERSION = "3.0.0"


def quick_start_connection_class(base):
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

    quick = opts().quick_start

    class QuickStartConnection(base):
        def _get_socket_addresses(self):
            # an IP address is its own address: no getaddrinfo, whose first call in a process
            # imports the IDNA codec (stringprep, unicodedata; 2 ms of a step's connect here)
            address, port = self.endpoint.resolve()
            if quick and getattr(self.endpoint, "socket_family", None) == socket.AF_UNSPEC:
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
            if not quick or self.compression:
                return base._send_options_message(self)
            self.cql_version = self.cql_version or STARTUP_CQL_VERSION
            self._compressor = None
            self._send_startup_message(None, no_compact=self.no_compact)

        def register_watchers(self, type_callback_dict, register_timeout=None):
            if not quick:
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


#: the receive buffer a connection starts with (grown to options' buffer_bytes on demand)
FIRST_READ_BUFFER_BYTES = 64 * 1024


class Sink:
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
next_sink = threading.local()


def into(sink: Sink | None, send, *args, **kwargs):
    """``send(*args, **kwargs)``, its one request's last blob received into ``sink`` if it can be."""
    next_sink.sink = sink
    try:
        return send(*args, **kwargs)
    finally:
        next_sink.sink = None


def head_sink(in_place: bool) -> Sink | None:
    """The sink of a head read: an inline value of ``HEAD_SINK_BYTES`` or more gets a buffer of
    its own (None when reads are not received in place)."""
    return Sink(min_bytes=HEAD_SINK_BYTES) if in_place else None


def connection_class():
    """The connection class of every session the store opens (:data:`.options.OPTIONS`)."""
    base = large_buffer_connection_class()
    return fast_read_connection_class(base) if opts().fast_read else base


def fast_read_connection_class(base):
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
    except ImportError as exc:  # no libev: the driver's own reactor and reading
        step_aside("fast_read", "libev reactor not importable", exc)
        return base
    if not issubclass(base, LibevConnection):
        step_aside("fast_read", "the driver's default connection is not libev's", base)
        return base
    # frame bodies up to this size are parsed out of the connection's reusable receive buffer
    read_buffer_bytes = opts().buffer_bytes
    first_read_buffer_bytes = min(FIRST_READ_BUFFER_BYTES, read_buffer_bytes)

    class FastReadConnection(base):
        _rbuf = None
        _sinks: dict | None = None
        _counted_slow = False

        def send_msg(self, msg, request_id, cb, *args, **kwargs):
            sink = getattr(next_sink, "sink", None)
            if sink is None or not self._fast():
                return base.send_msg(self, msg, request_id, cb, *args, **kwargs)
            next_sink.sink = None  # this request's, no other's
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
                if not revents & libev.EV_ERROR and not self._counted_slow:  # by design: counted, not warned
                    self._counted_slow = True
                    step_aside("fast_read", "TLS or protocol v5 connection", warn=False)
                return base.handle_read(self, watcher, revents, errno)
            if self._rbuf is None:
                # small at first (a control connection, a step's few small requests): grown to
                # read_buffer_bytes by the first frame that needs it (_parse); 1 MiB zeroed up
                # front cost 0.5 ms of CPU per connection, in every fresh step process
                self._rbuf = bytearray(first_read_buffer_bytes)
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
                elif len(buf) < read_buffer_bytes and 9 + body_len > len(buf):
                    # the first frame over the first buffer: the full-size buffer from now on,
                    # the frame's bytes so far at its front (the reading loop receives the rest)
                    grown = bytearray(max(read_buffer_bytes, len(buf)))
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
