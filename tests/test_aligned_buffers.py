"""A stored value's buffers come back aligned: Arrow tables read by a downstream asset start each
buffer at a multiple of 64 bytes, from the ring (chunks received in place, or lz4's), from a
manifest's inline chunk and from a producer-local copy, so Acero's join warns of none ("An input
buffer was poorly aligned", once per batch, 48,840 lines in one cloud day of the ETL before). An
object of the earlier layout (manifest serializer "pickle5") still reads back whole."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from asgard.resources.stores import ObjectKey
from asgard_dagster import CassandraIOManager, CassandraResource
from tests.conftest import TEST_KEYSPACE

ROWS = 400_000  # 3 numeric columns: about 9.6 MB, several chunks


def _misaligned(table) -> list[str]:
    return [f"{name}[{i}] buffer {j} at {b.address} (mod 64: {b.address % 64})"
            for name, column in zip(table.column_names, table.columns) for i, chunk in enumerate(column.chunks)
            for j, b in enumerate(chunk.buffers()) if b is not None and b.size and b.address % 64]


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_an_arrow_table_reaches_the_next_asset_aligned_and_its_join_warns_of_nothing(cassandra_node, codec, capfd):
    from dagster import asset, materialize

    @asset
    def orders() -> pa.Table:
        rng = np.random.default_rng(3)
        return pa.table({"customer_id": rng.integers(0, 1000, ROWS), "amount": rng.random(ROWS),
                         "day": rng.integers(0, 365, ROWS).astype(np.int32)})

    @asset
    def customers() -> pa.Table:  # a few KiB: stored inline in its manifest
        return pa.table({"customer_id": np.arange(1000), "region": [f"r{i % 7}" for i in range(1000)]})

    @asset
    def joined(orders: pa.Table, customers: pa.Table) -> int:
        misaligned = _misaligned(orders) + _misaligned(customers)
        assert not misaligned, misaligned
        return orders.join(customers, keys="customer_id", join_type="inner").num_rows

    io_manager = CassandraIOManager(cassandra=CassandraResource(keyspace=TEST_KEYSPACE), codec=codec)
    capfd.readouterr()
    result = materialize([orders, customers, joined], resources={"io_manager": io_manager})
    err = capfd.readouterr().err
    assert result.success and result.output_for_node("joined") == ROWS
    assert "poorly aligned" not in err, err[-2000:]
    store = io_manager.store()
    big, small = (store.read_manifest(ObjectKey.for_asset([name])) for name in ("orders", "customers"))
    assert big.serializer == small.serializer == "pickle5-a64"
    assert big.chunks > 1 and big.codec == codec and small.inline


def test_a_producer_local_copy_reads_back_aligned(cassandra_store, run_id):
    """The copy's path (a file read into the output buffer) as the ring's: every buffer aligned."""
    from asgard.resources.stores.local_copy import PlacementChoice

    table = pa.table({"x": np.arange(ROWS, dtype=np.int64), "y": np.arange(ROWS, dtype=np.float32)})
    key = ObjectKey.for_run(run_id, "copy", "result")
    cassandra_store.put(key, table, placement=PlacementChoice("producer-local", "this test"))
    got, result = cassandra_store.get(key)
    assert result.source == "local copy" and got.equals(table)
    assert not _misaligned(got), _misaligned(got)
    cassandra_store.purge_scope(key.scope)


def test_an_object_of_the_earlier_layout_reads_back_whole(cassandra_store, run_id):
    """Written as this store wrote pickle5 before (every buffer right after the last), read as
    such by a reader of today, which writes the aligned layout."""
    from asgard.resources.stores.results import Serialized
    from asgard.resources.stores.serde import PickleSerializer

    value = {"a": np.arange(300_001, dtype=np.float64), "b": np.arange(7, dtype=np.int8), "c": "x" * 333}
    key = ObjectKey.for_run(run_id, "legacy", "result")
    cassandra_store.put_serialized(key, Serialized(PickleSerializer().dumps(value), "pickle5", "builtins.dict"))
    got, result = cassandra_store.get(key)
    assert result.manifest.serializer == "pickle5"
    assert got.keys() == value.keys() and got["c"] == value["c"]
    assert all(np.array_equal(got[k], value[k]) for k in ("a", "b"))
    cassandra_store.put(key, value)  # rewritten today: the aligned layout
    got, result = cassandra_store.get(key)
    assert result.manifest.serializer == "pickle5-a64" and np.array_equal(got["a"], value["a"])
    assert got["a"].ctypes.data % 64 == 0 and got["b"].ctypes.data % 64 == 0
    cassandra_store.purge_scope(key.scope)
