"""Topology analyzer: the seed applications' DAGs classified as the paper names them."""
from __future__ import annotations

from asgard_dagster.topology import analyze_job, analyze_with_history
from pipelines.jobs import make_job
from tests.conftest import TEST_KEYSPACE


def test_word_count_is_a_shuffle_of_m_by_r():
    topo = analyze_job(make_job("word_count", "fs_stock"), dynamic_degree=5)
    kinds = {row["kind"]: row for row in topo.as_rows()}
    reducers = len([n for n in make_job("word_count", "fs_stock").graph.nodes if n.name.startswith("reduce_bucket")])
    assert kinds["shuffle"]["writes"] == 5 * reducers and kinds["shuffle"]["consumers"] == reducers
    assert kinds["scatter"]["writes"] == 5 and kinds["fanin"]["writes"] == reducers
    assert topo.dominant().kind == "shuffle"
    w = topo.workload()
    assert w.pattern == "shuffle" and w.fanout == reducers


def test_lightgbm_forest_broadcasts_the_pca_output():
    topo = analyze_job(make_job("lightgbm_forest", "fs_stock"), dynamic_degree=6,
                       object_bytes={("pca", "pca_train"): 4 << 20})
    stage = topo.dominant()
    assert (stage.producer, stage.output, stage.kind, stage.writes, stage.reads) == ("pca", "pca_train", "broadcast", 1, 6)
    w = topo.workload()
    assert w.pattern == "broadcast" and w.fanout == 6 and w.object_kib == 4096
    assert abs(w.nominal_read_ratio - 6 / 7) < 1e-9


def test_history_gives_degrees_and_sizes(cassandra_node, dagster_instance):
    from pipelines.demo import fan_out_fan_in

    config = {"ops": {"make_chunks": {"config": {"chunks": 3, "chunk_mib": 1}}},
              "resources": {"io_manager": {"config": {"keyspace": TEST_KEYSPACE}}}}
    assert fan_out_fan_in.execute_in_process(run_config=config, instance=dagster_instance).success
    topo = analyze_with_history(fan_out_fan_in, dagster_instance)
    scatter = next(s for s in topo.stages if s.kind == "scatter")
    assert scatter.writes == 3 and 1 << 20 <= scatter.object_bytes < (1 << 20) + 4096
    w = topo.workload()
    assert w.pattern == "scatter" and w.fanout == 3 and w.object_kib == 1024
