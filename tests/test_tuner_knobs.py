"""Knob space, configuration validation and the calibration plan (no server needed)."""
from __future__ import annotations

import random

import pytest

from asgard.tuner.calibrate import CALIBRATED, count_restarts, design_plan, plan
from asgard.tuner.knobs import (
    KNOBS, LIVE, RESTART, TABLE, Configuration, KnobChoiceError, KnobConstraintError, KnobError,
    KnobRangeError, KnobTypeError, UnknownKnobError, grid, random_configuration, validate,
)


def test_rafiki_five_are_covered_with_their_50_successors():
    assert KNOBS["compaction"].apply == TABLE and set(KNOBS["compaction"].choices) == {"STCS", "LCS", "TWCS", "UCS"}
    assert KNOBS["concurrent_writes"].apply == LIVE
    assert KNOBS["concurrent_compactors"].apply == LIVE
    assert KNOBS["file_cache_size_mib"].apply == RESTART
    for successor in ("memtable_heap_space_mib", "memtable_offheap_space_mib", "memtable_flush_writers"):
        assert KNOBS[successor].apply == RESTART and "memtable cleanup threshold" in KNOBS[successor].rafiki


def test_validation_errors_are_typed_and_clear():
    with pytest.raises(UnknownKnobError, match="memtable_cleanup_threshold"):
        Configuration(memtable_cleanup_threshold=0.3)
    with pytest.raises(KnobTypeError, match="expects an integer"):
        Configuration(concurrent_writes="64")
    with pytest.raises(KnobTypeError):
        Configuration(concurrent_writes=True)
    with pytest.raises(KnobRangeError, match=r"outside \[4, 128\]"):
        Configuration(concurrent_writes=1000)
    with pytest.raises(KnobChoiceError, match="DTCS"):
        Configuration(compaction="DTCS")
    with pytest.raises(KnobConstraintError, match="power of two"):
        Configuration(chunk_length_kib=48)
    with pytest.raises(KnobConstraintError, match="heap"):  # a node with a 1 GiB heap
        validate({"memtable_heap_space_mib": 1024}, heap_mib=1024)
    # all of them are ValueErrors for callers that do not care which
    assert issubclass(KnobRangeError, KnobError) and issubclass(KnobError, ValueError)
    assert Configuration(concurrent_writes=64.0)["concurrent_writes"] == 64


def test_renderings():
    c = Configuration(file_cache_size_mib=256, memtable_heap_space_mib=128, compaction="UCS",
                      ucs_scaling_parameters="L4", compression="none", concurrent_writes=64)
    y = c.yaml_overrides()
    assert y["file_cache_enabled"] is True and y["file_cache_size"] == "256MiB"  # enabled, or a no-op in 5.0
    assert y["memtable_heap_space"] == "128MiB" and y["concurrent_writes"] == 64
    assert y["memtable_flush_writers"] is None  # default: key removed from the yaml
    cql = c.alter_table_cql("ks")
    assert "UnifiedCompactionStrategy" in cql and "'scaling_parameters': 'L4'" in cql and "'enabled': 'false'" in cql
    assert c.live_commands()["concurrent_writes"] == ["setconcurrency", "MutationStage", "64"]
    assert Configuration().yaml_overrides()["file_cache_enabled"] is None
    d = c.diff(Configuration())
    assert set(d) == {"file_cache_size_mib", "memtable_heap_space_mib", "compaction", "ucs_scaling_parameters",
                      "compression", "concurrent_writes"}
    assert Configuration(concurrent_writes=64) == Configuration({"concurrent_writes": 64})
    assert hash(Configuration()) == hash(Configuration.default())


def test_grid_and_random_sampling_stay_valid():
    configs = list(grid(["compaction", "concurrent_writes", "file_cache_size_mib"]))
    assert len(configs) == 4 * 5 * 4
    rng = random.Random(1)
    for _ in range(50):
        random_configuration(CALIBRATED, rng)  # never raises


def test_plan_has_min_max_default_and_few_restarts():
    p = plan(CALIBRATED, n_random=6, seed=3)
    tags = [x.tag for x in p]
    # the default against itself at both ends: the noise floor, and ANOVA's default level
    assert tags[0] == tags[-1] == "aa" and tags.count("aa") == 2
    for name in CALIBRATED:
        kb = KNOBS[name]
        seen = {x.config[name] for x in p}
        expected = set(kb.choices) if kb.kind == "choice" else {min(kb.values_for_grid()), max(kb.values_for_grid()), kb.default}
        assert expected <= seen, name
    # random configurations only vary knobs that apply without a restart
    for x in p:
        if x.tag == "random":
            assert x.config.restart_part() == Configuration().restart_part()
    groups = {x.config.restart_part() for x in p}
    assert count_restarts(p) <= len(groups)


