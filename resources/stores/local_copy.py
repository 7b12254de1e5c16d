"""Where an output lives relative to its readers (placement), and the producer-local copy.

An output placed ``producer-local`` is written to the store exactly as any other (the store
stays the source of truth: retries, re-executions and readers on other hosts find it there) and,
besides, kept as a file on the producer's host (:class:`LocalCopies`). Its manifest names that
host (``Manifest.local_copy``); a reader on the same host (the same host name and
``ASGARD_HOME``) reads the manifest from the store, then the file instead of the chunks, each
chunk checked against the manifest's checksums (and MACs, for a signed store) before it is used.
A missing, stale, partial or mismatching copy falls back to the store, counted by reason.

A copy is one file: a header (``AGL1``, its length, a JSON object naming the key, the version
and each chunk's stored length, padded to a 4 KiB page) and the chunks as stored. It is written
under a temporary name and renamed when whole (``os.replace``): a reader never sees half of one.
It is not fsynced: after a power loss a torn copy fails the reader's checks and the store serves.
Copies go with their scope's purge on this host, and, like the store's rows, after
``ttl_seconds`` (swept when a store first keeps a copy in a process); a copy on another host
outlives a purge only on disk: with its manifest gone it is never read.

    choice = choose_placement("auto", same_host=True, why="multiprocess executor: one host")
    choice.placement, choice.reason   # "producer-local", "multiprocess executor: one host"
"""
from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import quote

from .errors import ChecksumMismatchError, CorruptChunkError, StoreConfigError, TamperedObjectError
from .manifest import Manifest, ObjectKey

AUTO_PLACEMENT, RING, PRODUCER_LOCAL = "auto", "ring", "producer-local"
#: the values of the ``placement`` setting and of an output's ``asgard/placement``
PLACEMENTS = (AUTO_PLACEMENT, RING, PRODUCER_LOCAL)
MAGIC = b"AGL1"
#: the header is padded to a page: the chunks start page-aligned
PAGE = 4096
#: a temporary file older than this is a producer's that died mid-copy
STALE_TEMP_SECONDS = 3600
#: chunks a put hands its copy's writer thread ahead of the file (a window: a compressed chunk is held till written)
WRITE_AHEAD_CHUNKS = 16
#: why a local copy was not used, as counted in :attr:`LocalCopies.counts` (``fallback_<reason>``)
FALLBACK_REASONS = ("missing", "stale", "partial", "mismatch")


@dataclass(frozen=True)
class PlacementChoice:
    """Where one output is kept: ``ring`` (the store only) or ``producer-local`` (the store and a
    copy on the producer's host), and why, in a line for the output's metadata."""

    placement: str
    reason: str


def check_placement(value: Any, where: str = "placement") -> str:
    """``value`` if it names a placement, else :class:`StoreConfigError` naming the allowed ones."""
    if value not in PLACEMENTS:
        raise StoreConfigError(f"{where} {value!r} is not one of {', '.join(PLACEMENTS)}")
    return value


#: readers on the producer's host from which ``auto`` keeps a copy while the store's reads are not
#: measured here. Measured on loopback (docs/results/issue37-placement.txt): keeping the copy adds
#: 0.24 s to a 256 MiB put (0.05 s at 64 MiB) and a read through it saves 0.118 s (0.019 s): one
#: reader loses, two break even at 256 MiB
MIN_READERS_FOR_COPY = 2
#: a read through a copy, and what keeping one adds to a put, in MiB/s of its bytes (the same
#: measurement: 1885-1890 MiB/s reads; +0.24 s on a 256 MiB put)
COPY_READ_MIB_S, COPY_WRITE_MIB_S = 1890.0, 1067.0
#: the readers a copy needs where the store reads as fast as one: no count of readers is enough
COPY_NEVER_PAYS = 1_000_000


def readers_to_pay_for_copy(store_read_mib_s: float | None) -> tuple[int, str]:
    """Readers on the producer's host from which a copy saves more than it costs, and the figure it
    rests on: each read through the copy saves reading through the store (at ``store_read_mib_s``,
    as this machine's processes measured it) less reading the copy; keeping it costs its write.
    Behind a slower link or a busier ring one reader pays; on an idle loopback node two."""
    if not store_read_mib_s or store_read_mib_s <= 0:  # none yet (or a record edited by hand)
        return MIN_READERS_FOR_COPY, "store reads not measured here yet"
    where = f"reads through the store at {store_read_mib_s:.0f} MiB/s (measured here), the copy at {COPY_READ_MIB_S:.0f}"
    saving = 1 / store_read_mib_s - 1 / COPY_READ_MIB_S
    if saving <= 0:
        return COPY_NEVER_PAYS, f"{where}: the store reads as fast as a copy"
    return max(1, round((1 / COPY_WRITE_MIB_S) / saving)), where


