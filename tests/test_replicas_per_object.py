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
    assert handled["intermediate"]["replicas"] == 1 and "replicas" not in handled["kept"], handled
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
    assert "OutputSettingError" in text and "'asgard/replicas'" in text and "[1, 'store']" in text, text