def test_plan_crosses_durable_writes_with_the_chunk_size_over_both_grids():
    """Every combination of the two knobs is measured once, the others at their defaults: the
    corners by the default and the one-at-a-time rows, the rest by cross rows."""
    p = plan(CALIBRATED, n_random=6, seed=3)
    combos = [(x.config["durable_writes"], x.config["client_chunk_kib"]) for x in p
              if x.tag != "random" and set(x.config.non_default()) <= {"durable_writes", "client_chunk_kib"}]
    assert sorted(set(combos)) == sorted((d, c) for d in (True, False) for c in KNOBS["client_chunk_kib"].values_for_grid())
    cross = [x for x in p if x.tag.startswith("cross:")]
    assert cross and all(x.tag == "cross:durable_writes*client_chunk_kib" for x in cross)
    assert len({x.config for x in p if x.tag != "aa"}) == len([x for x in p if x.tag != "aa"])  # none twice


def test_the_random_design_measures_random_live_configurations_and_the_noise_floor_alone():
    p = design_plan("random", n_random=24, seed=0)
    assert [x.tag for x in p].count("aa") == 2 and p[0].tag == p[-1].tag == "aa"
    randoms = [x for x in p if x.tag != "aa"]
    assert len(randoms) == 24 and {x.tag for x in randoms} == {"random"}
    assert len({x.config for x in randoms}) == 24 and Configuration() not in {x.config for x in randoms}
    assert all(x.config.restart_part() == Configuration().restart_part() for x in randoms)  # no restart
    # the same seed draws the same configurations as the grid design's random rows: a replicate run
    # of either design measures the same plan
    assert [x.config for x in randoms] == [x.config for x in design_plan("grid", n_random=24) if x.tag == "random"]
    with pytest.raises(ValueError, match="design 'sobol' is not one of"):
        design_plan("sobol")


def test_calibrate_takes_a_workload_grid_by_name_and_says_what_a_bad_one_should_be():
    from click.testing import CliRunner

    from asgard.tuner.cli import _parse_workloads, tune
    from asgard.tuner.workload import DAG_WORKLOADS, dag_workloads

    runner = CliRunner()
    wide = dag_workloads(_parse_workloads("wide"))
    assert len({w.name for w in wide}) == 12 and len({w.pattern for w in wide}) == 4
    assert [w.name for w in wide[:len(DAG_WORKLOADS)]] == [w.name for w in dag_workloads()]  # the grid, then six more
    dense = dag_workloads(_parse_workloads("dense"))  # wide, then twelve in its gaps: 24 shapes, none twice
    assert len({w.name for w in dense}) == 24 and [w.name for w in dense[:12]] == [w.name for w in wide]
    result = runner.invoke(tune, ["calibrate", "--workloads", "widest", "--out", "unused.jsonl"])
    assert result.exit_code == 2
    assert "'widest': expected pattern:fanout:KiB:compressibility" in result.output and "['dag', 'dense', 'gaps', 'wide']" in result.output


def test_ephemeral_data_knobs_render_where_cassandra_reads_them():
    c = Configuration(durable_writes=False, gc_grace_seconds=0, memtable_flush_period_ms=60000,
                      row_cache_size_mib=256, commitlog_sync="group", client_chunk_kib=4096,
                      client_in_flight=16, client_codec="zstd", commitlog_segment_size_mib=64)
    assert c.alter_keyspace_cql("ks") == "ALTER KEYSPACE ks WITH durable_writes = false"
    assert Configuration().alter_keyspace_cql("ks").endswith("durable_writes = true")  # stock Cassandra
    cql = c.alter_table_cql("ks")
    assert "gc_grace_seconds = 0" in cql and "memtable_flush_period_in_ms = 60000" in cql
    assert "caching = {'keys': 'ALL', 'rows_per_partition': 'ALL'}" in cql
    assert "'rows_per_partition': 'NONE'" in Configuration().alter_table_cql("ks")
    y = c.yaml_overrides()
    assert y["row_cache_size"] == "256MiB" and y["commitlog_sync"] == "group"
    assert y["commitlog_sync_group_window"] == "15ms" and y["commitlog_sync_period"] is None
    # the stock sync mode stays written (the base config sets it), with its period
    d = Configuration().yaml_overrides()
    assert d["commitlog_sync"] == "periodic" and d["commitlog_sync_period"] == "10000ms"
    assert d["commitlog_sync_group_window"] is None
    assert c.client_options() == {"chunk_size": 4 << 20, "concurrency": 16, "codec": "zstd"}
    assert c.to_file_dict()["client"] == c.client_options() and c.to_file_dict()["keyspace"] == {"durable_writes": False}
    # how each applies: live schema changes, a restart, or the client
    kinds = {n: KNOBS[n].apply for n in ("durable_writes", "gc_grace_seconds", "row_cache_size_mib",
                                        "commitlog_sync", "client_chunk_kib")}
    assert kinds == {"durable_writes": "keyspace", "gc_grace_seconds": TABLE, "row_cache_size_mib": RESTART,
                     "commitlog_sync": RESTART, "client_chunk_kib": "client"}
    # a head row of two 4 MiB chunks does not fit half of a 16 MiB commit log segment
    with pytest.raises(KnobConstraintError, match="commitlog_segment_size_mib >= 17"):
        Configuration(client_chunk_kib=4096, commitlog_segment_size_mib=16)


