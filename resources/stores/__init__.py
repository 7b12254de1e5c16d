"""One object-store interface (:class:`ObjectStore`) and its backends.

Backends are imported lazily by :func:`open_store` so a Redis user need not have the
Cassandra driver loaded, and so on.
"""
from .base import GetResult, ObjectStore, PutResult
from .manifest import Manifest, ObjectKey
from .errors import (
    ChecksumMismatchError,
    CorruptChunkError,
    CorruptManifestError,
    ObjectMissingError,
    ObjectTooLargeError,
    SchemaLayoutError,
    SerializationError,
    StoreConfigError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
    TamperedObjectError,
)

__all__ = [
    "ObjectKey", "ObjectStore", "Manifest", "PutResult", "GetResult", "StoreError", "StoreConfigError",
    "StoreUnavailableError", "ObjectMissingError", "ChecksumMismatchError", "ObjectTooLargeError",
    "SerializationError", "CorruptManifestError", "SchemaLayoutError", "CorruptChunkError", "TamperedObjectError",
    "StoreFullError",
]
