"""CassandraIOManager and CassandraObjectStore against the real local Cassandra."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest
from dagster import (
    AssetKey, DagsterInstance, ReexecutionOptions, build_input_context, build_output_context, execute_job,
    reconstructable,
)

from asgard_dagster import CassandraIOManager
from resources.stores import ChecksumMismatchError, ObjectKey, ObjectMissingError, ObjectTooLargeError
from tests.conftest import TEST_KEYSPACE

MiB = 1024 * 1024


@pytest.fixture
def io_manager(cassandra_node):
    return CassandraIOManager(keyspace=TEST_KEYSPACE)


def rows_of_scope(store, scope):
    cql = f"SELECT path, version, chunk FROM {store.qualified_table} WHERE scope = %s"
    return [(r.path, r.version, r.chunk) for r in store.session.execute(cql, (scope,))]


def round_trip(io_manager, run_id, value, step="producer", name="result", mapping_key=None):
    out_ctx = build_output_context(step_key=step, name=name, run_id=run_id, mapping_key=mapping_key)
    io_manager.handle_output(out_ctx, value)
    in_ctx = build_input_context(upstream_output=out_ctx)
    return io_manager.load_input(in_ctx), out_ctx


@pytest.mark.parametrize("value", [
    b"\x00raw bytes\xff" * 1000,
    None,
    {"nested": [1, 2.5, ("t", {"set"})], "deep": {"a": {"b": [None, True]}}},
])
def test_round_trip_small_values(io_manager, run_id, value):
    back, _ = round_trip(io_manager, run_id, value)
    assert back == value


def test_round_trip_200_mib_numpy_array(io_manager, run_id):
    arr = np.random.default_rng(1).random(200 * MiB // 8)
    back, out_ctx = round_trip(io_manager, run_id, arr)
    assert back.dtype == arr.dtype and np.array_equal(back, arr)
    meta = out_ctx.get_logged_metadata()
    assert meta["bytes"].value >= arr.nbytes
    assert meta["chunks"].value == -(-meta["bytes"].value // io_manager.store().chunk_size)
    assert meta["dagster/uri"].value == (
        f"cassandra://127.0.0.1:9042/{TEST_KEYSPACE}.objects/run/{run_id}/producer/result")
    assert meta["write_seconds"].value > 0 and meta["write_mb_s"].value > 0


def test_round_trip_dataframe(io_manager, run_id):
    df = pd.DataFrame({"a": np.arange(100_000), "b": np.random.default_rng(2).random(100_000),
                       "c": pd.Categorical(["x", "y"] * 50_000)})
    back, _ = round_trip(io_manager, run_id, df)
    pd.testing.assert_frame_equal(back, df)


def test_exact_key_layout_for_op_outputs_and_mapping_keys(io_manager, run_id):
    store = io_manager.store()
    value = np.arange(3 * store.chunk_size // 8 + 5, dtype=np.float64)  # just over 3 chunks
    round_trip(io_manager, run_id, value, step="split", name="chunks", mapping_key="part_7")
    round_trip(io_manager, run_id, "small", step="report", name="result")
    manifest = store.read_manifest(ObjectKey(f"run/{run_id}", "split/chunks/part_7"))
    assert manifest.chunks == 4
    expected = sorted(
        [("report/result", "", 0), ("split/chunks/part_7", "", 0)]
        + [("split/chunks/part_7", manifest.version, i) for i in range(4)]
        + [("report/result", store.read_manifest(ObjectKey(f"run/{run_id}", "report/result")).version, 0)]
    )
    assert sorted(rows_of_scope(store, f"run/{run_id}")) == expected
    assert store.list_paths(f"run/{run_id}") == ["report/result", "split/chunks/part_7"]


def test_exact_key_layout_for_assets_and_partitions(io_manager):
    store = io_manager.store()
    for partition in ("2026-11-01", "2026-11-02"):
        ctx = build_output_context(asset_key=AssetKey(["warehouse", "daily_counts"]), partition_key=partition)
        io_manager.handle_output(ctx, {"day": partition})
    ctx = build_output_context(asset_key=AssetKey("plain"))
    io_manager.handle_output(ctx, [1, 2, 3])
    assert store.list_paths("asset/warehouse/daily_counts") == ["2026-11-01", "2026-11-02"]
    assert store.list_paths("asset/plain") == ["__unpartitioned__"]
    in_ctx = build_input_context(asset_key=AssetKey(["warehouse", "daily_counts"]), partition_key="2026-11-02")
    assert io_manager.load_input(in_ctx) == {"day": "2026-11-02"}
    assert io_manager.load_input(build_input_context(asset_key=AssetKey("plain"))) == [1, 2, 3]


def test_rewrite_replaces_atomically_and_drops_old_chunks(io_manager, run_id):
    store = io_manager.store()
    key = ObjectKey(f"run/{run_id}", "step/result")
    round_trip(io_manager, run_id, np.zeros(2 * MiB // 8), step="step")
    first = store.read_manifest(key)
    back, _ = round_trip(io_manager, run_id, np.ones(3 * MiB // 8), step="step")
    second = store.read_manifest(key)
    assert back.sum() == 3 * MiB // 8 and first.version != second.version
    versions = {v for _, v, _ in rows_of_scope(store, key.scope)}
    assert versions == {"", second.version}


def test_ttl_expiry_gives_the_expired_error(cassandra_node, run_id):
    io_manager = CassandraIOManager(keyspace=TEST_KEYSPACE, ttl_seconds=2)
    out_ctx = build_output_context(step_key="short_lived", name="result", run_id=run_id)
    io_manager.handle_output(out_ctx, list(range(1000)))
    assert io_manager.load_input(build_input_context(upstream_output=out_ctx)) == list(range(1000))
    time.sleep(3.5)
    with pytest.raises(ObjectMissingError, match=r"expired after its TTL of 2s.*Re-execute the step that produces it "
                                                 r"\(step 'short_lived' output 'result'"):
        io_manager.load_input(build_input_context(upstream_output=out_ctx))


def test_purge_run_removes_one_run_and_nothing_of_another(io_manager, run_id):
    other = run_id[::-1]
    for rid in (run_id, other):
        for step in ("a", "b"):
            round_trip(io_manager, rid, np.arange(io_manager.store().chunk_size // 4), step=step)  # 3 chunks + manifest
    store = io_manager.store()
    assert len(rows_of_scope(store, f"run/{run_id}")) == 8
    io_manager.purge_run(run_id)
    assert rows_of_scope(store, f"run/{run_id}") == []
    assert len(rows_of_scope(store, f"run/{other}")) == 8
    back, _ = round_trip(io_manager, other, "still here", step="c")
    assert back == "still here"


def test_chunk_corrupted_in_place_is_detected(io_manager, run_id):
    store = io_manager.store()
    round_trip(io_manager, run_id, np.arange(2 * MiB // 8), step="victim")
    key = ObjectKey(f"run/{run_id}", "victim/result")
    manifest = store.read_manifest(key)
    store.session.execute(
        f"UPDATE {store.qualified_table} SET data = %s WHERE scope = %s AND path = %s AND version = %s AND chunk = 1",
        (b"\x00" * manifest.chunk_sizes[1], key.scope, key.path, manifest.version),
    )
    with pytest.raises(ChecksumMismatchError, match="Chunk 1 of .*victim/result is corrupt"):
        store.get(key)


def test_object_over_maximum_is_refused_and_previous_kept(cassandra_node, run_id):
    io_manager = CassandraIOManager(keyspace=TEST_KEYSPACE, max_object_bytes=MiB)
    round_trip(io_manager, run_id, b"ok", step="capped")
    with pytest.raises(ObjectTooLargeError, match="over the configured maximum of 1,048,576 bytes"):
        io_manager.handle_output(build_output_context(step_key="capped", name="result", run_id=run_id), b"x" * (2 * MiB))
    assert io_manager.store().get(ObjectKey(f"run/{run_id}", "capped/result"))[0] == b"ok"


def test_fan_out_fan_in_job_on_multiprocess_executor(cassandra_node, dagster_instance):
    from pipelines.demo import fan_out_fan_in

    run_config = {
        "ops": {"make_chunks": {"config": {"chunks": 3, "chunk_mib": 1}}},
        "resources": {"io_manager": {"config": {"keyspace": TEST_KEYSPACE}}},
    }
    with execute_job(reconstructable(fan_out_fan_in), instance=dagster_instance, run_config=run_config) as result:
        assert result.success
        stats = result.output_for_node("summarize_chunks")
        step_keys = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}
        run_id = result.run_id
    assert stats["chunks"] == 3 and stats["values"] == 3 * MiB // 8
    assert stats["mean_abs_mean"] < 1e-9 and abs(stats["mean_std"] - 1) < 1e-9
    assert {f"normalize[chunk_{i}]" for i in range(3)} <= step_keys
    engine = [e for e in dagster_instance.all_logs(run_id) if e.dagster_event and
              e.dagster_event.event_type_value == "ENGINE_EVENT" and "multiprocess" in e.message.lower()]
    assert engine, "the job did not run on the multiprocess executor"
    paths = CassandraIOManager(keyspace=TEST_KEYSPACE).store().list_paths(f"run/{run_id}")
    assert paths == sorted([f"make_chunks/result/chunk_{i}" for i in range(3)]
                           + [f"normalize[chunk_{i}]/result" for i in range(3)] + ["summarize_chunks/result"])


def test_reexecute_from_failure_reads_parent_outputs(cassandra_node, dagster_instance, tmp_path, monkeypatch):
    from tests.jobs import flaky_job

    flag = tmp_path / "fail-once"
    flag.write_text("1")
    monkeypatch.setenv("ASGARD_TEST_FAIL_FLAG", str(flag))
    config = {"resources": {"io_manager": {"config": {"keyspace": TEST_KEYSPACE}}}}
    with execute_job(reconstructable(flaky_job), instance=dagster_instance, run_config=config) as first:
        assert not first.success
        parent = first.run_id
    flag.unlink()
    options = ReexecutionOptions.from_failure(parent, dagster_instance)
    with execute_job(reconstructable(flaky_job), instance=dagster_instance, run_config=config,
                     reexecution_options=options) as second:
        assert second.success
        assert second.output_for_node("consume") == 499500
        executed = {e.step_key for e in second.all_events if e.event_type_value == "STEP_SUCCESS"}
    assert executed == {"consume"}  # `produce` was not re-run: its output came from the parent run


def test_purge_sensor_purges_a_succeeded_run_and_its_parent(cassandra_node, dagster_instance):
    from dagster import build_run_status_sensor_context, job, op

    from asgard_dagster import make_purge_on_success_sensor

    io_manager = CassandraIOManager(keyspace=TEST_KEYSPACE)

    @op
    def emit() -> list:
        return [1, 2, 3]

    @op
    def take(xs: list) -> int:
        return sum(xs)

    @job(resource_defs={"io_manager": io_manager})
    def tiny():
        take(emit())

    keep = tiny.execute_in_process(instance=dagster_instance)
    result = tiny.execute_in_process(instance=dagster_instance)
    store = io_manager.store()
    assert store.list_paths(f"run/{result.run_id}") == ["emit/result", "take/result"]
    sensor = make_purge_on_success_sensor(io_manager)
    context = build_run_status_sensor_context(
        sensor_name=sensor.name, dagster_instance=dagster_instance, dagster_run=result.dagster_run,
        dagster_event=result.get_run_success_event(),
    )
    sensor(context)
    assert store.list_paths(f"run/{result.run_id}") == []
    assert store.list_paths(f"run/{keep.run_id}") == ["emit/result", "take/result"]
