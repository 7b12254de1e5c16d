"""One backend table (asgard.resources.stores.registry): every name the stores, the Dagster IO
managers, the Airflow XCom backend, the network profiles and the benchmarks use comes from it."""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from asgard.resources.stores import ObjectKey, StoreConfigError
from asgard.resources.stores.registry import ALL_BACKENDS, BACKENDS, REGISTRY, STOCK_PEERS, open_store


def test_the_table_names_our_stores_and_the_stock_peers_beside_them():
    assert BACKENDS == ("cassandra", "redis", "s3", "local")
    assert STOCK_PEERS == ("s3_stock", "fs_stock")
    assert set(ALL_BACKENDS) == set(BACKENDS) | set(STOCK_PEERS)
    # a stock peer is measured against one of our stores, and reaches the same kind of server
    for name in STOCK_PEERS:
        peer = REGISTRY[name]
        assert peer.stock_peer_of in BACKENDS and peer.server == REGISTRY[peer.stock_peer_of].server


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_of_our_stores_opens_by_its_name_and_round_trips(backend, all_servers):
    store = open_store(backend)
    key = ObjectKey(f"run/registry-{uuid.uuid4().hex[:8]}", "out")
    value = np.arange(10_000, dtype=np.int64)
    try:
        store.put(key, value)
        assert np.array_equal(store.get(key)[0], value)
    finally:
        store.purge_scope(key.scope)


def test_a_stock_peer_or_an_unknown_name_gets_a_typed_error_that_lists_the_names():
    with pytest.raises(StoreConfigError, match="not one of our stores .cassandra, redis, s3, local."):
        open_store("s3_stock")
    with pytest.raises(StoreConfigError, match="Unknown backend 'cassandre'; known: cassandra, redis, s3, s3_stock"):
        open_store("cassandre")


def test_every_name_has_its_dagster_io_manager_and_its_xcom_and_bench_sets_come_from_the_table():
    import dagster as dg

    from asgard.pipelines.backends import BACKENDS as PIPELINE_BACKENDS, io_manager_for
    from asgard_bench.apps_airflow import AIRFLOW_BACKENDS
    from asgard_bench.apps_config import BENCH_BACKENDS, STOCK_BACKENDS

    assert PIPELINE_BACKENDS == ALL_BACKENDS
    for name in ALL_BACKENDS:
        assert isinstance(io_manager_for(name), (dg.IOManagerDefinition, dg.ConfigurableIOManagerFactory,
                                                 dg.ConfigurableIOManager)), name
    with pytest.raises(StoreConfigError, match="Unknown backend 'redis2'"):
        io_manager_for("redis2")
    assert AIRFLOW_BACKENDS == BACKENDS and STOCK_BACKENDS == set(STOCK_PEERS)
    assert [b for b in BENCH_BACKENDS if b != "cassandra_tuned"] == list(ALL_BACKENDS)


def test_a_network_profile_puts_a_stock_peer_behind_its_stores_link():
    from asgard.resources.network import Deployment
    from asgard.resources.network.profile import load_profile

    cloud = load_profile("cloud")
    assert cloud.link("s3_stock") == cloud.link("s3") is not None and cloud.slot("s3_stock") == cloud.slot("s3")
    assert cloud.link("local") is None and cloud.link("fs_stock") is None
    deployment = Deployment("cloud")
    assert deployment.store_kwargs("s3_stock") == deployment.store_kwargs("s3")
    assert deployment.server("fs_stock") is None and deployment.host("local") == "127.0.0.1"
