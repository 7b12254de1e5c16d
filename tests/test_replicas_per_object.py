"""An object kept at one replica under a store of a higher factor (``put(..., replicas=1)``),
against the real node: its chunks go to the store's single-replica sibling keyspace, its head and
index rows stay at the store's factor, it reads back whole, and the scope's purge removes it from
both keyspaces. A count the store cannot give is a typed error before anything is written."""
from __future__ import annotations

import uuid

import numpy as np
import pytest

from asgard.resources.stores import ObjectKey, StoreConfigError
from asgard.resources.stores.cql import CassandraObjectStore
from asgard.resources.stores.local import LocalObjectStore

from .test_airflow_xcom import airflow_home  # noqa: F401 -- the session's Airflow home, a fixture

#: a keyspace at factor 2 on the single local node: written at ONE, so a second replica is not needed
KEYSPACE = "asgard_test_rf2"


@pytest.fixture
def store(cassandra_node):
    return CassandraObjectStore(keyspace=KEYSPACE, replication_factor=2, consistency="ONE")


def _chunk_rows(store, keyspace: str, scope: str, path: str, version: str) -> int:
    rows = store.session.execute(f"SELECT chunk FROM {keyspace}.{store.table} WHERE scope = %s AND path = %s "
                                 "AND version = %s AND grp = 0", (scope, path, version))
    return len(list(rows))


def test_an_object_at_one_replica_lives_in_the_sibling_keyspace_and_the_purge_finds_it(store):
    scope = f"run/{uuid.uuid4()}"
    values = np.random.default_rng(11).random(1_500_000)  # 11.4 MiB: 12 chunks of 1 MiB
    one = store.put(ObjectKey(scope, "one/result"), values, replicas=1)
    both = store.put(ObjectKey(scope, "both/result"), values, replicas=2)  # the store's own factor
    default = store.put(ObjectKey(scope, "default/result"), values)
    sibling = f"{KEYSPACE}_r1"
    assert one.manifest.version.endswith("-r1") and not both.manifest.version.endswith("-r1")
    assert not default.manifest.version.endswith("-r1")
    # the chunks of the one-replica object are in the sibling keyspace, at factor 1, and only there
    assert _chunk_rows(store, sibling, scope, "one/result", one.manifest.version) == 1
    assert _chunk_rows(store, KEYSPACE, scope, "one/result", one.manifest.version) == 0
    factor = store.session.execute("SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s",
                                   (sibling,)).one().replication["replication_factor"]
    assert factor == "1"
    # the head and the index stay in the store's keyspace: listing sees all three
    assert store.list_paths(scope) == ["both/result", "default/result", "one/result"]
    for key in (one.key, both.key, default.key):
        value, _ = store.get(key)
        assert np.array_equal(value, values)
    # a small object is its head row: kept at the store's factor whatever was asked
    small = store.put(ObjectKey(scope, "small/result"), 42, replicas=1)
    assert not small.manifest.version.endswith("-r1") and store.get(small.key)[0] == 42
    store.purge_scope(scope)
    assert store.list_paths(scope) == []
    assert _chunk_rows(store, sibling, scope, "one/result", one.manifest.version) == 0
    assert _chunk_rows(store, KEYSPACE, scope, "both/result", both.manifest.version) == 0


def test_a_count_the_store_cannot_give_is_refused_before_anything_is_written(store, tmp_path):
    scope = f"run/{uuid.uuid4()}"
    with pytest.raises(StoreConfigError, match="replicas=3"):
        store.put(ObjectKey(scope, "three/result"), np.zeros(1_000_000), replicas=3)
    assert store.list_paths(scope) == []
    local = LocalObjectStore(root=str(tmp_path))
    with pytest.raises(StoreConfigError, match="leave replicas unset"):
        local.put(ObjectKey(scope, "local/result"), 42, replicas=1)
    long_name = CassandraObjectStore(keyspace="k" * 46, replication_factor=2, consistency="ONE")
    with pytest.raises(StoreConfigError, match="45 characters or fewer"):
        long_name.put(ObjectKey(scope, "long/result"), np.zeros(1_000_000), replicas=1)


