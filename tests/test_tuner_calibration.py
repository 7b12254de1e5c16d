"""Miniature calibration on a real Cassandra: the tuner's own node on 127.0.0.5.

The session fixture starts the node in a fresh directory (so it never touches node 1, which
the other tests use, nor the calibration node's state) and stops it at the end.
"""
from __future__ import annotations

import json

import pytest

from asgard.tuner.calibrate import PlannedConfig, calibrate, read_rows
from asgard.tuner.knob_apply import apply
from asgard.tuner.knobs import Configuration
from asgard.tuner.node import TunerNode
from asgard.tuner.workload import Workload, run_workload
from asgard.resources.stores import ObjectKey


@pytest.fixture(scope="session")
def tuner_node(tmp_path_factory):
    node = TunerNode(index=5, heap="1G", workdir=tmp_path_factory.mktemp("tuner-node5"))
    node.start()
    yield node
    node.stop()


@pytest.fixture(scope="session")
def tuner_store(tuner_node):
    from asgard.resources.stores.cql import CassandraObjectStore

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


def test_miniature_calibration_pairs_every_config_with_the_default(tuner_node, tuner_store, tmp_path):
    path = tmp_path / "cal.jsonl"
    restart_only = Configuration(file_cache_size_mib=128, commitlog_sync="group", durable_writes=False)
    configs = [PlannedConfig("aa", Configuration()), PlannedConfig("random", restart_only)]
    workloads = [Workload.from_dag("scatter", 4, 64, compressibility=0.0), Workload.from_dag("broadcast", 4, 16)]
    summary = calibrate(path, tuner_node, tuner_store, workloads, configs, duration_s=0.4, warmup_s=0.1,
                        pairs=2, settle_s=0.2, progress=False)
    assert summary["rows_written"] == 4
    # ABBA: default, candidate, candidate, default -- two switches, each a restart for this one
    assert summary["restarts"] == 2 and all(s > 1 for s in summary["restart_seconds"])
    rows = read_rows(path)
    assert [r["tag"] for r in rows] == ["aa", "aa", "random", "random"]
    for r in rows:
        assert len(r["ratios"]) == 2 and all(x > 0 for x in r["ratios"]) and r["errors"] == 0
        # the row's ratio is the geometric mean of its pairs
        assert r["ratio"] == pytest.approx((r["ratios"][0] * r["ratios"][1]) ** 0.5, rel=1e-3)
        assert r["ci_low"] <= r["ratio"] <= r["ci_high"]
        assert r["baseline_cpu_s_per_gb"] > 0 and r["candidate_cpu_s_per_gb"] > 0
    assert rows[2]["applied"]["restarts"] and not rows[0]["applied"]["restarts"]
    # the node is back at the default: periodic sync, durable keyspace
    assert tuner_node.settings(["commitlog_sync"]) == {"commitlog_sync": "periodic"}
    # resumable: a rerun finds everything done and appends nothing
    again = calibrate(path, tuner_node, tuner_store, workloads, configs, duration_s=0.4, progress=False)
    assert again["rows_written"] == 0 and len(read_rows(path)) == 4
    # an interrupted line is ignored, and the missing configuration is measured again
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:3]) + "\n" + lines[3][:40] + "\n")
    third = calibrate(path, tuner_node, tuner_store, workloads, configs[:1], duration_s=0.4, progress=False)
    assert third["rows_written"] == 0
    fourth = calibrate(path, tuner_node, tuner_store, workloads, configs, duration_s=0.4, settle_s=0.2,
                       progress=False)
    assert fourth["rows_written"] == 1 and len(read_rows(path)) == 4


def test_apply_on_a_fresh_node_creates_the_schema_it_alters(tuner_node):
    """`asgard tune validate` on a tuner node whose keyspace was never written (a fresh machine,
    or after a wipe) applies the default first: its ALTER KEYSPACE found no keyspace and the
    command died with InvalidRequest. The store's schema is made before it is altered."""
    import uuid

    from asgard.resources.stores.cql import CassandraObjectStore

    keyspace = f"asgard_fresh_{uuid.uuid4().hex[:8]}"
    store = CassandraObjectStore(contact_points=[tuner_node.address], keyspace=keyspace)
    store.ping()
    try:
        tuner_node.set_overrides(Configuration().yaml_overrides(), replace=True)
        tuner_node.restart()  # the node at the default, as validate finds a node it calibrated
        first = apply(tuner_node, store, Configuration(), None)  # what validate applies first
        assert not first.restarted and first.table[0] == f"ALTER KEYSPACE {keyspace} WITH durable_writes = true"
        res = apply(tuner_node, store, Configuration(durable_writes=False), Configuration())
        assert res.table == [f"ALTER KEYSPACE {keyspace} WITH durable_writes = false"]
        row = store.session.execute(
            "SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = %s", (keyspace,)).one()
        assert row is not None and row.durable_writes is False
        key = ObjectKey.for_run("fresh", "step", "out")
        store.put(key, {"a": 1})
        assert store.get(key)[0] == {"a": 1}
    finally:
        store.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)


