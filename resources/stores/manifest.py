"""What names an object (:class:`ObjectKey`) and what describes a stored one (:class:`Manifest`),
and the manifest's signed encoding (:func:`signed_bytes`): explicit, versioned, independent of
the dataclass's fields, so a field added to the manifest changes no signature."""
from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from typing import Iterable

from .errors import CorruptManifestError, StoreConfigError

try:  # ISA-L's CRC-32: the same checksum as zlib's (old manifests still check), 18x faster here
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a dependency; zlib's is the same function
    from zlib import crc32


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
    inline: bool = False  # the one chunk is stored in the manifest's own record
    chunk_macs: list[str] | None = None  # HMAC-SHA256 of each chunk as stored (signed stores)
    signer: str | None = None  # id of the signing key
    signature: str | None = None  # HMAC-SHA256 over the object's key and this manifest
    #: the host keeping a producer-local copy (:mod:`.local_copy`), a hint for readers: unsigned,
    #: as the copy's chunks are checked against the signed checksums and MACs
    local_copy: str | None = None

    @property
    def chunks(self) -> int:
        return len(self.chunk_sizes)

    @property
    def checksum(self) -> str:
        """One crc32 over the per-chunk checksums: a short fingerprint for metadata."""
        return f"{crc32(json.dumps(self.chunk_crcs).encode()):08x}"

    def to_bytes(self) -> bytes:
        # the fields are plain values: vars() is asdict() without its deep copy (150 us a put)
        fields = vars(self)
        if self.local_copy is None:  # absent, not null: readers of earlier versions take the manifest
            fields = {k: v for k, v in fields.items() if k != "local_copy"}
        return json.dumps(fields, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "") -> "Manifest":
        try:
            fields = json.loads(bytes(data))
            manifest = cls(**fields)
        except (ValueError, TypeError, RecursionError) as exc:
            raise CorruptManifestError(where or "an object", f"{type(exc).__name__}: {exc}") from exc
        problem = manifest._problem()
        if problem:
            raise CorruptManifestError(where or "an object", problem)
        return manifest

    def _problem(self) -> str | None:
        """What makes this manifest unusable, or ``None``: every field is checked before a
        reader trusts it to size buffers, split frames or pick a codec."""
        def count(v):
            return type(v) is int and v >= 0

        def counts(v):
            return type(v) is list and all(count(x) for x in v)

        if not (isinstance(self.version, str) and self.version):
            return "its version is not a non-empty string"
        if not (count(self.size) and count(self.stored_bytes) and count(self.chunk_size) and self.chunk_size):
            return "its sizes are not non-negative integers"
        if not (counts(self.chunk_sizes) and counts(self.chunk_crcs) and counts(self.frames)):
            return "its chunk sizes, checksums or frame lengths are not lists of non-negative integers"
        if len(self.chunk_crcs) != len(self.chunk_sizes) or sum(self.chunk_sizes) != self.size \
                or sum(self.frames) != self.size \
                or (not self.inline and any(n > self.chunk_size for n in self.chunk_sizes)):
            return "its chunk sizes, checksums and frame lengths do not add up to its size"
        if not all(isinstance(v, str) for v in (self.serializer, self.codec, self.python_type)):
            return "its serializer, codec or type is not a string"
        if type(self.created_at) not in (int, float) or type(self.inline) is not bool:
            return "its creation time or inline flag has the wrong type"
        if self.inline and len(self.chunk_sizes) != 1:
            return "it says it is inline but lists other than one chunk"
        if not (self.chunk_macs is None or (type(self.chunk_macs) is list and all(isinstance(m, str) for m in self.chunk_macs))):
            return "its chunk MACs are not a list of strings"
        if not all(v is None or isinstance(v, str) for v in (self.signer, self.signature, self.local_copy)):
            return "its signer, signature or local copy's host is not a string"
        return None


#: the manifest fields a signature covers, in the order signed_bytes encodes them (format v2).
#: A new field of Manifest is not signed until it is added here, as a new format version.
SIGNED_FIELDS_V2 = ("version", "size", "stored_bytes", "chunk_size", "chunk_sizes", "chunk_crcs", "frames",
                    "serializer", "codec", "python_type", "created_at", "inline", "chunk_macs", "signer")
SIGNED_FORMAT = "v2"
_LENGTH = struct.Struct(">I")


def signed_bytes(manifest: Manifest, key: ObjectKey) -> bytes:
    """The bytes a manifest's signature covers (format v2): a tag naming the format, the object's
    key, then each field of :data:`SIGNED_FIELDS_V2` in order as its name and its canonical JSON
    value, every part length-prefixed (4 bytes, big-endian) so no two manifests encode alike."""
    parts = [b"asgard-manifest-v2", str(key).encode()]
    for name in SIGNED_FIELDS_V2:
        parts.append(name.encode())
        parts.append(json.dumps(getattr(manifest, name), separators=(",", ":"), sort_keys=True).encode())
    return b"".join(_LENGTH.pack(len(p)) + p for p in parts)


def signed_bytes_v1(manifest: Manifest, key: ObjectKey) -> bytes:
    """Format v1 (signatures without a ``v2:`` prefix, written before it): every field of the
    dataclass as JSON. Kept to verify objects an earlier version stored; never used to sign."""
    body = dict(vars(manifest), signature=None)
    return b"asgard-manifest-v1\n" + str(key).encode() + b"\n" + json.dumps(
        body, sort_keys=True, separators=(",", ":")).encode()