def test_an_output_asks_for_one_replica_in_its_metadata_and_its_reader_gets_it(cassandra_node, dagster_instance):
    """A real run on the multiprocess executor: ``Out(metadata={"asgard/replicas": 1})`` keeps the
    output's chunks in the sibling keyspace, says so in its metadata, and the step that reads it gets
    the value; ``"store"`` keeps the store's factor."""
    from dagster import execute_job, reconstructable

    from .replicas_jobs import ROWS, one_replica_job

    with execute_job(reconstructable(one_replica_job), instance=dagster_instance) as result:
        assert result.success
        want = np.random.default_rng(12).random(ROWS).sum() + np.random.default_rng(13).random(ROWS).sum()
        assert result.output_for_node("total") == pytest.approx(want)
        handled = {e.step_key: {k: getattr(v, "value", v) for k, v in e.event_specific_data.metadata.items()}
                   for e in result.all_events if e.event_type_value == "HANDLED_OUTPUT"}
        run_id = result.run_id
    assert handled["intermediate"]["replicas"] == 1 and handled["kept"]["replicas"] == "store", handled
    assert "chosen by the caller" in handled["kept"]["replicas_reason"]
    store = CassandraObjectStore(keyspace=KEYSPACE, replication_factor=2, consistency="ONE")
    versions = {r.path: r.version for r in store._index(f"run/{run_id}")}
    assert versions["intermediate/result"].endswith("-r1") and not versions["kept/result"].endswith("-r1"), versions
    store.purge_scope(f"run/{run_id}")


def test_a_replica_count_an_output_cannot_take_fails_its_step_with_a_typed_error(cassandra_node):
    from dagster import DagsterInstance

    from .replicas_jobs import three_replicas_job

    with DagsterInstance.ephemeral() as instance:
        result = three_replicas_job.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    text = failure.step_failure_data.error.to_string()
    assert "OutputSettingError" in text and "'asgard/replicas'" in text and "[1, 'store', 'auto']" in text, text


def test_a_store_set_to_auto_keeps_one_copy_of_what_one_step_reads_and_says_why(cassandra_node, tmp_path):
    scope = f"run/{uuid.uuid4()}"
    store = CassandraObjectStore(keyspace=KEYSPACE, replication_factor=2, consistency="ONE", replicas="auto")
    values = np.random.default_rng(16).random(1_500_000)
    one = store.put(ObjectKey(scope, "one/result"), values, readers=1)
    many = store.put(ObjectKey(scope, "many/result"), values, readers=3)
    small = store.put(ObjectKey(scope, "small/result"), 7, readers=1)
    assert one.replicas == 1 and one.manifest.version.endswith("-r1") and "one step reads it" in one.replicas_reason
    assert many.replicas is None and not many.manifest.version.endswith("-r1") and "3 reads" in many.replicas_reason
    assert small.replicas is None and "stored inline" in small.replicas_reason
    assert np.array_equal(store.get(one.key)[0], values) and store.get(small.key)[0] == 7
    # the caller's count wins over the setting
    kept = store.put(ObjectKey(scope, "kept/result"), values, readers=1, replicas=2)
    assert kept.replicas is None and not kept.manifest.version.endswith("-r1")
    store.purge_scope(scope)
    assert store.list_paths(scope) == []
    # a store that keeps its own copies: 'auto' leaves them alone, '1' and other words are refused
    from asgard.resources.stores.local import LocalObjectStore

    assert LocalObjectStore(root=str(tmp_path / "auto"), replicas="auto").replicas == "auto"
    with pytest.raises(StoreConfigError, match="keeps its own copies"):
        LocalObjectStore(root=str(tmp_path / "one"), replicas="1")
    with pytest.raises(StoreConfigError, match="not one of store, 1, auto"):
        CassandraObjectStore(keyspace=KEYSPACE, replicas="two")


