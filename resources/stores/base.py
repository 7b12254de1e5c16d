"""The one object-store interface every backend implements.

An object is stored as fixed-size *chunks* under a fresh write *version*, then a *manifest*
(sizes, frame lengths, per-chunk CRC32, serializer, codec) is written last and names that
version. A reader reads the manifest first, so it sees either the previous complete object or
the new complete one, never a torn one; only after the manifest is replaced are the previous
version's chunks deleted. Keys have a *scope* (a Dagster run, or an asset) that is the unit of
purge: one Cassandra partition, one S3 prefix, one Redis key set.

Backends implement the ``_`` primitives; serialization, chunking, compression, checksums,
size limits and timing live here once.
"""
from __future__ import annotations

import abc
import json
import time
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Iterator

from .errors import ChecksumMismatchError, ObjectMissingError, ObjectTooLargeError, StoreConfigError
from .serde import Codec, Serializer, get_codec, get_serializer

MiB = 1024 * 1024


@dataclass(frozen=True)
class ObjectKey:
    """Where one object lives: ``scope`` is the purge unit, ``path`` names the object in it."""

    scope: str
    path: str

    def __post_init__(self):
        for name in ("scope", "path"):
            value = getattr(self, name)
            if not value or not isinstance(value, str):
                raise StoreConfigError(f"ObjectKey.{name} must be a non-empty string, got {value!r}")

    @classmethod
    def for_run(cls, run_id: str, *parts: str) -> "ObjectKey":
        return cls(f"run/{run_id}", "/".join(parts))

    @classmethod
    def for_asset(cls, asset_path: Iterable[str], partition: str | None = None) -> "ObjectKey":
        return cls("asset/" + "/".join(asset_path), partition if partition is not None else "__unpartitioned__")

    def __str__(self) -> str:
        return f"{self.scope}/{self.path}"


@dataclass
class Manifest:
    version: str
    size: int  # serialized bytes, before compression
    stored_bytes: int  # bytes in chunks, after compression
    chunk_size: int
    chunk_sizes: list[int]  # uncompressed length of each chunk
    chunk_crcs: list[int]  # crc32 of each chunk as stored
    frames: list[int]  # lengths of the serializer's frames
    serializer: str
    codec: str
    python_type: str = ""
    created_at: float = field(default_factory=time.time)

    @property
    def chunks(self) -> int:
        return len(self.chunk_sizes)

    @property
    def checksum(self) -> str:
        """One crc32 over the per-chunk checksums: a short fingerprint for metadata."""
        return f"{zlib.crc32(json.dumps(self.chunk_crcs).encode()):08x}"

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "Manifest":
        return cls(**json.loads(data))


@dataclass
class PutResult:
    key: ObjectKey
    uri: str
    manifest: Manifest
    seconds: float

    @property
    def mb_per_s(self) -> float:
        return self.manifest.size / MiB / self.seconds if self.seconds > 0 else float("inf")


@dataclass
class GetResult:
    key: ObjectKey
    uri: str
    manifest: Manifest
    seconds: float


def iter_chunks(frames: list[memoryview], chunk_size: int) -> Iterator[memoryview]:
    """Cut the concatenation of ``frames`` into ``chunk_size`` pieces, copying only at seams."""
    pending = bytearray()
    for frame in frames:
        view = frame.cast("B") if frame.format != "B" or frame.ndim != 1 else frame
        pos = 0
        if pending:
            take = min(chunk_size - len(pending), len(view))
            pending += view[:take]
            pos = take
            if len(pending) < chunk_size:
                continue
            yield memoryview(bytes(pending))
            pending = bytearray()
        while len(view) - pos >= chunk_size:
            yield view[pos : pos + chunk_size]
            pos += chunk_size
        if pos < len(view):
            pending += view[pos:]
    if pending:
        yield memoryview(bytes(pending))


