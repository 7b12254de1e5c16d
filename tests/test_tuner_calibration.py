"""Miniature calibration on a real Cassandra: the tuner's own node on 127.0.0.5.

The session fixture starts the node in a fresh directory (so it never touches node 1, which
the other tests use, nor the calibration node's state) and stops it at the end.
"""
from __future__ import annotations

import json

import pytest

from tuner.calibrate import PlannedConfig, calibrate, read_rows
from tuner.knobs import Configuration, apply
from tuner.node import TunerNode
from tuner.workload import Workload, run_workload


@pytest.fixture(scope="session")
def tuner_node(tmp_path_factory):
    node = TunerNode(index=5, heap="1G", workdir=tmp_path_factory.mktemp("tuner-node5"))
    node.start()
    yield node
    node.stop()


@pytest.fixture(scope="session")
def tuner_store(tuner_node):
    from resources.stores.cassandra import CassandraObjectStore

    store = CassandraObjectStore(contact_points=[tuner_node.address], keyspace="asgard_tuner_test")
    store.ping()
    return store


def test_workload_generator_drives_the_real_store(tuner_store):
    for w in (Workload(read_ratio=0.5, object_kib=16), Workload.from_dag("broadcast", 4, 32),
              Workload.from_dag("fanin", 4, 16), Workload.from_dag("shuffle", 2, 16),
              Workload.from_dag("scatter", 4, 16)):
        m = run_workload(tuner_store, w, duration_s=0.4, warmup_s=0.1, max_ops=400)
        assert m.errors == 0 and m.ops > 0 and m.ops <= 400 + 64
        assert m.ops_per_s > 0 and m.mb_per_s > 0 and m.p99_ms >= m.p50_ms > 0
        if w.pattern == "broadcast":
            assert m.reads == pytest.approx(4 * m.writes, rel=0.3)
    # bounded by count as well as time
    m = run_workload(tuner_store, Workload(0.5, 16), duration_s=30, warmup_s=0, max_ops=40)
    assert m.ops <= 40 + 16 and m.seconds < 30


def test_miniature_calibration_restarts_and_appends(tuner_node, tuner_store, tmp_path):
    path = tmp_path / "cal.jsonl"
    restart_only = Configuration(file_cache_size_mib=128, memtable_heap_space_mib=128, compaction="LCS",
                                 concurrent_writes=16)
    configs = [PlannedConfig("default", Configuration()), PlannedConfig("random", restart_only)]
    workloads = [Workload(0.5, 16), Workload(0.9, 64)]
    summary = calibrate(path, tuner_node, tuner_store, workloads, configs, duration_s=0.5, warmup_s=0.1,
                        settle_s=0.2, progress=False)
    assert summary["rows_written"] == 4 and summary["restarts"] >= 1
    # the restart-only knobs really changed on the node
    s = tuner_node.settings(["file_cache_enabled", "file_cache_size", "memtable_heap_space", "concurrent_writes"])
    assert s == {"file_cache_enabled": "true", "file_cache_size": "128MiB", "memtable_heap_space": "128MiB",
                 "concurrent_writes": "16"}
    rows = read_rows(path)
    assert len(rows) == 4 and {r["tag"] for r in rows} == {"default", "random"}
    assert all(r["ops_per_s"] > 0 and r["workload"]["name"] for r in rows)
    assert any(r["applied"]["restarted"] and r["applied"]["restart_seconds"] > 1 for r in rows)
    # resumable: a rerun finds everything done and appends nothing
    again = calibrate(path, tuner_node, tuner_store, workloads, configs, duration_s=0.5, progress=False)
    assert again["rows_written"] == 0 and len(read_rows(path)) == 4
    # an interrupted line is ignored, and the missing pair is measured
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:3]) + "\n" + lines[3][:40] + "\n")
    third = calibrate(path, tuner_node, tuner_store, workloads, configs, duration_s=0.5, progress=False)
    assert third["rows_written"] == 1 and len(read_rows(path)) == 4


def test_apply_live_only_does_not_restart(tuner_node, tuner_store):
    prev = Configuration(file_cache_size_mib=128, memtable_heap_space_mib=128, compaction="LCS", concurrent_writes=16)
    apply(tuner_node, tuner_store, prev, None)
    pid = tuner_node.pid()
    new = prev.replace(concurrent_writes=48, compaction="UCS", ucs_scaling_parameters="L4", memtable="trie")
    res = apply(tuner_node, tuner_store, new, prev)
    assert not res.restarted and tuner_node.pid() == pid
    assert res.live == ["setconcurrency MutationStage 48"] and "UnifiedCompactionStrategy" in res.table[0]
    assert "memtable = 'trie'" in res.table[0]
    assert "MutationStage" in tuner_node.nodetool("getconcurrency", "MutationStage")
    assert "48" in tuner_node.nodetool("getconcurrency", "MutationStage")
    meta = tuner_store.session.execute(
        "SELECT compaction, memtable FROM system_schema.tables "
        "WHERE keyspace_name = 'asgard_tuner_test' AND table_name = 'objects'"
    ).one()
    assert meta.compaction["class"].endswith("UnifiedCompactionStrategy") and meta.compaction["scaling_parameters"] == "L4"
    assert meta.memtable == "trie" and tuner_node.pid() == pid  # switched live, no restart
    back = apply(tuner_node, tuner_store, Configuration(), new)
    assert back.restarted and back.restart_seconds > 0
    assert tuner_node.settings(["file_cache_enabled"]) == {"file_cache_enabled": "false"}
    assert "memtable = 'default'" in back.table[0]
    json.dumps(back.as_dict())


def test_validate_measures_tuned_default_and_a_real_grid(tuner_node):
    """`asgard tune validate --real-grid 1` in miniature: the shipped surrogate's pick and every
    grid value of the top key knob, each measured on the real node, the tuned pick set against
    the best the grid measured."""
    from tuner.anova import key_knobs
    from tuner.dataset import DEFAULT_MODEL
    from tuner.knobs import KNOBS
    from tuner.surrogates import Surrogate
    from tuner.validate import json_key, validate

    result = validate([0.5], 16, duration_s=0.4, repeats=1, model_path=str(DEFAULT_MODEL), progress=False,
                      stop_after=False, real_grid=1, keyspace="asgard_tuner_test", node=tuner_node)
    (row,) = result["workloads"]
    top = key_knobs(Surrogate.load(DEFAULT_MODEL))[0]
    assert result["real_grid_knobs"] == [top]
    grid = row["real_grid"]
    # every grid value of the knob was measured (the default once as "default")
    assert grid["configs"] == len(KNOBS[top].values_for_grid())
    assert all(v > 0 for v in grid["ops_per_s"].values()) and json_key(Configuration()) in grid["ops_per_s"]
    assert grid["best_ops_per_s"] == max(grid["ops_per_s"].values())
    assert grid["tuned_vs_best_pct"] == pytest.approx((row["tuned_ops_per_s"] / grid["best_ops_per_s"] - 1) * 100, abs=0.02)
    assert row["default_ops_per_s"] > 0 and row["tuned_ops_per_s"] > 0 and len(row["samples"]["default"]) == 2
    assert tuner_node.is_running()
