"""Backend name -> store, in one place (benchmarks, the tuner and tests open stores by name)."""
from __future__ import annotations

from .base import ObjectStore
from .errors import StoreConfigError

BACKENDS = ("cassandra", "redis", "s3", "local")


def open_store(backend: str, **kwargs) -> ObjectStore:
    """A store for ``backend`` on the local server the project runs (override with kwargs)."""
    if backend == "cassandra":
        from .cql import CassandraObjectStore

        return CassandraObjectStore(**kwargs)
    if backend == "redis":
        from .redis import RedisObjectStore

        return RedisObjectStore(**kwargs)
    if backend == "s3":
        from .s3 import S3ObjectStore

        return S3ObjectStore(**kwargs)
    if backend == "local":
        from ..paths import asgard_home
        from .local import LocalObjectStore

        kwargs.setdefault("root", asgard_home() / "objects")
        return LocalObjectStore(**kwargs)
    raise StoreConfigError(f"Unknown backend {backend!r}; known: {BACKENDS}")