def test_the_io_manager_on_auto_keeps_one_copy_of_a_one_to_one_edge_and_the_store_s_of_a_broadcast(
        cassandra_node, dagster_instance):
    """A real run on the multiprocess executor with ``CassandraIOManager(replicas="auto")``: the
    output one step reads keeps one copy, the one two steps read the store's factor, and each
    output's metadata says how many and why."""
    from dagster import execute_job, reconstructable

    from .replicas_jobs import ROWS, auto_replicas_job

    with execute_job(reconstructable(auto_replicas_job), instance=dagster_instance) as result:
        assert result.success
        a, b = np.random.default_rng(14).random(ROWS), np.random.default_rng(15).random(ROWS)
        assert result.output_for_node("combined") == pytest.approx(a.sum() + b.sum() + b.max())
        handled = {e.step_key: {k: getattr(v, "value", v) for k, v in e.event_specific_data.metadata.items()}
                   for e in result.all_events if e.event_type_value == "HANDLED_OUTPUT"}
        run_id = result.run_id
    assert handled["single"]["replicas"] == 1 and "one step reads it" in handled["single"]["replicas_reason"]
    assert handled["shared"]["replicas"] == "store" and "2 reads" in handled["shared"]["replicas_reason"], handled
    assert "stored inline" in handled["total_of"]["replicas_reason"]  # a float: its head row is all of it
    store = CassandraObjectStore(keyspace=KEYSPACE, replication_factor=2, consistency="ONE")
    versions = {r.path: r.version for r in store._index(f"run/{run_id}")}
    assert versions["single/result"].endswith("-r1") and not versions["shared/result"].endswith("-r1"), versions
    store.purge_scope(f"run/{run_id}")


def test_an_asset_keeps_the_store_s_factor_under_auto(cassandra_node):
    import dagster as dg

    from .replicas_jobs import ROWS, _auto_io_manager

    @dg.asset
    def table() -> np.ndarray:
        return np.random.default_rng(17).random(ROWS)

    @dg.asset
    def table_total(table: np.ndarray) -> float:
        return float(table.sum())

    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize([table, table_total], resources={"io_manager": _auto_io_manager()},
                                instance=instance)
    assert result.success
    [meta] = [{k: getattr(v, "value", v) for k, v in e.event_specific_data.metadata.items()}
              for e in result.all_events if e.event_type_value == "HANDLED_OUTPUT" and e.step_key == "table"]
    assert meta["replicas"] == "store" and "an asset is read by later runs" in meta["replicas_reason"], meta
    store = CassandraObjectStore(keyspace=KEYSPACE, replication_factor=2, consistency="ONE")
    assert not any(r.version.endswith("-r1") for r in store._index("asset/table"))
    store.purge_scope("asset/table")
    store.purge_scope("asset/table_total")


def test_airflow_on_auto_keeps_one_copy_of_a_value_one_task_reads(airflow_home):
    """``[asgard] replicas = auto`` through ``airflow dags test``: the 8 MiB value one task reads is
    kept at one copy under a factor-2 keyspace, its reference says so and why, the task reads it."""
    import json

    from .test_airflow_xcom import dags_test, xcom_rows

    env = {"AIRFLOW__ASGARD__KEYSPACE": KEYSPACE, "AIRFLOW__ASGARD__REPLICATION_FACTOR": "2",
           "AIRFLOW__ASGARD__CONSISTENCY": "ONE", "AIRFLOW__ASGARD__REPLICAS": "auto"}
    rc, out, run_id = dags_test(airflow_home, "asgard_big_small", extra_env=env)
    assert rc == 0 and "ASGARD-CHECK big ok" in out, out[-5000:]
    ref = json.loads(xcom_rows(airflow_home, "asgard_big_small", run_id)[("produce_big", -1, "return_value")])
    assert ref["replicas"] == "1" and "one step reads it" in ref["replicas_reason"], ref
    assert ref["version"].endswith("-r1"), ref
    store = CassandraObjectStore(keyspace=KEYSPACE, replication_factor=2, consistency="ONE")
    store.purge_scope(ref["scope"])
    assert store.list_paths(ref["scope"]) == []
