"""A blocking CQL connection: a store's requests sent and answered on the calling thread.

cassandra-driver sends every request through its event-loop thread: the caller queues the
message and wakes the loop, the loop writes it, reads the answer, decodes it, and wakes the
caller. For a 10 KiB put or get that hand-off was most of the client's cost, and for a large
read it was two thread switches per chunk. Measured in one process, interleaved rounds, with
the A/A floor of the direct variant listed twice (``scripts/ab_store.py small|read --variant
driver='{"direct_requests":false}' --variant direct='{}' --variant direct2='{}'``):

* 10 KiB put+get: 1,664 against 4,870 / 4,919 ops/s; client CPU 0.396 against 0.122 / 0.110 ms
  per operation.
* 1 MiB reads (one inline row): 767 against 1,086 / 1,189 MB/s; client CPU 0.93 against 0.48 s/GB.
* 64 MiB reads (64 chunks, 8 in flight): 595 against 1,115 / 1,210 MB/s; client CPU 1.23 against
  0.71 / 0.69 s/GB.

:class:`DirectConnection` is that socket. It speaks the native protocol (v3/v4) with the
driver's own message classes, encoder and decoder, logs in with the driver's auth provider and
wraps TLS with the cluster's ``SSLContext``; what it adds is only the blocking transport, and
receiving a blob straight into the caller's buffer (:meth:`DirectConnection.pipeline`). It has
none of the driver's policies (retry, speculative execution, reconnection): the store sends a
request here first and, on any failure or any answer but a result, sends it again through the
session, which has them (every statement the store sends is idempotent).
"""

from __future__ import annotations

import socket
import struct
from typing import Any

_HEADER = struct.Struct(">BBhBi")  # v3+: version, flags, stream, opcode, body length
RESULT_OPCODE = 0x08
#: how much of a RESULT is read before deciding where its blob goes (the row's prefix: its
#: metadata and the cells before the blob fit in it; a longer prefix is decoded the usual way)
_PEEK_BYTES = 4096


class DirectConnectionError(ConnectionError):
    """The connection failed (closed, timed out, or an answer it could not frame); the caller
    closes it and sends the request the session's way."""