class ObjectStore(abc.ABC):
    """Stores Python values under :class:`ObjectKey` s. Subclasses give the backend primitives.

    Args:
        serializer: name of a serializer in :mod:`resources.stores.serde` (``pickle5``).
        codec: ``none``, ``lz4`` or ``zstd``; compression is applied chunk by chunk.
        chunk_size: bytes per chunk before compression.
        max_object_bytes: serialized size over which ``put`` refuses (nothing is written).
        ttl_seconds: lifetime of every stored row or object; 0 keeps them until purged.
        concurrency: chunks in flight at once, per object.
    """

    backend: str = "abstract"
    #: largest chunk the backend accepts; subclasses lower it (Cassandra's mutation limit)
    max_chunk_size: int = 1 << 30

    def __init__(
        self,
        serializer: str = "pickle5",
        codec: str = "none",
        chunk_size: int = 4 * MiB,
        max_object_bytes: int = 2 << 30,
        ttl_seconds: int = 7 * 24 * 3600,
        concurrency: int = 8,
    ):
        if not 1024 <= chunk_size <= self.max_chunk_size:
            raise StoreConfigError(
                f"chunk_size {chunk_size} is outside 1 KiB..{self.max_chunk_size} bytes for {self.backend}"
            )
        if concurrency < 1:
            raise StoreConfigError(f"concurrency must be at least 1, got {concurrency}")
        if ttl_seconds < 0:
            raise StoreConfigError(f"ttl_seconds must be 0 (no expiry) or positive, got {ttl_seconds}")
        self.serializer: Serializer = get_serializer(serializer)
        self.codec: Codec = get_codec(codec)
        self.chunk_size = chunk_size
        self.max_object_bytes = max_object_bytes
        self.ttl_seconds = ttl_seconds
        self.concurrency = concurrency

    # --- backend primitives -----------------------------------------------------------
    @abc.abstractmethod
    def uri(self, key: ObjectKey) -> str:
        """A location string for metadata (``cassandra://host:port/ks.table/scope/path``)."""

    @abc.abstractmethod
    def _write_chunks(self, key: ObjectKey, version: str, chunks: Iterator[tuple[int, Any]]) -> None:
        """Store every ``(index, bytes-like)`` with the store's TTL, at most ``concurrency`` in flight."""

    @abc.abstractmethod
    def _read_chunks(self, key: ObjectKey, version: str, count: int) -> Iterator[tuple[int, bytes]]:
        """Yield ``(index, data)`` for chunks ``0..count-1``, in any order."""

    @abc.abstractmethod
    def _write_manifest(self, key: ObjectKey, data: bytes) -> None:
        """Atomically make ``data`` the key's manifest (the commit point of a put)."""

    @abc.abstractmethod
    def _read_manifest(self, key: ObjectKey) -> bytes | None:
        ...

    @abc.abstractmethod
    def _delete_version(self, key: ObjectKey, version: str, count: int) -> None:
        """Remove one version's chunks (after a newer manifest replaced it)."""

    @abc.abstractmethod
    def _delete_key(self, key: ObjectKey) -> None:
        """Remove the manifest and every chunk of the key."""

    @abc.abstractmethod
    def purge_scope(self, scope: str) -> None:
        """Remove every object in ``scope`` (a run: ``run/<run_id>``) and nothing else."""

    @abc.abstractmethod
    def list_paths(self, scope: str) -> list[str]:
        """Paths of the objects with a manifest in ``scope``."""

    def close(self) -> None:
        pass

    def ping(self) -> None:
        """Raise :class:`StoreUnavailableError` unless the server answers."""

    # --- shared mechanism -------------------------------------------------------------
    def put(self, key: ObjectKey, obj: Any) -> PutResult:
        t0 = time.perf_counter()
        frames = self.serializer.dumps(obj)
        frame_lengths = [f.nbytes for f in frames]
        size = sum(frame_lengths)
        if size > self.max_object_bytes:
            raise ObjectTooLargeError(self.uri(key), size, self.max_object_bytes)
        previous = self.read_manifest(key)
        version = uuid.uuid4().hex
        chunk_sizes: list[int] = []
        chunk_crcs: list[int] = []
        stored = 0

        def encoded() -> Iterator[tuple[int, Any]]:
            nonlocal stored
            for i, chunk in enumerate(iter_chunks(frames, self.chunk_size)):
                data = self.codec.compress(chunk)
                chunk_sizes.append(chunk.nbytes)
                chunk_crcs.append(zlib.crc32(data))
                stored += len(data) if not isinstance(data, memoryview) else data.nbytes
                yield i, data

        self._write_chunks(key, version, encoded())
        manifest = Manifest(
            version=version,
            size=size,
            stored_bytes=stored,
            chunk_size=self.chunk_size,
            chunk_sizes=chunk_sizes,
            chunk_crcs=chunk_crcs,
            frames=frame_lengths,
            serializer=self.serializer.name,
            codec=self.codec.name,
            python_type=f"{type(obj).__module__}.{type(obj).__qualname__}",
        )
        self._write_manifest(key, manifest.to_bytes())
        if previous is not None and previous.version != version:
            self._delete_version(key, previous.version, previous.chunks)
        return PutResult(key, self.uri(key), manifest, time.perf_counter() - t0)

    def read_manifest(self, key: ObjectKey) -> Manifest | None:
        data = self._read_manifest(key)
        return Manifest.from_bytes(data) if data is not None else None

    def exists(self, key: ObjectKey) -> bool:
        return self._read_manifest(key) is not None

    def get(self, key: ObjectKey) -> tuple[Any, GetResult]:
        """The stored value and how it was read. Retries once if a rewrite raced the read."""
        t0 = time.perf_counter()
        for attempt in range(2):
            manifest = self.read_manifest(key)
            if manifest is None:
                raise ObjectMissingError(self.uri(key), self.ttl_seconds or None)
            try:
                buffer = self._assemble(key, manifest)
                break
            except ObjectMissingError:
                if attempt == 1 or self.read_manifest(key) == manifest:
                    raise
        frames, pos = [], 0
        view = memoryview(buffer)
        for length in manifest.frames:
            frames.append(view[pos : pos + length])
            pos += length
        serializer = get_serializer(manifest.serializer) if manifest.serializer != self.serializer.name else self.serializer
        value = serializer.loads(frames)
        return value, GetResult(key, self.uri(key), manifest, time.perf_counter() - t0)

    def _assemble(self, key: ObjectKey, manifest: Manifest) -> bytearray:
        codec = get_codec(manifest.codec) if manifest.codec != self.codec.name else self.codec
        buffer = bytearray(manifest.size)
        offsets = [0]
        for n in manifest.chunk_sizes:
            offsets.append(offsets[-1] + n)
        seen = 0
        for index, data in self._read_chunks(key, manifest.version, manifest.chunks):
            if data is None:
                raise ObjectMissingError(
                    self.uri(key) + f" (chunk {index})", self.ttl_seconds or None,
                    "Its chunks are gone although the manifest remains.",
                )
            crc = zlib.crc32(data)
            if crc != manifest.chunk_crcs[index]:
                raise ChecksumMismatchError(self.uri(key), index, manifest.chunk_crcs[index], crc)
            raw = codec.decompress(data, manifest.chunk_sizes[index])
            buffer[offsets[index] : offsets[index + 1]] = raw
            seen += 1
        if seen != manifest.chunks:
            raise ObjectMissingError(self.uri(key), self.ttl_seconds or None, "Some chunks are missing.")
        return buffer

    def delete(self, key: ObjectKey) -> None:
        self._delete_key(key)


def run_bounded(fn: Callable[[Any], Any], items: Iterable[Any], concurrency: int) -> Iterator[Any]:
    """Apply ``fn`` to ``items`` on threads with at most ``concurrency`` in flight (backpressure:
    the next item is not even produced until a slot is free). Yields results as they finish."""
    if concurrency <= 1:
        for item in items:
            yield fn(item)
        return
    from collections import deque

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        window: deque = deque()
        for item in items:
            if len(window) >= concurrency:
                yield window.popleft().result()
            window.append(pool.submit(fn, item))
        while window:
            yield window.popleft().result()
