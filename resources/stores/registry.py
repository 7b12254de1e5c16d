"""Our stores by name, from the one backend table (:mod:`.backends`: our stores and the stock
peers measured beside them). The Dagster IO managers, the Airflow XCom backend, the benchmarks,
the tuner and the tests open stores here; the Dagster binding of every name is
:func:`asgard.pipelines.backends.io_manager_for`.

Usage::

    from asgard.resources.stores.registry import REGISTRY, open_store

    store = open_store("redis")                  # our store on the local Redis
    REGISTRY["s3_stock"].stock_peer_of            # "s3": measured against our S3 store
"""
from __future__ import annotations

from .backends import (  # noqa: F401 -- the table's names, re-exported where callers find them
    ALL_BACKENDS, BACKENDS, LINKED_SERVERS, REGISTRY, STOCK_PEERS, Backend, backend, server_of,
)
from .base import ObjectStore
from .errors import StoreConfigError


def open_store(backend_name: str, **kwargs) -> ObjectStore:
    """Our store ``backend_name`` on the local server the project runs (override with kwargs)."""
    entry = backend(backend_name)
    if not entry.store:
        raise StoreConfigError(f"{backend_name!r} is {entry.description}, not one of our stores "
                               f"({', '.join(BACKENDS)}): open it through its own library")
    if backend_name == "cassandra":
        from .cql import CassandraObjectStore

        return CassandraObjectStore(**kwargs)
    if backend_name == "redis":
        from .redis import RedisObjectStore

        return RedisObjectStore(**kwargs)
    if backend_name == "s3":
        from .s3 import S3ObjectStore

        return S3ObjectStore(**kwargs)
    from ..paths import asgard_home
    from .local import LocalObjectStore

    kwargs.setdefault("root", asgard_home() / "objects")
    return LocalObjectStore(**kwargs)
