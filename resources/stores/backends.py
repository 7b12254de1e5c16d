"""The one backend table: every backend name the project uses, our stores and the stock peers
measured beside them (:mod:`.registry` opens our stores by these names). A leaf module: the
network profiles read it too, and our stores read the profiles.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import StoreConfigError


@dataclass(frozen=True)
class Backend:
    """One backend: ``store`` when it is one of ours (an :class:`ObjectStore`), ``server`` the
    kind of server it reaches (what a network profile puts behind a link; ``None`` for files),
    ``stock_peer_of`` our store a stock implementation is measured against."""

    name: str
    description: str
    store: bool
    server: str | None
    stock_peer_of: str | None = None


REGISTRY: dict[str, Backend] = {b.name: b for b in (
    Backend("cassandra", "our store on Apache Cassandra (the plugin's own)", True, "cassandra"),
    Backend("redis", "our store on Redis", True, "redis"),
    Backend("s3", "our store on S3 (MinIO here)", True, "s3"),
    Backend("s3_stock", "the stock S3 peer on the same MinIO: dagster-aws's S3PickleIOManager, Airflow's "
                        "object-storage XCom backend", False, "s3", stock_peer_of="s3"),
    Backend("local", "our store on local files", True, None),
    Backend("fs_stock", "the stock files peer: Dagster's FilesystemIOManager", False, None, stock_peer_of="local"),
)}

#: our stores, in the table's order
BACKENDS = tuple(name for name, b in REGISTRY.items() if b.store)
#: the stock peers, each measured beside the store of ours it names
STOCK_PEERS = tuple(name for name, b in REGISTRY.items() if b.stock_peer_of)
#: every name: our stores and the stock peers
ALL_BACKENDS = tuple(REGISTRY)
#: the servers a network profile can put behind a link, in the table's order
LINKED_SERVERS = tuple(dict.fromkeys(b.server for b in REGISTRY.values() if b.server))


def backend(name: str) -> Backend:
    """The registry's entry for ``name``; :class:`StoreConfigError` naming the known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise StoreConfigError(f"Unknown backend {name!r}; known: {', '.join(ALL_BACKENDS)}") from None


def server_of(name: str) -> str | None:
    """The kind of server backend ``name`` reaches (``None``: files), of :data:`LINKED_SERVERS`."""
    return backend(name).server
