"""What a put and a get return (:class:`PutResult`, :class:`GetResult`), a value as a put writes
it (:class:`Serialized`), and how a store with a choice reads an object's chunks."""
from __future__ import annotations

from dataclasses import dataclass

from .local_copy import RING
from .manifest import Manifest, ObjectKey

MiB = 1024 * 1024


@dataclass
class Serialized:
    """A value as a put writes it: its frames, the serializer that reads them back, its Python type."""

    frames: list[memoryview]
    serializer: str
    python_type: str

    @property
    def size(self) -> int:
        return sum(f.nbytes for f in self.frames)


@dataclass
class PutResult:
    key: ObjectKey
    uri: str
    manifest: Manifest
    seconds: float
    #: why the manifest's codec was chosen, where it was chosen per output (``codec="auto"``)
    codec_reason: str | None = None
    #: ``ring``, or ``producer-local`` where a copy was kept on this host too (:mod:`.local_copy`); and why
    placement: str = RING
    placement_reason: str | None = None
    #: copies of its chunks where fewer than the store's factor (1), and why; None: the store's
    replicas: int | None = None
    replicas_reason: str | None = None

    @property
    def mb_per_s(self) -> float:
        return self.manifest.size / MiB / self.seconds if self.seconds > 0 else float("inf")


#: how a store with a choice reads an object's chunks (Cassandra's ``chunk_reads``; an input's
#: ``asgard/chunk_reads``): at its consistency, at ONE from a replica on this host first, or chosen
QUORUM_READS, NEAREST_ONE, AUTO_READS = "quorum", "nearest-one", "auto"
CHUNK_READS = (QUORUM_READS, NEAREST_ONE, AUTO_READS)


@dataclass
class GetResult:
    key: ObjectKey
    uri: str
    manifest: Manifest
    seconds: float
    #: what the bytes were read from: ``ring`` (the store) or ``local copy`` (this host's), and why a
    #: copy the manifest names for this host was not used (``missing``, ``stale``, ``partial``, ``mismatch``)
    source: str = "ring"
    fallback: str | None = None
    #: how the chunks were read, on a store with a choice (Cassandra's ``chunk_reads``), and why
    chunk_reads: str | None = None
    chunk_reads_reason: str | None = None
