"""The one-value manifest record of the stores that keep a manifest as a single value (a Redis
key, an S3 object, a file): ``AGH1``, the manifest's length, the manifest, a small object's data."""
from __future__ import annotations

from .errors import CorruptManifestError

HEAD_MAGIC = b"AGH1"


def pack_head(manifest: bytes, inline: bytes | memoryview | None) -> list:
    """One record holding a manifest and, for a small object, its data: ``AGH1``, the manifest's
    length (4 bytes, big-endian), the manifest, the inline data. For backends whose manifest is
    a single value (a Redis key, an S3 object, a file); Cassandra uses two columns instead."""
    parts = [HEAD_MAGIC + len(manifest).to_bytes(4, "big"), manifest]
    if inline is not None:
        parts.append(inline)
    return parts


def unpack_head(record: bytes, where: str = "") -> tuple[bytes, bytes | None]:
    """``(manifest, inline data or None)`` from a :func:`pack_head` record."""
    view = memoryview(record)
    if len(view) < 8 or bytes(view[:4]) != HEAD_MAGIC:
        raise CorruptManifestError(
            where or "an object", "its manifest record does not start with the AGH1 header (written by "
            "another layout or version of asgard-dagster?)")
    length = int.from_bytes(view[4:8], "big")
    if 8 + length > len(view):
        raise CorruptManifestError(where or "an object", f"manifest length {length} runs past the record's end")
    manifest = bytes(view[8 : 8 + length])
    rest = view[8 + length :]
    return manifest, (rest if len(rest) else None)