def test_client_options_apply_to_a_live_store_and_old_objects_still_read(tmp_path):
    from asgard.resources.stores import ObjectKey, StoreConfigError
    from asgard.resources.stores.local import LocalObjectStore

    store = LocalObjectStore(root=str(tmp_path), chunk_size=1 << 20)
    key = ObjectKey("run", "before")
    data = bytes(range(256)) * 20_000  # 5 MiB, five chunks
    store.put(key, data)
    store.set_client_options(chunk_size=256 << 10, concurrency=2, codec="zstd")
    assert (store.chunk_size, store.concurrency, store.codec.name) == (256 << 10, 2, "zstd")
    after = ObjectKey("run", "after")
    res = store.put(after, data)
    assert res.manifest.codec == "zstd" and res.manifest.chunk_size == 256 << 10
    assert store.get(key)[0] == data and store.get(after)[0] == data  # each read by its own manifest
    with pytest.raises(StoreConfigError, match="concurrency must be at least 1"):
        store.set_client_options(chunk_size=1 << 20, concurrency=0, codec="none")
    assert store.concurrency == 2  # a refused change changes nothing


def test_memtable_is_a_live_table_knob_rendered_as_a_string_option(tmp_path):
    from asgard.resources.cassandra.config import base_config

    kb = KNOBS["memtable"]
    assert kb.apply == TABLE and kb.default == "default" and kb.choices == ("default", "skiplist", "trie")
    trie = Configuration(memtable="trie")
    assert trie.table_options()["memtable"] == "trie"
    cql = trie.alter_table_cql("ks")
    assert cql.startswith("ALTER TABLE ks.objects WITH compaction = {") and " AND memtable = 'trie' AND " in cql
    assert "memtable = 'default'" in Configuration().alter_table_cql("ks")
    # only ALTER TABLE: no yaml override, no nodetool command, no restart
    assert trie.yaml_overrides() == Configuration().yaml_overrides() and "memtable" not in trie.live_commands()
    assert trie.restart_part() == Configuration().restart_part() and set(trie.diff(Configuration())) == {"memtable"}
    with pytest.raises(KnobChoiceError):
        Configuration(memtable="ShardedSkipListMemtable")
    # every choice is a configuration the rendered cassandra.yaml defines
    configurations = base_config(tmp_path, "127.0.0.9", ["127.0.0.9"])["memtable"]["configurations"]
    assert set(kb.choices) <= set(configurations) and configurations["trie"] == {"class_name": "TrieMemtable"}
    # the shipped model's feature space (calibrated knobs only) still scores such configurations
    from asgard.tuner.calibrate import config_id, read_rows
    from asgard.tuner.dataset import DEFAULT_DATASET, DEFAULT_MODEL
    from asgard.tuner.surrogates import Surrogate
    from asgard.tuner.workload import Workload

    model = Surrogate.load(DEFAULT_MODEL)
    p = model.predict(model.space.matrix(Workload(0.5, 16), [Configuration(), trie]))
    assert p.shape == (2,) and all(v > 0 for v in p)
    # configuration ids (calibration resume keys) are those of the shipped rows' knobs
    rows = read_rows(DEFAULT_DATASET)[:50]
    assert rows and all(config_id(Configuration(r["knobs"])) == r["config_id"] for r in rows)
    assert config_id(Configuration()) != config_id(trie)