class DirectConnection:
    """One socket to ``host``, logged in, on which each call sends its requests and reads
    their answers before returning. Not for concurrent use: the caller holds it while it
    sends (:meth:`request` and :meth:`requests` are one exchange each).

    >>> conn = DirectConnection("127.0.0.1", 9042, protocol_version=4, timeout=30.0)
    >>> answer = conn.request(ExecuteMessage(stmt.query_id, bound.values, stmt.consistency_level))
    """

    def __init__(self, host: str, port: int, protocol_version: int, timeout: float, connect_timeout: float = 5.0,
                 ssl_context=None, auth_provider=None, handler=None):
        from cassandra.protocol import ProtocolHandler

        if protocol_version > 4:
            # v5 frames its messages in checksummed segments after STARTUP; not spoken here
            raise ValueError(f"protocol v{protocol_version}: DirectConnection speaks v3 and v4")
        self.host, self.port, self.protocol_version = host, port, protocol_version
        self.handler = handler or ProtocolHandler
        self.timeout = timeout
        sock = socket.create_connection((host, port), timeout=connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=host if ssl_context.check_hostname else None)
            self._sock = sock
            self._start(auth_provider)
        except BaseException:
            sock.close()
            raise
        sock.settimeout(timeout)

    def _start(self, auth_provider) -> None:
        from cassandra import AuthenticationFailed
        from cassandra.protocol import (AuthChallengeMessage, AuthenticateMessage, AuthResponseMessage,
                                        AuthSuccessMessage, ReadyMessage, StartupMessage)

        answer = self.request(StartupMessage(cqlversion="3.0.0", options={}))
        if isinstance(answer, ReadyMessage):
            return
        if not isinstance(answer, AuthenticateMessage):
            raise DirectConnectionError(f"{self.host}:{self.port} answered STARTUP with {answer!r}")
        if auth_provider is None:
            raise AuthenticationFailed(f"{self.host}:{self.port} asks for a login ({answer.authenticator}) "
                                       "and no credentials were given")
        authenticator = auth_provider.new_authenticator(self.host)
        authenticator.server_authenticator_class = answer.authenticator
        answer = self.request(AuthResponseMessage(authenticator.initial_response()))
        while isinstance(answer, AuthChallengeMessage):
            token = authenticator.evaluate_challenge(answer.challenge)
            answer = self.request(AuthResponseMessage("" if token is None else token))
        if not isinstance(answer, AuthSuccessMessage):
            raise AuthenticationFailed(f"{self.host}:{self.port} refused the login: {answer!r}")
        authenticator.on_authentication_success(answer.token)

    def request(self, message, result_metadata=None, sink_min_bytes: int | None = None) -> Any:
        """Send ``message`` and return the node's answer, decoded (a ``ResultMessage``, or an
        ``ErrorMessage`` for the caller to judge). With ``sink_min_bytes``, a RESULT holding one
        row whose last column is a blob of that many bytes or more comes back as
        ``(answer, blob)``: the answer with that cell empty, the blob received in place into a
        writable buffer of its own (no copies by the decoder)."""
        self._send([message])
        return self._receive(result_metadata, sink_min_bytes)

    def requests(self, messages: list) -> list:
        """Send ``messages`` together (one round trip) and return their answers in order."""
        self._send(messages)
        return [self._receive() for _ in messages]

    def pipeline(self, items, window: int, target_of, result_metadata=None):
        """Send ``items`` (``(tag, message)``, pulled as answers come) with at most ``window``
        in flight, and yield ``(tag, answer, filled)`` as each answer comes, in the node's order.
        ``target_of(tag)`` is a writable memoryview or None: an answer that is one row whose
        last column is a blob of exactly the target's length is received into it (``filled``
        True; the answer decoded with that cell empty); any other answer comes decoded whole."""
        items = iter(items)
        tags: dict[int, Any] = {}
        stream, exhausted = 0, False
        while True:
            batch = []
            while not exhausted and len(tags) + len(batch) < window:
                try:
                    tag, message = next(items)
                except StopIteration:
                    exhausted = True
                    break
                while stream in tags:  # stream ids are 15 bits: wrap past those in flight
                    stream = (stream + 1) & 0x7FFF
                tags[stream] = tag
                batch.append((stream, message))
                stream = (stream + 1) & 0x7FFF
            if batch:
                self._send([m for _, m in batch], [i for i, _ in batch])
            if not tags:
                return
            flags, got, opcode, length = self._read_header()
            if got not in tags:
                raise DirectConnectionError(f"{self.host}:{self.port} answered stream {got}, not one in flight")
            tag = tags.pop(got)
            target = target_of(tag)
            answer, blob = self._read_answer(
                got, flags, opcode, length, result_metadata,
                None if target is None else (lambda size, t=target: t if size == t.nbytes else None))
            yield tag, answer, blob is not None

    def _decode(self, stream: int, flags: int, opcode: int, body, result_metadata):
        return self.handler.decode_message(self.protocol_version, {}, stream, flags, opcode, body, None,
                                           result_metadata)

    def _send(self, messages: list, streams: list[int] | None = None) -> None:
        """Write ``messages`` in one go, with stream ids ``streams`` (0, 1, ... by default)."""
        data = b"".join(self.handler.encode_message(m, i, self.protocol_version, None, False)
                        for i, m in zip(streams or range(len(messages)), messages))
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise DirectConnectionError(f"sending to {self.host}:{self.port}: {exc}") from exc

    def _receive(self, result_metadata=None, sink_min_bytes: int | None = None):
        flags, stream, opcode, length = self._read_header()
        if sink_min_bytes is None:
            return self._read_answer(stream, flags, opcode, length, result_metadata, None)[0]
        from ..buffers import output_buffer

        answer, blob = self._read_answer(stream, flags, opcode, length, result_metadata,
                                         lambda size: output_buffer(size) if size >= sink_min_bytes else None)
        return answer if blob is None else (answer, blob)

    def _read_header(self) -> tuple[int, int, int, int]:
        """``(flags, stream, opcode, body length)`` of the next answer."""
        version, flags, stream, opcode, length = _HEADER.unpack(self._read(9))
        if version & 0x7F != self.protocol_version:
            raise DirectConnectionError(f"{self.host}:{self.port} answered with protocol v{version & 0x7F}")
        return flags, stream, opcode, length

    def _read_answer(self, stream: int, flags: int, opcode: int, length: int, result_metadata, blob_for):
        """The answer whose header was just read, and the buffer its blob went into, or None.
        ``blob_for(size)`` gives a writable memoryview of ``size`` bytes for the blob of an
        answer that is one row whose last column is a blob (None: decode it whole); the answer
        is then decoded with that cell empty, as the pool's connections do for a sink
        (``FastReadConnection._sunk``)."""
        if blob_for is None or opcode != RESULT_OPCODE or flags:
            return self._decode(stream, flags, opcode, self._read(length) if length else b"", result_metadata), None
        peek = self._read(min(length, _PEEK_BYTES))
        shape = last_blob_prefix(peek, 0, len(peek))
        blob = blob_for(shape[1]) if shape is not None and shape[0] + shape[1] == length else None
        if blob is None:
            body = peek + self._read(length - len(peek)) if length > len(peek) else peek
            return self._decode(stream, flags, opcode, body, result_metadata), None
        have = len(peek) - shape[0]
        blob[:have] = memoryview(peek)[shape[0]:]
        self._read_into(blob[have:])
        return self._decode(stream, flags, opcode, peek[:shape[0] - 4] + b"\x00\x00\x00\x00", result_metadata), blob

    def _read(self, n: int) -> bytearray:
        buf = bytearray(n)
        self._read_into(memoryview(buf))
        return buf

    def _read_into(self, view: memoryview) -> None:
        got, n = 0, view.nbytes
        try:
            while got < n:
                k = self._sock.recv_into(view[got:])
                if not k:
                    raise DirectConnectionError(f"{self.host}:{self.port} closed the connection")
                got += k
        except OSError as exc:  # socket.timeout included: the connection's state is unknown after it
            raise DirectConnectionError(f"reading from {self.host}:{self.port}: {exc}") from exc

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


