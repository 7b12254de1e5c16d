"""The one object-store interface every backend implements.

An object is stored as fixed-size *chunks* under a fresh, time-ordered write *version*, then
a *manifest* (sizes, frame lengths, per-chunk CRC32, serializer, codec) is written last and
names that version. A reader reads the manifest first, so it sees either the previous complete
object or the new complete one, never a torn one. A small object (serialized size up to
``inline_bytes``, one chunk by default) is stored *inline*, in the manifest's own record: a
put is one write and a get one read.

No put reads anything first: the new manifest simply replaces the old one (last write wins),
and the superseded version's chunks are left to their TTL and the scope's purge (a backend
that learns the displaced manifest from the write itself, as Redis's ``SET ... GET`` does,
deletes them in the background). Keys have a *scope* (a Dagster run, or an asset) that is the
unit of purge: a per-run index of Cassandra partitions, one S3 prefix, one Redis key set.

Backends implement the ``_`` primitives; serialization, chunking, compression, checksums,
size limits and timing live here once.
"""
from __future__ import annotations

import abc
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator

from .errors import (ChecksumMismatchError, CorruptChunkError, CorruptManifestError, ObjectMissingError,
                     ObjectTooLargeError, StoreConfigError)
from .manifest import Manifest, ObjectKey, crc32
from .codec_choice import CodecChoice, choose_codec, throughput_record
from .head_record import HEAD_MAGIC, pack_head, unpack_head  # noqa: F401 -- the stores import them from here
from .local_copy import PRODUCER_LOCAL, RING, LocalCopies, PlacementChoice, check_placement, placement_of_put
from .replicas import (ONE_REPLICA, STORE_REPLICAS, ReplicasChoice, check_replicas, choose_replicas,
                       no_count_to_give)
from .results import GetResult, PutResult, Serialized  # what a put and a get return (imported from here too)
from .buffers import aligned, copy_to_output_buffer, output_buffer  # noqa: F401 -- output_buffer: scripts swap it here
from .serde import AUTO_CODEC, AllowedGlobal, Codec, NoCodec, Serializer, get_codec, get_serializer
from .settings import STORAGE
from .signing import PayloadSigner

MiB = 1024 * 1024


#: what :meth:`ObjectStore._read_chunks_into` yields for a chunk it received into its target
IN_PLACE = object()

#: the serializer name in a stream's manifest: its one frame is the raw bytes
STREAM_SERIALIZER = "stream"


def new_version() -> str:
    """32 hex digits ordered by creation time (nanoseconds, then 64 random bits)."""
    return f"{time.time_ns():016x}{uuid.uuid4().hex[:16]}"


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


class _ChunkEncoder:
    """Compresses, checksums and signs chunks as they go out, keeping what the manifest records."""

    def __init__(self, store: "ObjectStore", codec: Codec):
        self.codec, self.signer = codec, store.signer
        self.sizes: list[int] = []
        self.crcs: list[int] = []
        self.macs: list[str] | None = [] if store.signer else None
        self.stored = 0

    def encode(self, chunks: Iterable[memoryview]) -> Iterator[tuple[int, Any]]:
        for i, chunk in enumerate(chunks):
            data = self.codec.compress(chunk)
            self.sizes.append(chunk.nbytes)
            self.crcs.append(crc32(data))
            if self.macs is not None:
                self.macs.append(self.signer.chunk_mac(data))
            self.stored += memoryview(data).nbytes
            yield i, data