def choose_placement(requested: str, same_host: bool | None, why: str, readers: int | None = None,
                     any_of_hosts: int | None = None, store_read_mib_s: float | None = None) -> PlacementChoice:
    """The placement of one output: the caller's ``ring`` or ``producer-local`` as asked; for
    ``auto``, ``producer-local`` where every reader runs on the producer's host (``same_host``,
    as the caller's executor and topology say, with ``why``) and they are enough to pay for the
    copy (``readers``, where the caller knows them: :func:`readers_to_pay_for_copy` of the store's
    measured ``store_read_mib_s``), else ``ring``. Readers that may each run on any of
    ``any_of_hosts`` hosts (a shared queue) get the copy as a cache where the share of them
    expected on this host is still enough; the rest read the ring."""
    check_placement(requested)
    if requested != AUTO_PLACEMENT:
        return PlacementChoice(requested, f"chosen by the caller ({why})" if why else "chosen by the caller")
    needed, basis = readers_to_pay_for_copy(store_read_mib_s)
    if not same_host and any_of_hosts and readers:
        here = readers / any_of_hosts
        if here >= needed:
            return PlacementChoice(PRODUCER_LOCAL, f"auto: {why}; of its {readers} readers about {here:.1f} run on "
                                   f"this host (1 in {any_of_hosts}): a copy here serves them, the ring the rest")
        under = "and a copy saves them nothing" if needed == COPY_NEVER_PAYS else f"under the {needed} a copy costs"
        return PlacementChoice(RING, f"auto: {why}; of its {readers} reader(s) about {here:.1f} would run on this "
                                     f"host (1 in {any_of_hosts}), {under} ({basis})")
    if same_host and readers is not None and readers < needed:
        if needed == COPY_NEVER_PAYS:
            return PlacementChoice(RING, f"auto: {why}, but a copy saves its readers nothing ({basis})")
        return PlacementChoice(RING, f"auto: {why}, but a copy costs the put about what {needed} "
                                     f"reads through it save, and it has {readers} ({basis})")
    if same_host and readers is not None:
        return PlacementChoice(PRODUCER_LOCAL, f"auto: {why}; {readers} read(s) through a copy pay for it "
                                               f"from {needed} ({basis})")
    if same_host:
        return PlacementChoice(PRODUCER_LOCAL, f"auto: {why}")
    return PlacementChoice(RING, f"auto: {why}")


def placement_of_put(setting: str, placement: PlacementChoice | None, size: int,
                     inline_bytes: int) -> PlacementChoice:
    """The placement of one put: the caller's choice (:func:`choose_placement`), else the store's
    ``setting``; an object stored inline (up to ``inline_bytes``) is always the store's alone."""
    if placement is None:
        placement = PlacementChoice(PRODUCER_LOCAL, "the store's placement setting") if setting == PRODUCER_LOCAL \
            else PlacementChoice(RING, "auto: the caller did not say where its readers run"
                                 if setting == AUTO_PLACEMENT else "")
    if placement.placement == PRODUCER_LOCAL and size <= inline_bytes:
        return PlacementChoice(RING, f"{size} bytes, stored inline in its manifest's record: the one read of "
                               "the manifest brings it, a local copy would add a read")
    return placement


def local_host() -> str:
    """This host as a reader of local copies: its name and a digest of its ``ASGARD_HOME`` (the
    project's emulated hosts share a kernel's name but each has a root of its own)."""
    from ..paths import asgard_home

    home = hashlib.sha256(str(asgard_home()).encode()).hexdigest()[:10]
    return f"{socket.gethostname()}/{home}"


