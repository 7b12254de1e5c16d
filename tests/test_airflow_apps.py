"""The seed applications as Airflow DAGs (asgard.pipelines.airflow_apps), run with real ``airflow dags test``
at small sizes through the Cassandra XCom backend: the results are right, Airflow's database holds
only references (and small values), and the topology analyzer reads each DAG, sized by the run's
references, into the workload its structure implies."""
from __future__ import annotations

import json

import numpy as np
import pytest

from asgard.resources.stores.base import ObjectKey
from asgard.resources.stores.registry import open_store

from .airflow_support import KEYSPACE, THRESHOLD, dags_test, is_reference, make_home, purge, raw_sizes, xcom_rows

SMALL = {"video_analytics": {"fanout": 6, "scale": 0.1}, "lightgbm_forest": {"fanout": 3, "scale": 2},
         "word_count": {"fanout": 3, "scale": 0.25}, "etl_columnar": {"fanout": 3, "scale": 0.05},
         "log_analytics": {"fanout": 3, "scale": 0.02}}


@pytest.fixture(scope="module")
def home(tmp_path_factory, cassandra_node):
    home = make_home(tmp_path_factory.mktemp("airflow_apps"))
    yield home
    purge(home)  # the stored values go with the suite


@pytest.fixture(scope="module")
def store(cassandra_node):
    return open_store("cassandra", keyspace=KEYSPACE)


def run_app(home, store, app: str):
    """Run the app's DAG; ``(rows, result)``: its xcom rows and the final task's value, read from the store."""
    from asgard.pipelines.airflow_apps import FINAL_TASK, dag_id_for

    dag_id = dag_id_for(app)
    rc, out, run_id = dags_test(home, dag_id, SMALL[app])
    assert rc == 0, out[-6000:]
    # a task's return value is not written into its log (a 128 MiB file's repr held a worker for minutes)
    assert "Returned value not shown" in out and "Returned value was" not in out, out[-3000:]
    rows = xcom_rows(home, dag_id, run_id)
    # Airflow's table: a reference for every value over the threshold (measured as compact JSON,
    # as the backend measures it; the row's own text has spaces), never the value itself
    sizes = raw_sizes(home, dag_id, run_id)
    assert set(sizes) == set(rows)
    for where, value in rows.items():
        compact = len(json.dumps(value, separators=(",", ":")).encode())
        assert is_reference(value) or compact <= THRESHOLD, (where, compact)
        if is_reference(value):
            assert sizes[where] < 4000, (where, sizes[where])
    final = rows[(FINAL_TASK[app], -1, "return_value")]
    if not is_reference(final):  # a small result stays in Airflow's row, as Airflow would keep it
        return rows, final
    value, _ = store.get(ObjectKey(final["scope"], final["path"]))
    if final["format"] == "json":  # plain data is stored as JSON in Airflow's serialization: parsed as Airflow does
        from airflow.sdk.serde import deserialize

        value = deserialize(value)  # the store parsed the JSON (its serializer "json")
    return rows, value


def analyzed(app: str, rows: dict):
    from asgard.pipelines.airflow_apps import make_app_dag
    from asgard_airflow.topology import analyze_dag, history_from_rows

    degrees, sizes = history_from_rows([(t, m, k, v) for (t, m, k), v in rows.items()])
    topo = analyze_dag(make_app_dag(app, reducers=2), degrees, sizes)
    return {(s.producer, s.output): s for s in topo.stages}, topo, sizes


def test_etl_dag_passes_arrow_tables_through_cassandra_each_mapped_task_reading_its_own(home, store):
    from asgard.pipelines.etl_columnar import expected_result

    rows, result = run_app(home, store, "etl_columnar")
    want = expected_result(0.05, 3)
    assert {k: v for k, v in result.items() if k != "net_revenue"} == {k: v for k, v in want.items() if k != "net_revenue"}
    assert result["net_revenue"] == pytest.approx(want["net_revenue"], rel=1e-9)
    orders = rows[("generate", -1, "return_value")]
    assert is_reference(orders) and orders["items"] == 3  # stored per partition: each filter reads its own
    customers = rows[("generate", -1, "customers")]
    assert is_reference(customers) and customers["format"] == "pickle"  # an Arrow table, pickled
    # the broadcast: one customers table, no copy of it per join
    assert not [k for k in rows if k[0] == "join_customers" and k[2] != "return_value"]
    assert sorted(m for (t, m, k) in rows if t == "join_customers") == [0, 1, 2]


