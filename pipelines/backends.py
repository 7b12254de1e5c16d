"""Backend name -> the IO manager bound to ``io_manager``: the Dagster binding of every name in the
one backend table (:data:`asgard.resources.stores.registry.REGISTRY`), so the jobs, the benchmarks
and the tests run the same pipeline on every store.

* ``cassandra``: :class:`~asgard_dagster.CassandraIOManager` on the local node
* ``redis``: :class:`~asgard_dagster.RedisIOManager` on the local Redis
* ``s3``: :class:`~asgard_dagster.S3IOManager` on the local MinIO
* ``s3_stock``: dagster-aws's own ``S3PickleIOManager`` on the same MinIO (the stock peer)
* ``local``: :class:`~asgard_dagster.LocalIOManager` (our store mechanism on files)
* ``fs_stock``: Dagster's own ``FilesystemIOManager``
"""
from __future__ import annotations

import dagster as dg

from asgard.resources.paths import run_dir
from asgard.resources.stores.registry import ALL_BACKENDS, backend as registry_entry

BACKENDS = ALL_BACKENDS


def io_manager_for(backend: str, network: str = "loopback"):
    """The IO manager of ``backend``; under a ``network`` profile (:mod:`asgard.resources.network`) it
    reaches the profile's server, through the profile's link."""
    from asgard_dagster import (
        CassandraIOManager, CassandraResource, LocalIOManager, RedisIOManager, RedisResource, S3IOManager,
        S3StoreResource, stock_s3_pickle_io_manager,
    )

    registry_entry(backend)  # an unknown name: the registry's typed error, naming the known ones
    from asgard.pipelines.hosts import HOSTS_NETWORK, hosts_io_manager

    if network == HOSTS_NETWORK:
        return hosts_io_manager(backend)
    endpoint: dict = {}
    if network != "loopback":
        from asgard.resources.network import Deployment

        endpoint = Deployment(network).store_kwargs(backend)
    factories = {
        # the endpoint is connection settings: it goes in the nested resource
        "cassandra": lambda: CassandraIOManager(cassandra=CassandraResource(**endpoint)),
        "redis": lambda: RedisIOManager(redis=RedisResource(**endpoint)),
        "s3": lambda: S3IOManager(s3=S3StoreResource(**endpoint)),
        "s3_stock": lambda: stock_s3_pickle_io_manager(**endpoint),
        "local": lambda: LocalIOManager(base_dir=str(run_dir("local_store"))),
        "fs_stock": lambda: dg.FilesystemIOManager(base_dir=str(run_dir("fs_stock"))),
    }
    return factories[backend]()