class LocalCopies:
    """The local copies one store keeps on this host, under
    ``$ASGARD_HOME/run/local-copies/<host digest>/<store digest>/<scope>/<path>.copy``.

    ``counts``: ``written``, ``write_failed``, ``read`` (served from a copy) and
    ``fallback_<reason>`` (read from the store instead), for this process."""

    def __init__(self, store_identity: str, ttl_seconds: int):
        from ..paths import asgard_home

        self.host = local_host()
        digest = lambda text: hashlib.sha256(text.encode()).hexdigest()[:16]  # noqa: E731
        self.root = asgard_home() / "run" / "local-copies" / digest(self.host) / digest(store_identity)
        self.ttl_seconds = ttl_seconds
        self.counts: Counter = Counter()
        self._swept = False

    def path(self, key: ObjectKey) -> Path:
        return self.root / _component(key.scope) / (_component(key.path) + ".copy")

    # --- writing ----------------------------------------------------------------------------
    def writer(self, key: ObjectKey, chunks: int) -> "CopyWriter":
        """A copy of ``key``'s ``chunks`` stored chunks, to be written as they go to the store."""
        if not self._swept:
            self._swept = True
            self.sweep()
        return CopyWriter(self, key, chunks)

    def sweep(self) -> int:
        """Remove this host's copies older than ``ttl_seconds`` (the store's rows expire so) and
        temporary files of producers that died mid-copy; the number removed."""
        if not self.root.is_dir():
            return 0
        now, removed = time.time(), 0
        for folder, _dirs, files in os.walk(self.root):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    age = now - os.stat(path).st_mtime
                    temp = name.startswith(".tmp-")
                    expired = self.ttl_seconds and age > self.ttl_seconds
                    if (temp and age > STALE_TEMP_SECONDS) or (not temp and expired):
                        os.unlink(path)
                        removed += 1
                except FileNotFoundError:  # another process's sweep or purge was first
                    continue
        return removed

    # --- reading ----------------------------------------------------------------------------
    def read(self, key: ObjectKey, manifest: Manifest, decode: Callable[[int, Any], Any],
             new_buffer: Callable[[int], memoryview]) -> tuple[memoryview | None, str | None]:
        """``(the object's bytes from its copy here, None)``, each chunk checked by ``decode`` (the
        store's: checksum, MAC, decompression), or ``(None, why not)`` (counted) where it cannot serve."""
        got = self._read_into(key, manifest, decode, new_buffer)
        if isinstance(got, str):
            self.counts[f"fallback_{got}"] += 1
            return None, got
        self.counts["read"] += 1
        return got, None

    def _read_into(self, key, manifest, decode, new_buffer) -> memoryview | str:
        try:
            f = open(self.path(key), "rb", buffering=0)
        except FileNotFoundError:
            return "missing"
        with f:
            header = _read_header(f)
            if header is None:
                return "partial"
            start, fields = header
            if fields.get("version") != manifest.version or fields.get("key") != str(key):
                return "stale"  # a rewrite of the key superseded it
            stored = fields.get("stored")
            if (not isinstance(stored, list) or len(stored) != manifest.chunks
                    or sum(stored) != manifest.stored_bytes
                    or os.fstat(f.fileno()).st_size != start + manifest.stored_bytes):
                return "partial"
            raw = manifest.codec == "none"
            # raw chunks are the object's bytes: read straight into the output buffer
            data = new_buffer(manifest.size) if raw else memoryview(bytearray(manifest.stored_bytes))
            if not _read_fully(f, data, start):
                return "partial"
            buffer = data if raw else new_buffer(manifest.size)
            pos = out = 0
            try:
                for index, length in enumerate(stored):
                    chunk = decode(index, data[pos : pos + length])
                    if not raw:
                        n = manifest.chunk_sizes[index]
                        buffer[out : out + n] = chunk
                        out += n
                    pos += length
            except (ChecksumMismatchError, CorruptChunkError, TamperedObjectError):
                return "mismatch"
            return buffer

    # --- removal ----------------------------------------------------------------------------
    def delete(self, key: ObjectKey) -> None:
        self.path(key).unlink(missing_ok=True)

    def purge_scope(self, scope: str) -> None:
        """Remove this host's copies of ``scope`` (the store's purge removes its rows)."""
        shutil.rmtree(self.root / _component(scope), ignore_errors=True)


