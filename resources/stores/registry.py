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
import os
import threading

from .base import ObjectStore
from .errors import StoreConfigError

#: the open stores of this process, by backend and settings: the one cache both adapters use
_shared: dict[tuple, ObjectStore] = {}
_shared_lock = threading.Lock()


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


def shared_store(backend_name: str, **kwargs) -> ObjectStore:
    """This process's one store of ``backend_name`` with these settings, opened on first use (a
    store holds the driver's connections: every output of a step, every XCom of a task, shares it)."""
    key = (os.getpid(), backend_name, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
    with _shared_lock:
        store = _shared.get(key)
        if store is None:
            store = _shared[key] = open_store(backend_name, **kwargs)
        return store


def forget_shared_stores() -> None:
    """Drop the cached stores (tests that change a server's credentials or certificates under them)."""
    with _shared_lock:
        _shared.clear()
