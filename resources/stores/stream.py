"""Values bigger than memory: a :class:`Stream` of bytes, written and read chunk by chunk.

An op returns ``Stream(source)`` (an iterable of byte pieces, a path, or a binary file); the store
writes it chunk by chunk (:meth:`ObjectStore.put_stream`), holding at most the request window in
memory, and commits it with its manifest last, as any output. A consumer that asks for a
``Stream`` gets one that reads chunks on demand (:meth:`ObjectStore.open_stream`): ``read(n)``,
iteration over chunks, or ``copy_to(path)``. Each chunk is checked (CRC-32, and the signature on a
signed store) before its bytes are handed out.
"""
from __future__ import annotations

import io
import os
from typing import Iterable, Iterator, Union

#: pieces read from a file or path source at a time
READ_BYTES = 4 * 1024 * 1024

Source = Union[str, "os.PathLike[str]", io.RawIOBase, io.BufferedIOBase, Iterable[bytes]]


class Stream(io.RawIOBase):
    """Bytes passed between ops without holding them in memory.

    Example::

        @op
        def export() -> Stream:
            return Stream(generate_pieces())          # or Stream("/scratch/big.bin")

        @op
        def checksum(data: Stream) -> str:             # read on demand, chunk by chunk
            h = hashlib.sha256()
            for piece in data:
                h.update(piece)
            return h.hexdigest()

    Args:
        source: an iterable of bytes-like pieces, a path to a file, or a readable binary file.
        size: total bytes when known (informational: the store counts what it writes).
    """

    def __init__(self, source: Source, size: int | None = None):
        super().__init__()
        if isinstance(source, (bytes, bytearray, memoryview)):
            raise TypeError("Stream takes pieces, a path or a file; a bytes value is not a stream: return it as is")
        self._source = source
        self._pieces: Iterator | None = None
        self._file = None
        self._left = memoryview(b"")
        self.size = size

    # --- producing pieces -------------------------------------------------------------------
    def _iter_source(self) -> Iterator[memoryview]:
        src = self._source
        if isinstance(src, (str, os.PathLike)):
            self._file = open(src, "rb")
            src = self._file
        if hasattr(src, "readinto") or hasattr(src, "read"):
            while True:
                piece = src.read(READ_BYTES)
                if not piece:
                    return
                yield memoryview(piece).cast("B")
        else:
            for piece in src:
                view = memoryview(piece)
                if view.nbytes:
                    yield view.cast("B") if view.format != "B" or view.ndim != 1 else view

    def __iter__(self) -> Iterator[memoryview]:
        """The stream's pieces as they come (what a consumer loops over)."""
        if self._left.nbytes:
            left, self._left = self._left, memoryview(b"")
            yield left
        if self._pieces is None:
            self._pieces = self._iter_source()
        # not ``yield from``: a loop the consumer leaves early must not close the source
        # for the next loop over the same stream
        while (piece := next(self._pieces, None)) is not None:
            yield piece

    # --- file-like ----------------------------------------------------------------------------
    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        out = memoryview(buffer).cast("B")
        if not self._left.nbytes:
            if self._pieces is None:
                self._pieces = self._iter_source()
            self._left = next(self._pieces, memoryview(b""))
        n = min(out.nbytes, self._left.nbytes)
        out[:n] = self._left[:n]
        self._left = self._left[n:]
        return n

    def copy_to(self, path: str | os.PathLike) -> int:
        """Write the rest of the stream to ``path``; the bytes written."""
        total = 0
        with open(path, "wb") as f:
            for piece in self:
                f.write(piece)
                total += piece.nbytes
        return total

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        closer = getattr(self._source, "close", None)
        if callable(closer) and not isinstance(self._source, (str, os.PathLike)):
            closer()
        super().close()


class ChunkReader:
    """The pieces of a stored stream in order, fetched on demand with the store's request window:
    chunks that arrive early wait (at most the window's worth), each is verified before it is given out."""

    def __init__(self, chunks: Iterator[tuple[int, bytes | None]], count: int, decode):
        self._chunks, self._count, self._decode = chunks, count, decode

    def __iter__(self) -> Iterator[memoryview]:
        waiting: dict[int, bytes | None] = {}
        for want in range(self._count):
            while want not in waiting:
                index, data = next(self._chunks, (want, None))  # ended early: that chunk is missing
                waiting[index] = data
            yield memoryview(self._decode(want, waiting.pop(want))).cast("B")