class CopyWriter:
    """One copy being written: :meth:`tee` passes the stored chunks on to the store and to a thread
    writing them to a temporary file meanwhile (the file's write overlaps the store's); :meth:`commit`
    names the version and renames it into place. A failure here (a full disk) never fails the put:
    the copy is dropped, the store has it all."""

    def __init__(self, copies: LocalCopies, key: ObjectKey, chunks: int):
        self.copies, self.key = copies, key
        # the chunks start after the header's pages, which their count alone sizes
        self.start = PAGE * _header_pages(chunks)
        self.stored: list[int] = []
        self.failed: str | None = None
        self._file = None
        self._tmp: str | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=WRITE_AHEAD_CHUNKS)
        self._thread: threading.Thread | None = None
        self._error: OSError | None = None
        try:
            target = copies.path(key)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")  # 0600: outputs may be private
            self._file = os.fdopen(fd, "wb", buffering=0)
            self._file.seek(self.start)  # the header's pages are left for commit, which knows the version
        except OSError as exc:
            self._fail(exc)
            return
        self._thread = threading.Thread(target=self._drain, name="asgard-local-copy", daemon=True)
        self._thread.start()

    def tee(self, chunks: Iterator[tuple[int, Any]]) -> Iterator[tuple[int, Any]]:
        for index, data in chunks:
            if self._thread is not None:
                self._queue.put(data)
            yield index, data

    def _drain(self) -> None:
        """The writer thread: every chunk handed over, in order, until None; after an error it
        only takes them (the put must not wait on a copy that is dropped anyway)."""
        while (data := self._queue.get()) is not None:
            if self._error is None:
                try:
                    view = memoryview(data)
                    _write_fully(self._file, view)
                    self.stored.append(view.nbytes)
                except OSError as exc:
                    self._error = exc

    def _finish(self) -> None:
        """Wait for the writer thread to write what it was handed."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
            if self._error is not None:
                self._fail(self._error)

    def commit(self, manifest: Manifest) -> bool:
        """Make the copy the key's (after its manifest is in the store); False if it was dropped."""
        self._finish()
        if self.failed is None and len(self.stored) != manifest.chunks:
            self._fail(OSError(f"{len(self.stored)} chunks written of {manifest.chunks}"))
        if self.failed is not None:
            return False
        try:
            body = json.dumps({"key": str(self.key), "version": manifest.version, "stored": self.stored},
                              separators=(",", ":")).encode()
            if 8 + len(body) > self.start:  # a key too long for the pages left: no copy, the store serves
                raise OSError(f"header of {len(body)} bytes outgrew its {self.start} bytes")
            self._file.seek(0)
            _write_fully(self._file, memoryview(MAGIC + len(body).to_bytes(4, "big") + body))
            self._file.close()
            os.replace(self._tmp, self.copies.path(self.key))
        except OSError as exc:
            self._fail(exc)
            return False
        self.copies.counts["written"] += 1
        return True

    def abort(self) -> None:
        self._finish()
        if self.failed is None:
            self._fail(None)

    def _fail(self, exc: BaseException | None) -> None:
        self.failed = f"{type(exc).__name__}: {exc}" if exc else "aborted"
        if exc is not None:
            self.copies.counts["write_failed"] += 1
        if self._file is not None and not self._file.closed:
            self._file.close()
        if self._tmp:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass


def _component(text: str) -> str:
    """``text`` as one file name: with "/" and "." escaped, no scope or path can leave the root."""
    return quote(text, safe="").replace(".", "%2E")


def _header_pages(chunks: int) -> int:
    """Pages the header of ``chunks`` chunks takes (its JSON: the key, the version, up to 16
    characters per chunk's length, 2 KiB for the rest), fixed by the count alone so the chunks
    can be written before the header."""
    return 1 + (chunks * 16 + 2048) // PAGE


def _read_header(f) -> tuple[int, dict] | None:
    """``(offset of the first chunk, the header's fields)``, None if it is not a whole header."""
    head = f.read(8)
    if len(head) != 8 or head[:4] != MAGIC:
        return None
    length = int.from_bytes(head[4:8], "big")
    body = f.read(length)
    if len(body) != length:
        return None
    try:
        fields = json.loads(body)
    except ValueError:
        return None
    stored = fields.get("stored") if isinstance(fields, dict) else None
    if not isinstance(stored, list) or not all(type(n) is int and n >= 0 for n in stored):
        return None
    return PAGE * _header_pages(len(stored)), fields


def _read_fully(f, target: memoryview, offset: int) -> bool:
    f.seek(offset)
    view, pos = target.cast("B") if target.format != "B" else target, 0
    while pos < view.nbytes:
        n = f.readinto(view[pos:])
        if not n:
            return False
        pos += n
    return True


def _write_fully(f, view: memoryview) -> None:
    view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    while view.nbytes:
        view = view[f.write(view):]