def test_log_dag_passes_log_files_as_bytes_and_parsed_tables_through_cassandra(home, store):
    from asgard.pipelines.log_analytics import expected_result

    rows, result = run_app(home, store, "log_analytics")
    want = expected_result(0.02, 3)
    assert {k: v for k, v in result.items() if k != "mean_latency_ms"} == \
        {k: v for k, v in want.items() if k != "mean_latency_ms"}
    assert result["mean_latency_ms"] == pytest.approx(want["mean_latency_ms"], rel=1e-9)
    files = rows[("land_logs", -1, "return_value")]
    assert is_reference(files) and files["items"] == 3  # stored per file: each parse reads its own
    assert files["format"] == "pickle"  # bytes, which Airflow's serde does not carry, pickled
    assert sorted(m for (t, m, k) in rows if t == "parse_logs") == [0, 1, 2]


def test_word_count_dag_shuffles_through_cassandra(home, store):
    from asgard.pipelines.word_count import reference_counts

    rows, result = run_app(home, store, "word_count")
    assert is_reference(rows[("merge_counts", -1, "return_value")])  # the counts: over the threshold
    expected = reference_counts(0.25)
    assert result["counts"] == dict(expected) and result["n_words"] == sum(expected.values())
    assert result["n_mappers"] == 3 and result["n_reducers"] == 2
    split = rows[("split_corpus", -1, "return_value")]
    assert is_reference(split) and split["items"] == 3  # stored element by element: each mapper reads its own
    # m x r partitions, one key each, and nothing else (no whole dict again as return_value)
    assert {(t, m, k) for t, m, k in rows if t == "map_words"} == {
        ("map_words", i, f"part_{j}") for i in range(3) for j in range(2)}

    stages, topo, sizes = analyzed("word_count", rows)
    scatter = stages[("split_corpus", "return_value")]
    assert (scatter.kind, scatter.writes, scatter.reads) == ("scatter", 3, 3)
    assert scatter.object_bytes == int(np.median(split["item_bytes"]))
    shuffle = stages[("map_words", "*")]
    assert (shuffle.kind, shuffle.writes, shuffle.reads) == ("shuffle", 6, 6)
    assert sorted(shuffle.consumers) == ["reduce_bucket_0", "reduce_bucket_1"]
    fanin = stages[("reduce_bucket_0+reduce_bucket_1", "*")]
    assert (fanin.kind, fanin.writes, fanin.reads, fanin.consumers) == ("fanin", 2, 2, ["merge_counts"])
    w = topo.workload()
    assert (w.pattern, w.fanout, w.object_kib) == ("scatter", 3, scatter.object_bytes // 1024)


def test_lightgbm_forest_dag_broadcasts_pca_to_every_trainer(home, store):
    rows, result = run_app(home, store, "lightgbm_forest")
    assert result["n_trainers"] == 3 and len(result["member_accuracy"]) == 3
    assert result["accuracy"] > 0.9 and result["accuracy_original"] > 0.9, result
    assert result["n_test_original"] == 450
    assert sorted(m for t, m, _ in rows if t == "train_booster") == [0, 1, 2]
    assert is_reference(rows[("pca", -1, "pca_train")])

    stages, topo, sizes = analyzed("lightgbm_forest", rows)
    broadcast = stages[("pca", "pca_train")]
    assert (broadcast.kind, broadcast.writes, broadcast.reads) == ("broadcast", 1, 3)
    assert broadcast.object_bytes == rows[("pca", -1, "pca_train")]["bytes"]
    scatter = stages[("trainer_seeds", "return_value")]
    assert (scatter.kind, scatter.writes, scatter.reads) == ("scatter", 3, 3)
    fanin = stages[("train_booster", "return_value")]
    assert (fanin.kind, fanin.writes, fanin.reads) == ("fanin", 3, 3)
    for key in (("prepare_digits", "train"), ("prepare_digits", "test"), ("pca", "pca_model")):
        assert stages[key].kind == "pipe" and (stages[key].writes, stages[key].reads) == (1, 1)
    dominant = max(topo.stages, key=lambda s: (s.bytes_moved, s.writes + s.reads))
    assert topo.dominant() is dominant


def test_video_analytics_dag_scatters_chunks_and_classifies_each(home, store):
    from asgard.pipelines import data

    rows, result = run_app(home, store, "video_analytics")
    chunks = result["chunks"]
    assert result["n_chunks"] == 6 and [c["index"] for c in chunks] == list(range(6))
    for c in chunks:
        probs = np.asarray(c["probs"])
        assert probs.shape == (1000,) and probs.sum() == pytest.approx(1.0, abs=1e-6)
        assert c["top1"] == int(np.argmax(probs))
    by_scene = {c["scene"]: c for c in chunks}
    assert set(by_scene) == set(data.PHOTOS)
    assert by_scene["chelsea"]["top1"] in data.CAT_CLASSES, by_scene["chelsea"]["top5"]
    split = rows[("split_video", -1, "return_value")]
    assert is_reference(split) and split["items"] == 6

    stages, topo, _ = analyzed("video_analytics", rows)
    scatter = stages[("split_video", "return_value")]
    assert (scatter.kind, scatter.writes, scatter.reads) == ("scatter", 6, 6)
    assert (stages[("extract_frame", "return_value")].kind, stages[("extract_frame", "return_value")].writes) == ("pipe", 6)
    fanin = stages[("classify", "return_value")]
    assert (fanin.kind, fanin.writes, fanin.reads, fanin.consumers) == ("fanin", 6, 6, ["collect"])
    # the dominant stage moves the most bytes; a pipe (one write, one read each) is a mixed workload
    dominant = topo.dominant()
    assert dominant.bytes_moved == max(s.bytes_moved for s in topo.stages)
    w = topo.workload()
    assert w.pattern == (dominant.kind if dominant.kind != "pipe" else "mixed")
    assert w.object_kib == max(1, dominant.object_bytes // 1024)


def test_bench_apps_sets_dagster_and_airflow_side_by_side(tmp_path):
    """``asgard bench apps --engine dagster,airflow``: the same app on the same store both ways, and
    a Perf/$ table with an Airflow column. On local files: the Dagster bench puts a Cassandra it
    measures on its default configuration first (a restart if the shared node had overrides)."""
    import subprocess
    import sys

    out = tmp_path / "bench"
    run = subprocess.run([sys.executable, "-m", "asgard.cli", "bench", "apps", "--engine", "dagster,airflow",
                          "--small", "--apps", "word_count", "--backends", "local", "-r", "1", "--no-warmup",
                          "--out", str(out), "--json"], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    airflow = json.loads((out / "airflow" / "summary.json").read_text())
    dagster = json.loads((out / "dagster" / "summary.json").read_text())
    for summary in (airflow, dagster):
        (cell,) = summary["cells"]
        assert (cell["app"], cell["backend"], cell["ok"], cell["runs"]) == ("word_count", "local", 1, 1)
        assert cell["perf_per_usd"]["median"] > 0 and cell["bytes_written"]["median"] > 1_000_000
    assert airflow["meta"]["engine"] == "airflow"
    table = (out / "summary.md").read_text()
    assert "| app | backend | Dagster E2E s | Airflow E2E s | Dagster Perf/$ | Airflow Perf/$ | Airflow / Dagster |" in table
    row = next(line for line in table.splitlines() if line.startswith("| word_count | local |"))
    dagster_perf, airflow_perf = (float(x) for x in row.split("|")[5:7])
    assert dagster_perf == round(dagster["cells"][0]["perf_per_usd"]["median"])
    assert airflow_perf == round(airflow["cells"][0]["perf_per_usd"]["median"])


def test_parsing_the_shipped_dag_file_imports_no_dagster(home):
    """Airflow's DagBag (what the dag processor parses with, every 30 s by default) loads the shipped
    DAG file's DAGs without importing Dagster: a task imports its pipeline's module when it runs
    (the runs above)."""
    import subprocess
    import sys

    from asgard.resources.paths import REPO_ROOT

    dag_file = REPO_ROOT / "pipelines" / "airflow_dags" / "asgard_dags.py"
    code = ("import json, sys\nfrom airflow.dag_processing.dagbag import DagBag\n"
            f"bag = DagBag({str(dag_file)!r})\n"
            "print(json.dumps([sorted(bag.dag_ids), {str(k): v for k, v in bag.import_errors.items()},"
            " sorted(m for m in sys.modules if m.split('.')[0] == 'dagster')[:5]]))")
    out = subprocess.run([sys.executable, "-c", code], env=home["env"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    dag_ids, errors, dagster_modules = json.loads(out.stdout.strip().splitlines()[-1])
    assert errors == {} and dag_ids == sorted(["asgard_retune_cassandra"] + [f"asgard_{a}" for a in (
        "video_analytics", "lightgbm_forest", "word_count", "etl_columnar", "log_analytics")])
    assert dagster_modules == [], dagster_modules
