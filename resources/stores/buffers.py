"""The buffers a read fills: one per object, uninitialized, aligned as the serializer aligns a
value's buffers in it."""
from __future__ import annotations

import mmap

from .serde import AlignedPickleSerializer

#: objects above this size are read into memory mapped and faulted in at once, not numpy's
POPULATED_BUFFER_BYTES = 32 * 1024 * 1024
#: a read buffer's start, a multiple of the serializer's alignment of buffers in the object
BUFFER_ALIGN = AlignedPickleSerializer.ALIGN


def output_buffer(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes that every chunk is copied into, left uninitialized:
    ``bytearray(size)`` zeroes it first, page-faulting 4 KiB at a time (31 ms for 64 MiB here).

    Up to POPULATED_BUFFER_BYTES, numpy's: it asks the kernel for huge pages (madvise), and the
    copies write them once. Above, anonymous memory faulted in by the mmap call itself
    (MAP_POPULATE), without huge pages: with the kernel's THP defrag at "madvise" (a common
    default, and this machine's), a region that asks for huge pages stalls in direct compaction
    whenever none are free, as after a step has written its outputs. Read right after a put
    (scripts in docs/results/issue13-read-buffer.txt), numpy's buffer gave Cassandra 237 MB/s
    for 64 MiB (client CPU 0.25 s) and 191 MB/s for 128 MiB (0.63 s), this one 356 and 450 MB/s
    (0.14 s, 0.23 s); at 32 MiB both 393-396 MB/s, at 16 MiB numpy's was faster (553 vs 464)."""
    if size > POPULATED_BUFFER_BYTES and hasattr(mmap, "MAP_POPULATE"):  # page-aligned
        return memoryview(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE))
    import numpy as np

    # aligned as the serializer aligns a value's buffers in it (numpy's own start is 16-aligned)
    room = np.empty(size + BUFFER_ALIGN, dtype=np.uint8)
    start = -room.ctypes.data % BUFFER_ALIGN
    return memoryview(room[start : start + size])


def aligned(view: memoryview) -> bool:
    """Whether ``view`` starts at a multiple of BUFFER_ALIGN."""
    import numpy as np

    return view.nbytes == 0 or np.frombuffer(view, dtype=np.uint8).ctypes.data % BUFFER_ALIGN == 0


def copy_to_output_buffer(data) -> memoryview:
    """``data`` in an :func:`output_buffer` of its own."""
    view = memoryview(data).cast("B")
    buffer = output_buffer(view.nbytes)
    buffer[:] = view
    return buffer
