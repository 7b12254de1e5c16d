"""Topology analyzer: the seed applications' DAGs classified as the paper names them."""
from __future__ import annotations

from asgard_dagster.topology import analyze_job, analyze_with_history
from asgard.pipelines.jobs import make_job
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
    from tests.jobs import fan_out_fan_in_test_job

    fan_out_fan_in = fan_out_fan_in_test_job()  # the demo on the test keyspace
    config = {"ops": {"make_chunks": {"config": {"chunks": 3, "chunk_mib": 1}}}}
    assert fan_out_fan_in.execute_in_process(run_config=config, instance=dagster_instance).success
    topo = analyze_with_history(fan_out_fan_in, dagster_instance)
    scatter = next(s for s in topo.stages if s.kind == "scatter")
    assert scatter.writes == 3 and 1 << 20 <= scatter.object_bytes < (1 << 20) + 4096
    w = topo.workload()
    assert w.pattern == "scatter" and w.fanout == 3 and w.object_kib == 1024


def _nested_job(io_manager=None):
    from dagster import DynamicOut, DynamicOutput, In, graph, job, op

    @op(out=DynamicOut())
    def split():
        for i in range(3):
            yield DynamicOutput(list(range(1000 * (i + 1))), mapping_key=f"part_{i}")

    @op
    def clean(xs: list) -> list:
        return [x for x in xs if x % 2 == 0]

    @op
    def score(xs: list) -> int:
        return sum(xs)

    @graph
    def per_part(xs):  # a graph mapped over the dynamic output: clean -> score inside it
        return score(clean(xs))

    @op
    def reference() -> list:
        return list(range(500))

    @graph
    def prepare():  # a nested graph whose output three ops load
        return reference()

    @op(ins={"parts": In(list)})
    def total(parts, ref: list) -> int:
        return sum(parts) + len(ref)

    @op
    def check_a(ref: list) -> int:
        return len(ref)

    @op
    def check_b(ref: list) -> int:
        return len(ref)

    @job(resource_defs={"io_manager": io_manager} if io_manager is not None else None)
    def nested():
        ref = prepare()
        total(split().map(per_part).collect(), ref)
        check_a(ref)
        check_b(ref)

    return nested


def test_nested_graphs_are_read_through_to_their_ops():
    topo = analyze_job(_nested_job(), dynamic_degree=3)
    rows = {(r["producer"], r["output"]): r for r in topo.as_rows()}
    # the mapped graph's ops run once per mapping key; the scatter reaches per_part.clean
    assert (rows[("split", "result")]["kind"], rows[("split", "result")]["writes"]) == ("scatter", 3)
    assert rows[("per_part.clean", "result")]["kind"] == "pipe" and rows[("per_part.clean", "result")]["writes"] == 3
    assert rows[("per_part.score", "result")]["kind"] == "fanin"
    # the nested graph's output is the op inside it, loaded by three ops: a broadcast
    ref = rows[("prepare.reference", "result")]
    assert (ref["kind"], ref["writes"], ref["reads"]) == ("broadcast", 1, 3)


def test_nested_graph_history_names_steps_by_path(cassandra_node, dagster_instance):
    from asgard_dagster import CassandraIOManager, CassandraResource

    job = _nested_job(CassandraIOManager(cassandra=CassandraResource(keyspace=TEST_KEYSPACE)))
    assert job.execute_in_process(instance=dagster_instance).success
    topo = analyze_with_history(job, dagster_instance)
    rows = {(r["producer"], r["output"]): r for r in topo.as_rows()}
    assert rows[("split", "result")]["writes"] == 3  # the degree the run had
    # sizes measured per op path: per_part.clean's outputs are about half of split's
    assert rows[("per_part.clean", "result")]["object_bytes"] < rows[("split", "result")]["object_bytes"]
    assert rows[("prepare.reference", "result")]["object_bytes"] > 500


def test_asset_jobs_read_partitions_other_runs_wrote(cassandra_node, dagster_instance):
    """The workspace's assets: a job of the reduce side reads every split the map runs wrote; the
    rolling window three; the three-day window three days; sizes from the latest materializations."""
    import dagster as dg

    from asgard_dagster import CassandraIOManager, CassandraResource
    from asgard.pipelines.assets import ASSETS, demo_chunk

    jobs = [dg.define_asset_job(name, selection=[name])
            for name in ("word_counts", "word_counts_rolling", "sample_3day", "demo_summary")]
    jobs.append(dg.define_asset_job("split_side", selection=["corpus_split", "split_word_counts"]))
    io_manager = CassandraIOManager(cassandra=CassandraResource(keyspace=TEST_KEYSPACE))
    defs = dg.Definitions(assets=ASSETS, jobs=jobs, resources={"io_manager": io_manager})
    shape = {}
    for job in jobs:
        topo = analyze_job(defs.resolve_job_def(job.name))
        shape[job.name] = [(r["producer"], r["kind"], r["writes"], r["reads"]) for r in topo.as_rows()]
    assert shape["word_counts"] == [("split_word_counts", "fanin", 0, 4)]
    assert shape["word_counts_rolling"] == [("split_word_counts", "fanin", 0, 3)]
    assert shape["sample_3day"] == [("daily_sample", "fanin", 0, 3)]
    assert shape["demo_summary"] == [("demo_chunk", "fanin", 0, 4)]
    assert shape["split_side"] == [("corpus_split", "pipe", 1, 1)]
    assert analyze_job(defs.resolve_job_def("demo_summary")).workload().pattern == "fanin"
    # sized by the upstream's latest materialization
    result = dg.materialize(ASSETS, selection=[demo_chunk], partition_key="chunk_0", instance=dagster_instance,
                            resources={"io_manager": io_manager})
    assert result.success
    topo = analyze_with_history(defs.resolve_job_def("demo_summary"), dagster_instance)
    assert 1 << 20 <= topo.stages[0].object_bytes < (1 << 20) + 4096