_ROWS_KIND, _GLOBAL_TABLES_SPEC, _NO_METADATA = 2, 0x0001, 0x0004
_BLOB_TYPE = 0x0003
_INTS3 = struct.Struct(">iii")


def last_blob_prefix(buf, at: int, end: int) -> tuple[int, int] | None:
    """``(prefix length, blob length)`` if ``buf[at:end]`` starts a protocol v3/v4 RESULT body of
    ROWS holding one row of blob columns (the driver never asks to skip the metadata, so the
    node sends it), its last column's bytes being what follows the prefix; None for anything
    else, or if the prefix is not all in ``buf[at:end]`` yet."""
    if end - at < 12:
        return None
    kind, flags, columns = _INTS3.unpack_from(buf, at)
    if kind != _ROWS_KIND or columns < 1 or flags not in (_GLOBAL_TABLES_SPEC, _NO_METADATA):
        return None
    pos = at + 12
    if flags == _GLOBAL_TABLES_SPEC:
        for i in range(2 + 2 * columns):  # keyspace, table, then each column's name and type
            if end - pos < 2:
                return None
            field = int.from_bytes(buf[pos:pos + 2], "big")
            if i >= 2 and i % 2 == 1:  # a type: an option id, blob's has no parameters
                if field != _BLOB_TYPE:
                    return None
                pos += 2
            else:
                pos += 2 + field
    if end - pos < 4 or int.from_bytes(buf[pos:pos + 4], "big") != 1:  # one row
        return None
    pos += 4
    for _ in range(columns - 1):  # the cells before the last ([bytes]: length, -1 for null)
        if end - pos < 4:
            return None
        length = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
        pos += 4 + max(length, 0)
    if end - pos < 4:
        return None
    length = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
    return (pos + 4 - at, length) if length >= 0 else None
