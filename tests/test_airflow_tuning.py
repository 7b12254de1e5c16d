"""Workflow-native tuning on Airflow's own objects: the topology analyzer on real DAGs, the upcoming
runs from real DAG runs in a SQLite metadata database (queued by ``airflow dags trigger``, ticks of
the timetables, paused DAGs left out), and the retune DAG run with ``airflow dags test`` as a dry
run, its decision in XCom, the task log and the rendered report."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pendulum
import pytest

from .airflow_support import DAGS, airflow, dags_test, is_reference, make_home, purge, query, xcom_rows


def stages_of(topo) -> dict:
    return {(s.producer, s.output): (s.kind, s.writes, s.reads, sorted(s.consumers)) for s in topo.stages}


def test_analyzer_reads_each_seed_dag_structure():
    from asgard.pipelines.airflow_apps import make_app_dag
    from asgard_airflow.topology import analyze_dag

    wc = analyze_dag(make_app_dag("word_count", reducers=3), degrees={"split_corpus": 4},
                     object_bytes={("split_corpus", "return_value"): 100_000, ("map_words", "part_0"): 400_000,
                                   ("map_words", "part_1"): 400_000, ("map_words", "part_2"): 400_000})
    assert stages_of(wc) == {
        ("split_corpus", "return_value"): ("scatter", 4, 4, ["map_words"]),
        ("map_words", "*"): ("shuffle", 12, 12, ["reduce_bucket_0", "reduce_bucket_1", "reduce_bucket_2"]),
        ("reduce_bucket_0+reduce_bucket_1+reduce_bucket_2", "*"): ("fanin", 3, 3, ["merge_counts"]),
    }
    w = wc.workload()  # the shuffle moves the most bytes: 24 x 400 kB
    assert (w.pattern, w.fanout, w.object_kib, w.nominal_read_ratio) == ("shuffle", 3, 390, 0.5)

    video = analyze_dag(make_app_dag("video_analytics"), degrees={"split_video": 5},
                        object_bytes={("split_video", "return_value"): 300_000})
    assert stages_of(video) == {
        ("split_video", "return_value"): ("scatter", 5, 5, ["extract_frame"]),
        ("extract_frame", "return_value"): ("pipe", 5, 5, ["classify"]),
        ("classify", "return_value"): ("fanin", 5, 5, ["collect"]),
        ("collect", "return_value"): ("pipe", 1, 1, ["summarize"]),
    }
    assert (video.workload().pattern, video.workload().fanout, video.workload().object_kib) == ("scatter", 5, 292)

    forest = analyze_dag(make_app_dag("lightgbm_forest"), degrees={"trainer_seeds": 4},
                         object_bytes={("pca", "pca_train"): 2_000_000, ("prepare_digits", "train"): 1_000_000})
    assert stages_of(forest) == {
        ("prepare_digits", "train"): ("pipe", 1, 1, ["pca"]),
        ("prepare_digits", "seeds"): ("pipe", 1, 1, ["trainer_seeds"]),
        ("prepare_digits", "test"): ("pipe", 1, 1, ["evaluate"]),
        ("pca", "pca_train"): ("broadcast", 1, 4, ["train_booster"]),
        ("pca", "pca_model"): ("pipe", 1, 1, ["evaluate"]),
        ("trainer_seeds", "return_value"): ("scatter", 4, 4, ["train_booster"]),
        ("train_booster", "return_value"): ("fanin", 4, 4, ["combine_forest"]),
        ("combine_forest", "return_value"): ("pipe", 1, 1, ["evaluate"]),
    }
    w = forest.workload()  # the broadcast: 1 write, 4 reads of 2 MB
    assert (w.pattern, w.fanout, w.object_kib, w.nominal_read_ratio) == ("broadcast", 4, 1953, 0.8)


def test_analyzer_literal_expand_and_list_argument_fan_in():
    from airflow.sdk import DAG, task

    from asgard_airflow.topology import analyze_dag

    with DAG("literal_and_merge", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
        @task
        def load(i: int) -> bytes:
            return b""

        @task
        def left() -> int:
            return 1

        @task
        def right() -> int:
            return 2

        @task
        def merge(parts: list, everything) -> int:
            return 0

        merge([left(), right()], load.expand(i=[1, 2, 3, 4, 5]))
    assert stages_of(analyze_dag(dag)) == {
        ("load", "return_value"): ("fanin", 5, 5, ["merge"]),  # a literal list of 5: its own degree
        ("left+right", "*"): ("fanin", 2, 2, ["merge"]),
    }


def test_timetable_ticks_over_the_window():
    from airflow.sdk import DAG

    from asgard_airflow.upcoming import timetable_runs

    now, window = pendulum.datetime(2026, 3, 1, 12, 5), dt.timedelta(minutes=30)
    every_10 = DAG("every_10", schedule="*/10 * * * *", start_date=pendulum.datetime(2026, 1, 1))
    assert timetable_runs(every_10, now, window) == [pendulum.datetime(2026, 3, 1, 12, m) for m in (10, 20, 30)]
    ended = DAG("ended", schedule="*/10 * * * *", start_date=pendulum.datetime(2026, 1, 1),
                end_date=pendulum.datetime(2026, 3, 1, 12, 15))
    assert timetable_runs(ended, now, window) == [pendulum.datetime(2026, 3, 1, 12, 10)]
    later = DAG("later", schedule="@hourly", start_date=pendulum.datetime(2026, 3, 1, 12, 30))
    assert timetable_runs(later, now, dt.timedelta(hours=2)) == [pendulum.datetime(2026, 3, 1, 13),
                                                                 pendulum.datetime(2026, 3, 1, 14)]
    assert timetable_runs(DAG("manual", schedule=None, start_date=pendulum.datetime(2026, 1, 1)), now, window) == []


@pytest.fixture(scope="module")
def home(tmp_path_factory, cassandra_node):
    home = make_home(tmp_path_factory.mktemp("airflow_tuning"))
    # one successful run of word count: the history the analyzer sizes it by
    rc, out, run_id = dags_test(home, "asgard_word_count", {"fanout": 3, "scale": 0.1})
    assert rc == 0, out[-5000:]
    home["word_count_run"] = run_id
    out = airflow(home["env"], "dags", "reserialize")
    assert out.returncode == 0, out.stderr[-3000:]
    # queued runs (no scheduler runs here: they stay queued), and a paused DAG on a timetable
    for dag_id in ("asgard_word_count", "asgard_word_count", "asgard_lightgbm_forest"):
        out = airflow(home["env"], "dags", "trigger", dag_id)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    out = airflow(home["env"], "dags", "pause", "asgard_every_10")
    assert out.returncode == 0, out.stderr[-3000:]
    yield home
    purge(home)  # the stored values go with the suite


def db_reader_mix(home) -> dict:
    code = ("import json, runpy\nfrom asgard_airflow.upcoming import DBReader, upcoming_runs\n"
            f"dags = runpy.run_path({str(DAGS / 'asgard_apps.py')!r})['watched']\n"
            "print(json.dumps(upcoming_runs(dags, DBReader()).as_dict(), sort_keys=True))")
    out = subprocess.run([sys.executable, "-c", code], env=home["env"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_upcoming_runs_from_the_metadata_database_and_from_a_task(home):
    expected = {"counts": {"asgard_lightgbm_forest": 1, "asgard_word_count": 2},
                "queued": {"asgard_lightgbm_forest": 1, "asgard_video_analytics": 0, "asgard_word_count": 2},
                "scheduled": {"asgard_lightgbm_forest": 0, "asgard_video_analytics": 0, "asgard_word_count": 0},
                "paused": ["asgard_every_10"]}
    assert db_reader_mix(home) == expected
    # the same through the Task SDK, inside a task (Airflow 3 tasks have no database access)
    rc, out, _ = dags_test(home, "asgard_upcoming_probe")
    assert rc == 0, out[-5000:]
    assert printed(out, "ASGARD-UPCOMING") == expected
    history = printed(out, "ASGARD-HISTORY")
    assert history["run_id"] == home["word_count_run"] and history["durations"] == 1
    # the rows the DAG's edges read: split_corpus (1, the reference), map_words part_0/part_1 x 3, 2 reducers
    assert history["rows"] == 1 + 6 + 2

    out = airflow(home["env"], "dags", "unpause", "asgard_every_10")
    assert out.returncode == 0, out.stderr[-3000:]
    try:
        mix = db_reader_mix(home)  # */10 over the next 30 minutes: 3 ticks, whenever now is
        assert mix["scheduled"]["asgard_every_10"] == 3 and mix["counts"]["asgard_every_10"] == 3
        assert mix["paused"] == []
    finally:
        airflow(home["env"], "dags", "pause", "asgard_every_10")


def printed(out: str, marker: str) -> dict:
    """The JSON a task printed after ``marker`` (the log line goes on after it)."""
    text = out[out.index(marker + " ") + len(marker) + 1:]
    return json.JSONDecoder().raw_decode(text)[0]


DRY = {"apply": False, "evaluations": 60, "probe_seconds": 0}


def test_retune_dag_dry_run_records_its_decision(home, cassandra_node):
    rc, out, run_id = dags_test(home, "asgard_retune_test", DRY)
    assert rc == 0, out[-6000:]
    rows = xcom_rows(home, "asgard_retune_test", run_id)
    plan = rows[("plan_workload", -1, "return_value")]
    assert plan["counts"] == {"asgard_lightgbm_forest": 1, "asgard_word_count": 2}
    # word count sized by its last successful run's references (read through the Task SDK)
    ref = xcom_rows(home, "asgard_word_count", home["word_count_run"])[("split_corpus", -1, "return_value")]
    assert is_reference(ref)
    analysis = plan["dags"]["asgard_word_count"]
    assert analysis["sized_by_run"] == home["word_count_run"]
    split = next(s for s in analysis["stages"] if s["producer"] == "split_corpus")
    assert (split["kind"], split["writes"], split["reads"]) == ("scatter", 3, 3)
    assert split["object_bytes"] == sorted(ref["item_bytes"])[1]  # the median of 3
    assert plan["dags"]["asgard_lightgbm_forest"]["sized_by_run"] is None  # never ran: default sizes
    assert plan["job"] in plan["dags"] and plan["stages"] == plan["dags"][plan["job"]]["stages"]
    outcome = rows[("reconfigure", -1, "return_value")]
    assert not is_reference(outcome)  # a small dict: in Airflow's own row, readable in the XCom tab
    decision = outcome["decision"]
    assert isinstance(decision["reconfigure"], bool) and decision["reason"]
    assert outcome["dry_run"] is True and outcome["applied"] is None and outcome["ring"] == ["127.0.0.1"]
    assert {"benefit_ops", "cost_ops", "lookahead_s"} <= set(decision)
    assert f"decision: {'reconfigure' if decision['reconfigure'] else 'keep'}: {decision['reason']}" in out
    rendered = query(home, "SELECT rendered_fields FROM rendered_task_instance_fields WHERE dag_id = ? AND run_id = ? "
                     "AND task_id = 'decision_report'", "asgard_retune_test", run_id)
    summary = json.loads(rendered[0][0])["summary"]
    assert summary.startswith("### asgard retune: ") and decision["reason"] in summary
    cursor = airflow(home["env"], "variables", "get", "asgard_retune_cursor__asgard_retune_test")
    assert cursor.returncode == 0, cursor.stderr[-2000:]
    assert json.loads(cursor.stdout.strip().splitlines()[-1]) == ["asgard_lightgbm_forest", "asgard_word_count"]

    # the same mix again: the cursor short-circuits the run
    rc, out, run_id = dags_test(home, "asgard_retune_test", DRY)
    assert rc == 0, out[-6000:]
    states = dict(query(home, "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
                        "asgard_retune_test", run_id))
    assert states == {"watch_upcoming": "success", "plan_workload": "skipped", "recommend_configuration": "skipped",
                      "reconfigure": "skipped", "decision_report": "skipped"}


def test_the_retune_dags_model_path_is_read_from_asgard_settings_when_a_task_runs(monkeypatch, tmp_path):
    from pathlib import Path

    from asgard.tuner.dataset import DEFAULT_MODEL
    from asgard_airflow.retune import configured_model_path

    monkeypatch.delenv("AIRFLOW__ASGARD__MODEL_PATH", raising=False)
    assert configured_model_path() == DEFAULT_MODEL
    monkeypatch.setenv("AIRFLOW__ASGARD__MODEL_PATH", str(tmp_path / "mine.json"))  # after the import: read lazily
    assert configured_model_path() == tmp_path / "mine.json"
    assert configured_model_path("/where/the/dag/says.json") == Path("/where/the/dag/says.json")


def test_retune_dag_loads_the_model_asgard_model_path_names(home, tmp_path):
    """``[asgard] model_path`` reaches the tasks: a copy of the shipped model that claims a 1000%
    error keeps no knob of the search's pick; a pickle there is refused, never unpickled."""
    import pickle
    import shutil

    from asgard.tuner.dataset import DEFAULT_MODEL

    doc = json.loads(DEFAULT_MODEL.read_text())
    shutil.copy(DEFAULT_MODEL.parent / doc["weights"], tmp_path / doc["weights"])
    (tmp_path / "unsure.json").write_text(json.dumps({**doc, "heldout_error_pct": 1000.0}))
    unsure = {**home, "env": {**home["env"], "AIRFLOW__ASGARD__MODEL_PATH": str(tmp_path / "unsure.json")}}
    rc, out, run_id = dags_test(unsure, "asgard_retune_test", {**DRY, "always": True})
    assert rc == 0, out[-6000:]
    search = xcom_rows(home, "asgard_retune_test", run_id)[("recommend_configuration", -1, "return_value")]["search"]
    assert search["config"] == {} and search["dropped"]

    marker = tmp_path / "unpickled"
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(_Hostile(marker), protocol=4))
    old = {**home, "env": {**home["env"], "AIRFLOW__ASGARD__MODEL_PATH": str(tmp_path / "model.pkl")}}
    rc, out, run_id = dags_test(old, "asgard_retune_test", {**DRY, "always": True})
    states = dict(query(home, "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
                        "asgard_retune_test", run_id))
    assert states["recommend_configuration"] == "failed" and states["reconfigure"] == "upstream_failed", states
    assert "PickledModelError" in out and "asgard tune fit --out" in out and not marker.exists()


class _Hostile:
    """Unpickling this creates a file: what an attacker's pickle could do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        from pathlib import Path

        return (Path.touch, (Path(self.marker),))