class ObjectStore(abc.ABC):
    """Stores Python values under :class:`ObjectKey` s. Subclasses give the backend primitives.

    Args:
        serializer: name of a serializer in :mod:`asgard.resources.stores.serde` (``pickle5``).
        codec: ``none``, ``lz4``, ``zstd`` or ``blosc-lz4``; compression is applied chunk by chunk.
            ``auto``: each output of 1 MiB or more gets the codec that makes it cheapest here, from a
            trial on a sample of it and the store's measured throughput (:mod:`.codec_choice`).
        chunk_size: bytes per chunk before compression.
        max_object_bytes: serialized size over which ``put`` refuses (nothing is written).
        ttl_seconds: lifetime of every stored row or object; 0 keeps them until purged.
        concurrency: chunks in flight at once, per object.
        inline_bytes: serialized size up to which an object is stored inside its manifest record
            (one write, one read); ``None`` means one chunk (``chunk_size``), 0 never.
        signing_key: secret for HMAC-SHA256 signatures (:mod:`.signing`): every put is signed, and
            a get verifies before it unpickles and refuses unsigned objects. ``None``: unsigned.
        placement: ``ring`` (the store only), ``producer-local`` (every put also keeps a copy on
            this host, :mod:`.local_copy`) or ``auto`` (where the caller says every reader runs here).
        local_reads: read a copy the manifest names for this host (False: the store, as elsewhere).
    """

    backend: str = "abstract"
    #: largest chunk the backend accepts; subclasses lower it (Cassandra's mutation limit)
    max_chunk_size: int = 1 << 30
    #: the backend has no TTL of its own: an object older than ``ttl_seconds`` (by its
    #: manifest's ``created_at``) reads as missing, like a TTL'd row
    expires_on_read: bool = False
    #: the backend keeps the copies a put asks for (``replicas``); the others keep their own
    has_replication_factor: bool = False
    replication_factor: int | None = None

    def __init__(
        self,
        serializer: str = "pickle5",
        codec: str = STORAGE["codec"].default,
        chunk_size: int = 4 * MiB,
        max_object_bytes: int = STORAGE["max_object_bytes"].default,
        ttl_seconds: int = STORAGE["ttl_seconds"].default,
        concurrency: int = STORAGE["concurrency"].default,
        inline_bytes: int | None = None,
        signing_key: str | bytes | None = None,
        placement: str = STORAGE["placement"].default,
        local_reads: bool = True,
        replicas: str = STORAGE["replicas"].default,
    ):
        self._check_client_options(chunk_size, concurrency)
        if ttl_seconds < 0:
            raise StoreConfigError(f"ttl_seconds must be 0 (no expiry) or positive, got {ttl_seconds}")
        inline_bytes = chunk_size if inline_bytes is None else inline_bytes
        if not 0 <= inline_bytes <= self.max_chunk_size:
            raise StoreConfigError(
                f"inline_bytes {inline_bytes} is outside 0..{self.max_chunk_size} bytes for {self.backend}")
        self.serializer: Serializer = get_serializer(serializer)
        self.auto_codec = codec == AUTO_CODEC
        self.codec: Codec = get_codec(None if self.auto_codec else codec)
        self.chunk_size = chunk_size
        self.max_object_bytes = max_object_bytes
        self.ttl_seconds = ttl_seconds
        self.concurrency = concurrency
        self.inline_bytes = inline_bytes
        self.signer: PayloadSigner | None = PayloadSigner(signing_key) if signing_key is not None else None
        self.placement, self.local_reads = check_placement(placement), local_reads
        self.replicas = check_replicas(replicas)
        if self.replicas == ONE_REPLICA and not self.has_replication_factor:
            raise no_count_to_give()
        self._local_copies: LocalCopies | None = None

    @property
    def local_copies(self) -> LocalCopies:
        if self._local_copies is None:  # on first use: a subclass sets its identity after this constructor
            self._local_copies = LocalCopies(self.identity(), self.ttl_seconds)
        return self._local_copies

    def _check_client_options(self, chunk_size: int, concurrency: int) -> None:
        if not 1024 <= chunk_size <= self.max_chunk_size:
            raise StoreConfigError(
                f"chunk_size {chunk_size} is outside 1 KiB..{self.max_chunk_size} bytes for {self.backend}"
            )
        if concurrency < 1:
            raise StoreConfigError(f"concurrency must be at least 1, got {concurrency}")

    def set_client_options(self, chunk_size: int, concurrency: int, codec: str) -> None:
        """Change the client side of the data path on a live store (the tuner's client knobs).
        Objects already stored keep reading: their manifests record their own chunking and codec."""
        self._check_client_options(chunk_size, concurrency)
        inline_share = self.inline_bytes / self.chunk_size if self.chunk_size else 1
        self.auto_codec = codec == AUTO_CODEC
        self.codec = get_codec(None if self.auto_codec else codec)
        self.chunk_size, self.concurrency = chunk_size, concurrency
        self.inline_bytes = min(int(chunk_size * inline_share), self.max_chunk_size)

    # --- backend primitives -----------------------------------------------------------
    @abc.abstractmethod
    def uri(self, key: ObjectKey) -> str:
        """A location string for metadata (``cassandra://host:port/ks.table/scope/path``)."""

    @abc.abstractmethod
    def _write_chunks(self, key: ObjectKey, version: str, chunks: Iterator[tuple[int, Any]], count: int) -> None:
        """Store every ``(index, bytes-like)`` with the store's TTL, at most ``concurrency`` in flight;
        ``count`` chunks will come."""

    @abc.abstractmethod
    def _read_chunks(self, key: ObjectKey, version: str, count: int) -> Iterator[tuple[int, bytes]]:
        """Yield ``(index, data)`` for chunks ``0..count-1``, in any order."""

    def _read_chunks_into(self, key: ObjectKey, version: str, count: int,
                          targets: list[memoryview] | None, reads: str | None = None) -> Iterator[tuple[int, Any]]:
        """:meth:`_read_chunks`, where a backend that can may receive chunk ``i`` straight into
        ``targets[i]`` (its stored bytes, exactly that long) and yield ``(i, IN_PLACE)`` for it,
        saving the copies between its socket and the output buffer. ``reads``: how to read them,
        from :meth:`chunk_reads_for` (a backend without a choice has None)."""
        return self._read_chunks(key, version, count)

    def chunk_reads_for(self, requested: str | None = None) -> tuple[str | None, str | None]:
        """``(how this read's chunks are read, why)``: ``requested`` (an edge's own choice) or the
        store's setting, decided here; ``(None, None)`` on a backend without a choice."""
        return None, None

    @abc.abstractmethod
    def _write_manifest(self, key: ObjectKey, manifest: Manifest, inline: bytes | memoryview | None) -> None:
        """Atomically make ``manifest`` the key's manifest, with the whole stored object ``inline``
        for a small one (the commit point of a put; one write, nothing read first)."""

    @abc.abstractmethod
    def _read_manifest(self, key: ObjectKey) -> tuple[bytes, bytes | memoryview | None] | None:
        """``(manifest, inline data or None)``, or ``None`` if the key has no manifest. Inline data
        as a writable buffer is the caller's alone (received for this read): used without a copy."""

    @abc.abstractmethod
    def _delete_key(self, key: ObjectKey) -> None:
        """Remove the manifest and every chunk of every version of the key."""

    @abc.abstractmethod
    def purge_scope(self, scope: str) -> None:
        """Remove every object in ``scope`` (a run: ``run/<run_id>``), this host's copies of them too
        (``self.local_copies.purge_scope``), and nothing else."""

    @abc.abstractmethod
    def list_paths(self, scope: str) -> list[str]:
        """Paths of the objects with a manifest in ``scope``."""

    def close(self) -> None:
        pass

    def server_hosts(self) -> int | None:
        """How many hosts the store's servers run on, where it knows (None: it does not)."""
        return None

    def ping(self) -> None:
        """Raise :class:`StoreUnavailableError` unless the server answers."""

    # --- shared mechanism -------------------------------------------------------------
    def serialize(self, obj: Any, serializer: str | None = None) -> Serialized:
        """``obj`` as the frames a put writes (by the store's serializer, or the one named): a caller
        that must size several objects before writing any serializes them first."""
        chosen = self.serializer if serializer is None else get_serializer(serializer)
        return Serialized(chosen.dumps(obj), chosen.name, f"{type(obj).__module__}.{type(obj).__qualname__}")

    def put(self, key: ObjectKey, obj: Any, codec: str | None = None, readers: int = 1,
            placement: PlacementChoice | None = None, replicas: int | ReplicasChoice | None = None) -> PutResult:
        return self.put_serialized(key, self.serialize(obj), codec, readers, placement, replicas)

    def identity(self) -> str:
        """What names this store's server and table, for records kept per store (its throughput)."""
        return self.backend

    def measured_read_mib_s(self) -> float | None:
        """This store's reads in MiB/s of stored bytes as this machine's processes measured them, None before any."""
        return throughput_record().read_mib_s(self.identity())

    def _codec_for(self, frames: list[memoryview], codec: str | None,
                   readers: int) -> tuple[Codec, CodecChoice | None]:
        """The codec of one put and, where one was made for it, the choice: ``codec`` if named (the
        caller's choice wins), chosen for this output where it or the store says ``auto``, else the
        store's (no choice)."""
        if codec is None and not self.auto_codec:
            return self.codec, None
        if codec not in (None, AUTO_CODEC):
            return get_codec(codec), CodecChoice(codec, "chosen by the caller", {})
        choice = choose_codec(frames, readers, throughput_record().read(self.identity()))
        return get_codec(choice.codec), choice

    def _observe(self, kind: str, manifest: Manifest, seconds: float, choice: CodecChoice | None = None,
                 write_seconds: float = 0.0) -> None:
        """A put or a get, timed, for the next per-output choices; a put with a codec the choice made
        (``write_seconds`` after it), against what the model expected of it too."""
        if not self.auto_codec:
            return
        # stored bytes, compressed or not, over the put's or get's seconds: once the choices compress
        # every large edge its puts and gets still measure the store ((de)compression rides in the seconds)
        if kind == "read":
            throughput_record().observe(self.identity(), kind, manifest.stored_bytes, seconds)
        elif choice is not None and choice.model_write_seconds:
            throughput_record().observe_put(self.identity(), manifest.stored_bytes, seconds, choice.codec,
                                            choice.model_write_seconds, write_seconds, choice.model_write_mb_s)
        else:
            throughput_record().observe_put(self.identity(), manifest.stored_bytes, seconds)

    def replicas_of_put(self, replicas: int | ReplicasChoice | None, readers: int | None) -> ReplicasChoice:
        """The copies of one put's chunks: the caller's count or choice, else the store's setting
        (``auto`` weighs ``readers``, :func:`~.replicas.choose_replicas`); None is the store's factor."""
        if isinstance(replicas, ReplicasChoice):
            choice = replicas
        elif replicas is not None:
            choice = ReplicasChoice(replicas, "chosen by the caller")  # the count is checked by version_for
        elif self.replicas == STORE_REPLICAS:
            return ReplicasChoice(None)
        else:
            choice = choose_replicas(self.replicas, self.replication_factor, readers)
        if choice.replicas is not None and choice.replicas == self.replication_factor:
            return ReplicasChoice(None, choice.reason)
        return choice

    def version_for(self, replicas: int | None, inline: bool = False) -> str:
        """A new version for a put whose chunks keep ``replicas`` copies (None: the store's), of an
        object kept whole in its head (``inline``) or not. A store that keeps its own copies has
        no count to give: a count is refused."""
        if replicas is not None:
            raise StoreConfigError(f"the {self.backend} store keeps its own copies of an object: it cannot give one "
                                   f"{replicas} replica(s); leave replicas unset for this store")
        return new_version()

    def put_serialized(self, key: ObjectKey, serialized: Serialized, codec: str | None = None,
                       readers: int = 1, placement: PlacementChoice | None = None,
                       replicas: int | ReplicasChoice | None = None) -> PutResult:
        """Store frames :meth:`serialize` made; refused before anything is written if too large.
        ``codec``: this output's (a name, or ``auto``), else the store's; ``readers``: how many
        times it will be read, which a per-output codec choice weighs; ``placement``: whether a
        copy is kept on this host too (:mod:`.local_copy`), else as the store's setting says;
        ``replicas``: how many copies the ring keeps of its chunks (:meth:`version_for`), else the store's."""
        t0 = time.perf_counter()
        frames = serialized.frames
        frame_lengths = [f.nbytes for f in frames]
        size = sum(frame_lengths)
        if size > self.max_object_bytes:
            raise ObjectTooLargeError(self.uri(key), size, self.max_object_bytes)
        chosen, choice = self._codec_for(frames, codec, readers)
        reason = choice.reason if choice is not None else None
        chosen_at = time.perf_counter()  # a codec's put is checked against its model without the trial
        place = placement_of_put(self.placement, placement, size, self.inline_bytes)
        copies = self.replicas_of_put(replicas, readers)
        version = self.version_for(copies.replicas, inline=size <= self.inline_bytes)
        if copies.replicas is not None and size <= self.inline_bytes:  # its head is all of it
            copies = ReplicasChoice(None, f"{copies.reason}; {size} bytes, stored inline in its manifest's record, "
                                          "which keeps the store's factor")
        encoder = _ChunkEncoder(self, chosen)
        inline = copy = None
        if size <= self.inline_bytes:
            # the whole object as one chunk kept in the manifest's record: the put is one write
            joined = b"".join(frames) if len(frames) != 1 else frames[0]
            ((_, inline),) = encoder.encode([memoryview(joined).cast("B")])
        else:
            count = -(-size // self.chunk_size)
            chunks = encoder.encode(iter_chunks(frames, self.chunk_size))
            if place.placement == PRODUCER_LOCAL:  # the stored chunks go to a file here as they go out
                copy = self.local_copies.writer(key, count)
                chunks = copy.tee(chunks)
        try:
            if inline is None:
                self._write_chunks(key, version, chunks, count)
            manifest = Manifest(
                version=version,
                size=size,
                stored_bytes=encoder.stored,
                chunk_size=self.chunk_size,
                chunk_sizes=encoder.sizes,
                chunk_crcs=encoder.crcs,
                frames=frame_lengths,
                serializer=serialized.serializer,
                codec=chosen.name,
                python_type=serialized.python_type,
                inline=inline is not None,
                chunk_macs=encoder.macs,
                local_copy=self.local_copies.host if copy is not None and copy.failed is None else None,
            )
            if self.signer:
                self.signer.sign(manifest, key)
            self._write_manifest(key, manifest, inline)
        except BaseException:
            if copy is not None:  # no temporary file left behind a failed put
                copy.abort()
            raise
        # renamed into place after the manifest: a reader finding the copy finds its manifest
        if copy is not None and not copy.commit(manifest):
            place = PlacementChoice(RING, f"{place.reason}; the local copy failed ({copy.failed}): the store has it")
        seconds = time.perf_counter() - t0
        self._observe("write", manifest, seconds, choice, time.perf_counter() - chosen_at)
        return PutResult(key, self.uri(key), manifest, seconds, reason, place.placement, place.reason or None,
                         copies.replicas, copies.reason or None)

    def put_stream(self, key: ObjectKey, pieces: Iterable, replicas: int | ReplicasChoice | None = None,
                   readers: int = 1) -> PutResult:
        """Store the bytes of ``pieces`` (a :class:`~.stream.Stream` or any iterable of bytes-like)
        chunk by chunk, never holding more than the request window; committed by the manifest,
        written last, like :meth:`put`. ``max_object_bytes`` (a bound on what a value may take in
        memory) does not apply: a stream is bounded by the store's space. ``replicas`` as for :meth:`put`."""
        t0 = time.perf_counter()
        copies = self.replicas_of_put(replicas, readers)
        version = self.version_for(copies.replicas)
        encoder = _ChunkEncoder(self, self.codec)
        self._write_chunks(key, version, encoder.encode(iter_chunks((memoryview(p) for p in pieces), self.chunk_size)),
                           None)
        size = sum(encoder.sizes)
        manifest = Manifest(
            version=version, size=size, stored_bytes=encoder.stored, chunk_size=self.chunk_size,
            chunk_sizes=encoder.sizes, chunk_crcs=encoder.crcs, frames=[size], serializer=STREAM_SERIALIZER,
            codec=self.codec.name, python_type="asgard.Stream", chunk_macs=encoder.macs,
        )
        if self.signer:
            self.signer.sign(manifest, key)
        self._write_manifest(key, manifest, None)
        return PutResult(key, self.uri(key), manifest, time.perf_counter() - t0,
                         replicas=copies.replicas, replicas_reason=copies.reason or None)

    def open_stream(self, key: ObjectKey):
        """The stored object's bytes as a :class:`~.stream.Stream` that fetches its chunks on demand
        (any object: one written by :meth:`put` reads as its serialized bytes)."""
        from .stream import ChunkReader, Stream

        head = self._head(key)
        if head is None:
            raise ObjectMissingError(self.uri(key), self.ttl_seconds or None)
        manifest, inline = head
        if sum(manifest.chunk_sizes) != manifest.size or len(manifest.chunk_crcs) != manifest.chunks:
            raise CorruptManifestError(self.uri(key), "its chunk sizes and checksums do not add up to its size")

        def decode(index: int, data) -> Any:
            if data is None:
                raise ObjectMissingError(self.uri(key) + f" (chunk {index})", self.ttl_seconds or None,
                                         "Its chunks are gone although the manifest remains.")
            return self._decode_chunk(key, manifest, index, data)

        if manifest.inline:
            chunks = iter([(0, inline if inline is not None else b"")])
        else:
            chunks = self._read_chunks(key, manifest.version, manifest.chunks)
        return Stream(ChunkReader(chunks, manifest.chunks, decode), size=manifest.size), GetResult(
            key, self.uri(key), manifest, 0.0)

    def _head(self, key: ObjectKey) -> tuple[Manifest, Any] | None:
        head = self._read_manifest(key)
        if head is None:
            return None
        manifest = Manifest.from_bytes(head[0], self.uri(key))
        if self.signer:
            self.signer.verify_manifest(manifest, key, self.uri(key))
        if self.expires_on_read and self.ttl_seconds and time.time() - manifest.created_at > self.ttl_seconds:
            return None
        if manifest.inline and head[1] is None and manifest.size:
            raise CorruptManifestError(self.uri(key), "the manifest says the data is inline but the record has none")
        return manifest, head[1]

    def read_manifest(self, key: ObjectKey) -> Manifest | None:
        head = self._head(key)
        return head[0] if head is not None else None

    def exists(self, key: ObjectKey) -> bool:
        return self._head(key) is not None

    def get(self, key: ObjectKey, chunk_reads: str | None = None,
            allowed_global: AllowedGlobal | None = None) -> tuple[Any, GetResult]:
        """The stored value and how it was read. Retries once if a rewrite raced the read.
        ``chunk_reads``: how to read its chunks on a store with a choice (:meth:`chunk_reads_for`);
        ``allowed_global``: what a pickled value may import (:class:`DisallowedGlobalError` else)."""
        t0 = time.perf_counter()
        source, fallback = "ring", None
        for attempt in range(2):
            reads = reads_reason = None  # decided only where chunks come from the store
            head = self._head(key)
            if head is None:
                raise ObjectMissingError(self.uri(key), self.ttl_seconds or None)
            manifest, inline = head
            try:
                if manifest.inline:
                    raw = self._decode_chunk(key, manifest, 0, inline if inline is not None else b"")
                    # writable: arrays unpickled from it must not come back read-only. A writable
                    # buffer from _read_manifest is this read's own (received into), used as is
                    # where it starts aligned
                    buffer = raw if isinstance(raw, memoryview) and not raw.readonly and aligned(raw) else \
                        copy_to_output_buffer(raw)
                else:
                    buffer, fallback = self._read_local(key, manifest)
                    source = "ring" if buffer is None else "local copy"
                    if buffer is None:
                        reads, reads_reason = self.chunk_reads_for(chunk_reads)
                        buffer = self._assemble(key, manifest, reads)
                break
            except ObjectMissingError:
                if attempt == 1 or self.read_manifest(key) == manifest:
                    raise
        frames, pos = [], 0
        view = memoryview(buffer)
        for length in manifest.frames:
            frames.append(view[pos : pos + length])
            pos += length
        if source == "ring":  # the bytes' transfer through the store, before unpickling (a copy's is not its speed)
            self._observe("read", manifest, time.perf_counter() - t0)
        serializer = (self.serializer if manifest.serializer == self.serializer.name
                      else get_serializer(manifest.serializer, stored=True))
        value = serializer.loads(frames, allowed_global)
        return value, GetResult(key, self.uri(key), manifest, time.perf_counter() - t0, source, fallback,
                                reads, reads_reason)

    def _read_local(self, key: ObjectKey, manifest: Manifest) -> tuple[memoryview | None, str | None]:
        """``(bytes, None)`` from this host's copy where the manifest names it, else ``(None, why or None)``."""
        if not self.local_reads or manifest.local_copy is None or manifest.local_copy != self.local_copies.host:
            return None, None
        decode = lambda i, data: self._decode_chunk(key, manifest, i, data)  # noqa: E731 -- checks as the ring's
        return self.local_copies.read(key, manifest, decode, output_buffer)

    def _codec_of(self, manifest: Manifest) -> Codec:
        return get_codec(manifest.codec) if manifest.codec != self.codec.name else self.codec

    def _decode_chunk(self, key: ObjectKey, manifest: Manifest, index: int, data) -> Any:
        if index >= manifest.chunks:
            raise CorruptManifestError(self.uri(key), f"chunk {index} is not among its {manifest.chunks} chunks")
        crc = crc32(data)
        if crc != manifest.chunk_crcs[index]:
            raise ChecksumMismatchError(self.uri(key), index, manifest.chunk_crcs[index], crc)
        if self.signer:
            self.signer.verify_chunk(manifest, index, data, self.uri(key))
        codec = self._codec_of(manifest)
        try:
            raw = codec.decompress(data, manifest.chunk_sizes[index])
        except Exception as exc:  # each codec library raises its own type on bad input
            raise CorruptChunkError(self.uri(key), index, f"{codec.name} cannot decode it: {exc}") from exc
        if memoryview(raw).nbytes != manifest.chunk_sizes[index]:
            raise CorruptChunkError(self.uri(key), index, f"{memoryview(raw).nbytes} bytes decoded, the "
                                    f"manifest says {manifest.chunk_sizes[index]}")
        return raw

    def _assemble(self, key: ObjectKey, manifest: Manifest, reads: str | None = None) -> memoryview:
        if sum(manifest.chunk_sizes) != manifest.size or len(manifest.chunk_crcs) != manifest.chunks:
            raise CorruptManifestError(self.uri(key), "its chunk sizes and checksums do not add up to its size")
        buffer = output_buffer(manifest.size)
        offsets = [0]
        for n in manifest.chunk_sizes:
            offsets.append(offsets[-1] + n)
        seen = set()
        if self._codec_of(manifest).name == NoCodec.name:  # stored bytes are the output's: receivable in place
            targets = [buffer[offsets[i] : offsets[i + 1]] for i in range(manifest.chunks)]
            chunks = self._read_chunks_into(key, manifest.version, manifest.chunks, targets, reads)
        else:
            chunks = self._read_chunks_into(key, manifest.version, manifest.chunks, None, reads)
        try:
            for index, data in chunks:
                if data is None:
                    raise ObjectMissingError(
                        self.uri(key) + f" (chunk {index})", self.ttl_seconds or None,
                        "Its chunks are gone although the manifest remains.",
                    )
                if data is IN_PLACE:  # already in the buffer: checked there (checksum, signature)
                    self._decode_chunk(key, manifest, index, targets[index])
                else:
                    raw = self._decode_chunk(key, manifest, index, data)
                    buffer[offsets[index] : offsets[index + 1]] = raw
                seen.add(index)
        finally:
            # a reader stopped by a bad chunk lets go of its connection now, not when the
            # exception's traceback (which holds this frame) is collected
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        if len(seen) != manifest.chunks:
            raise ObjectMissingError(self.uri(key), self.ttl_seconds or None, "Some chunks are missing.")
        return buffer

    def delete(self, key: ObjectKey) -> None:
        self._delete_key(key)
        self.local_copies.delete(key)


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