def test_apply_reaches_keyspace_table_node_and_client(tuner_node, tuner_store):
    prev = Configuration(file_cache_size_mib=128, memtable_heap_space_mib=128, compaction="LCS", concurrent_writes=16)
    apply(tuner_node, tuner_store, prev, None)
    pid = tuner_node.pid()
    new = prev.replace(concurrent_writes=48, compaction="UCS", ucs_scaling_parameters="L4", memtable="trie",
                       durable_writes=False, gc_grace_seconds=3600, client_chunk_kib=256, client_codec="lz4")
    res = apply(tuner_node, tuner_store, new, prev)
    assert not res.restarted and tuner_node.pid() == pid
    assert res.live == ["setconcurrency MutationStage 48"] and "UnifiedCompactionStrategy" in res.table[1]
    assert res.table[0] == "ALTER KEYSPACE asgard_tuner_test WITH durable_writes = false"
    assert "memtable = 'trie'" in res.table[1]
    assert "48" in tuner_node.nodetool("getconcurrency", "MutationStage")
    meta = tuner_store.session.execute(
        "SELECT compaction, memtable, gc_grace_seconds FROM system_schema.tables "
        "WHERE keyspace_name = 'asgard_tuner_test' AND table_name = 'objects'"
    ).one()
    assert meta.compaction["class"].endswith("UnifiedCompactionStrategy") and meta.compaction["scaling_parameters"] == "L4"
    assert meta.memtable == "trie" and meta.gc_grace_seconds == 3600
    ks = tuner_store.session.execute(
        "SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = 'asgard_tuner_test'").one()
    assert ks.durable_writes is False and tuner_node.pid() == pid  # all live, no restart
    # read back from the node, the configuration in force is the one applied
    from asgard.tuner.knobs import CLIENT, KNOBS
    from asgard.tuner.readback import read_configuration

    in_force, unreadable = read_configuration(tuner_store.session, "asgard_tuner_test")
    assert not unreadable
    # two knobs left at their default are not written to the yaml, and Cassandra derives them
    # from the heap: the knobs' defaults are a 2 GiB heap's; this node has 1 GiB
    heap_derived = {"key_cache_size_mib": 51, "memtable_offheap_space_mib": 256}  # min(5%, 100 MiB), 1/4
    server = [k for k in KNOBS if KNOBS[k].apply != CLIENT and k not in heap_derived]
    assert {k: in_force[k] for k in server} == {k: new[k] for k in server}
    assert {k: in_force[k] for k in heap_derived} == heap_derived
    # the same change again (the record of what was in force now stale): the schema has it, no ALTER
    again = apply(tuner_node, tuner_store, new, prev)
    assert again.table == [] and not again.restarted and tuner_node.pid() == pid
    # the client side: the next put is chunked and compressed as tuned, and reads back
    key = ObjectKey("tuner/apply", "out")
    data = bytes(range(256)) * 4096  # 1 MiB
    put = tuner_store.put(key, data)
    assert put.manifest.chunk_size == 256 << 10 and put.manifest.codec == "lz4"
    assert tuner_store.get(key)[0] == data
    back = apply(tuner_node, tuner_store, Configuration(), new)
    assert back.restarted and back.restart_seconds > 0
    assert tuner_node.settings(["file_cache_enabled"]) == {"file_cache_enabled": "false"}
    assert "memtable = 'default'" in back.table[1] and back.table[0].endswith("durable_writes = true")
    assert tuner_store.chunk_size == 1 << 20 and tuner_store.codec.name == "none"
    json.dumps(back.as_dict())


def test_validate_measures_tuned_against_default_per_pattern(tuner_node, tuner_store):
    """`asgard tune validate` in miniature: the shipped surrogate's pick for two DAG patterns,
    each measured against the default in ABBA pairs, with the noise floor beside it."""
    from asgard.tuner.dataset import DEFAULT_MODEL
    from asgard.tuner.measure import geomean
    from asgard.tuner.validate import validate

    wls = [Workload.from_dag("scatter", 4, 256, compressibility=0.0), Workload.from_dag("shuffle", 2, 16)]
    result = validate(wls, str(DEFAULT_MODEL), tuner_node, tuner_store, pairs=2, duration_s=0.4,
                      noise=True, progress=False)
    assert [r["pattern"] for r in result["rows"]] == ["scatter", "shuffle"]
    for r in result["rows"]:
        assert {"pattern", "object_kib", "predicted_gain_pct", "measured_gain_pct", "ci_low_pct", "ci_high_pct"} <= set(r)
        assert len(r["ratios"]) == 2 and r["measured_gain_pct"] == pytest.approx((geomean(r["ratios"]) - 1) * 100, abs=0.02)
        assert r["ci_low_pct"] <= r["measured_gain_pct"] <= r["ci_high_pct"]
        assert len(r["noise_ci_pct"]) == 2 and r["default_ops_per_s"] > 0 and r["tuned_ops_per_s"] > 0
        if not r["tuned_config"]:  # the default kept: nothing predicted
            assert r["predicted_gain_pct"] == 0
    assert tuner_node.is_running()
    ks = tuner_store.session.execute(
        "SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = 'asgard_tuner_test'").one()
    assert ks.durable_writes is True  # left at the default
