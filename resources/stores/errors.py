"""Typed errors of the object stores: each says what was wrong and what to do."""
from __future__ import annotations


class StoreError(Exception):
    """Base class of every object-store error."""


class StoreConfigError(StoreError):
    """A store was configured with values it cannot use; the message names the setting and what to give."""


class StoreUnavailableError(StoreError):
    """The storage server cannot be reached.

    Attributes: ``backend`` (its name), ``where`` (the addresses tried), ``hint`` (what to do).
    """

    def __init__(self, backend: str, where: str, hint: str, cause: BaseException | None = None):
        self.backend, self.where, self.hint = backend, where, hint
        detail = f": {type(cause).__name__}: {cause}" if cause else ""
        super().__init__(f"{backend} is unreachable at {where}{detail}. {hint}")


class StoreFullError(StoreError):
    """The server refused a write because it is full (memory or disk). Nothing already stored
    was changed: the previous object under the key still reads.

    Attributes: ``backend``, ``where``.
    """

    def __init__(self, backend: str, where: str, detail: str, hint: str):
        self.backend, self.where = backend, where
        super().__init__(f"{backend} at {where} refused the write: it is full ({detail}). {hint}")


class ObjectMissingError(StoreError):
    """No complete object is stored under the key: never written, purged, or expired.

    Attributes: ``uri`` (where it was looked for), ``ttl_seconds`` (the store's lifetime, if any).
    """

    def __init__(self, uri: str, ttl_seconds: int | None = None, hint: str = ""):
        self.uri, self.ttl_seconds = uri, ttl_seconds
        ttl = f", or expired after its TTL of {ttl_seconds}s" if ttl_seconds else ""
        msg = f"No stored object at {uri}: it was never written, was purged{ttl}."
        super().__init__(msg + (f" {hint}" if hint else ""))


class CorruptChunkError(StoreError):
    """A stored chunk cannot be decoded: damaged in storage or in transit.

    Attributes: ``uri``, ``chunk`` (its index).
    """

    def __init__(self, uri: str, chunk: int, detail: str):
        self.uri, self.chunk = uri, chunk
        super().__init__(
            f"Chunk {chunk} of {uri} is corrupt ({detail}). The stored copy cannot be trusted: "
            "re-execute the step that produced it."
        )


class ChecksumMismatchError(CorruptChunkError):
    """A stored chunk does not match the checksum its manifest recorded."""

    def __init__(self, uri: str, chunk: int, expected: int, actual: int):
        super().__init__(uri, chunk, f"crc32 {actual:08x}, manifest says {expected:08x}")


class ObjectTooLargeError(StoreError):
    """An object is larger than the store's configured maximum; nothing of it was written.

    Attributes: ``uri``, ``size`` (serialized bytes), ``limit`` (``max_object_bytes``).
    """

    def __init__(self, uri: str, size: int, limit: int):
        self.uri, self.size, self.limit = uri, size, limit
        super().__init__(
            f"Object for {uri} is {size:,} bytes serialized, over the configured maximum of "
            f"{limit:,} bytes. Raise max_object_bytes, or split the output (e.g. DynamicOutput)."
        )


class SerializationError(StoreError):
    """A value cannot be serialized, or stored bytes cannot be deserialized."""


class DisallowedGlobalError(SerializationError):
    """A stored pickle names a class or function its reader does not allow to be imported (the
    reader's ``allowed_global``); nothing of the value was built from it.

    Attributes: ``module``, ``name`` (``classname``: both, dotted).
    """

    def __init__(self, module: str, name: str):
        self.module, self.name, self.classname = module, name, f"{module}.{name}"
        super().__init__(f"The stored pickle imports {self.classname}, which this reader does not allow")


class CorruptManifestError(StoreError):
    """An object's manifest record cannot be read: damaged, or written by another layout.

    Attributes: ``uri``.
    """

    def __init__(self, uri: str, detail: str):
        self.uri = uri
        super().__init__(
            f"The manifest of {uri} is unreadable: {detail}. The stored copy cannot be trusted: "
            "re-execute the step that produced it."
        )


class SchemaLayoutError(StoreConfigError):
    """A table exists with a layout this version does not use (made by an earlier version)."""


class TamperedObjectError(StoreError):
    """With a signing key set: an object's signature or a chunk's MAC does not verify, or the
    object is unsigned. Raised before anything of it is unpickled.

    Attributes: ``uri``, ``key_id`` (the id of the key this store verifies with).
    """

    def __init__(self, uri: str, key_id: str, detail: str):
        self.uri, self.key_id = uri, key_id
        super().__init__(
            f"Refusing to load {uri}: {detail}; this store verifies with signing key id {key_id}. It was "
            "changed after it was written, or written without this key: re-execute the step that produced "
            "it with the same signing_key, and check who else can write to the store."
        )
