"""A task's own choices for its values (``params={"asgard": {...}}``, asgard_airflow/task_settings.py):
they win over ``[asgard]`` in real ``airflow dags test`` runs against the local Cassandra node, the
XCom reference and the Rendered Template say so, and a producer-local its readers cannot use fails
the push (or the DAG file's check) with a typed error before anything is written."""
from __future__ import annotations

import json

import pendulum
import pytest

from asgard.resources.stores.registry import open_store

from .airflow_support import REPO, airflow, dags_test, make_home, purge, rendered_fields, xcom_rows

KEYSPACE = "asgard_airflow_test"
DAGS = str(REPO / "tests" / "airflow_dags")


def _home(tmp_path, **extra):
    return make_home(tmp_path / "airflow_home", AIRFLOW__CORE__DAGS_FOLDER=DAGS, AIRFLOW__ASGARD__KEYSPACE=KEYSPACE,
                     ASGARD_HOME=str(tmp_path / "host"), **extra)


def test_a_tasks_own_choices_win_over_the_settings_and_say_so(cassandra_node, tmp_path):
    home = _home(tmp_path, AIRFLOW__ASGARD__CODEC="lz4", AIRFLOW__ASGARD__PLACEMENT="producer-local")
    try:
        code, text, run_id = dags_test(home, "asgard_task_settings")
        assert code == 0 and "ASGARD-CHECK task settings ok" in text and "ASGARD-CHECK pinned ok" in text, text[-5000:]
        refs = xcom_rows(home, "asgard_task_settings", run_id)
        chosen, plain, pinned = (refs[(t, -1, "return_value")] for t in ("chosen", "plain", "pinned"))
        # its params: zstd in the ring, over [asgard] codec = lz4 and placement = producer-local
        assert (chosen["codec"], chosen["placement"]) == ("zstd", "ring"), chosen
        assert "params['asgard'] placement = ring" in chosen["placement_reason"], chosen
        assert chosen["stored_bytes"] < chosen["bytes"] / 2, chosen  # an arange compresses: zstd did store it
        # no params: the settings
        assert (plain["codec"], plain["placement"]) == ("lz4", "producer-local"), plain
        assert plain["placement_reason"] == "the store's placement setting", plain
        assert pinned["placement"] == "producer-local" and "params['asgard']" in pinned["placement_reason"], pinned
        rendered = rendered_fields(home, "asgard_task_settings", run_id)
        assert "codec zstd; placement ring | codec: params['asgard'] codec = zstd; placement: chosen by the caller " \
               "(the task's params['asgard'] placement = ring) |" in rendered["chosen"]["asgard_edges"], rendered
        assert "codec lz4; placement producer-local | codec: [asgard] codec = lz4; placement: the store's " \
               "placement setting |" in rendered["plain"]["asgard_edges"], rendered
        # the ring holds each whole, read as any value
        ring = open_store("cassandra", keyspace=KEYSPACE, local_reads=False)
        assert {f"{t}/-1/return_value" for t in ("chosen", "plain", "pinned")} <= \
            {p.rsplit("/", 1)[0] for p in ring.list_paths(chosen["scope"])}
    finally:
        purge(home)


def test_a_producer_local_its_readers_on_other_hosts_cannot_use_fails_before_anything_is_written(cassandra_node,
                                                                                             tmp_path):
    """The CeleryExecutor routes ``pinned`` to queue asgard-h1 and its reader to asgard-h2: the
    push fails typed; the tasks that chose nothing of the kind run through."""
    home = _home(tmp_path, AIRFLOW__CORE__EXECUTOR="CeleryExecutor")
    try:
        code, text, run_id = dags_test(home, "asgard_task_settings")
        assert code != 0 or "failed" in text.lower(), text[-5000:]
        assert "XComPlacementCannotServeError" in text, text[-5000:]
        assert "task 'pinned' of DAG 'asgard_task_settings' is placed producer-local (params['asgard'] placement = " \
               "producer-local), which cannot serve: the CeleryExecutor routes pinned to queue 'asgard-h1' but far " \
               "to 'asgard-h2'" in text, text[-5000:]
        assert "ASGARD-CHECK task settings ok" in text, text[-5000:]
        refs = xcom_rows(home, "asgard_task_settings", run_id)
        assert ("pinned", -1, "return_value") not in refs and ("chosen", -1, "return_value") in refs, refs
        ring = open_store("cassandra", keyspace=KEYSPACE, local_reads=False)
        stored = ring.list_paths(refs[("chosen", -1, "return_value")]["scope"])
        assert stored and not [p for p in stored if p.startswith("pinned/")], stored
    finally:
        purge(home)


def test_as_the_cluster_policy_a_dag_that_cannot_be_served_fails_to_load(cassandra_node, tmp_path):
    """``asgard_airflow.task_settings.dag_policy`` in the deployment's airflow_local_settings.py:
    the DAG is an import error naming the task and why, and no task of it runs."""
    (tmp_path / "airflow_home" / "config").mkdir(parents=True)
    (tmp_path / "airflow_home" / "config" / "airflow_local_settings.py").write_text(
        "from asgard_airflow.task_settings import dag_policy  # noqa: F401\n")
    home = _home(tmp_path, AIRFLOW__CORE__EXECUTOR="CeleryExecutor")
    out = airflow(home["env"], "dags", "list-import-errors", "--local", "--output", "json")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]  # 1: there are import errors
    [error] = [e for e in _json_of(out.stdout) if e["filepath"].endswith("asgard_task_settings.py")]
    assert "XComPlacementCannotServeError" in error["error"] or "AirflowClusterPolicyError" in error["error"], error
    assert "task 'pinned' of DAG 'asgard_task_settings' is placed producer-local" in error["error"], error
    out = airflow(home["env"], "dags", "test", "asgard_task_settings")
    assert out.returncode != 0 and "ASGARD-CHECK" not in out.stdout + out.stderr, out.stdout[-3000:]
    # the DAGs whose settings serve still load
    out = airflow(home["env"], "dags", "list", "--local", "--output", "json")
    assert "asgard_big_small" in {d["dag_id"] for d in _json_of(out.stdout)}, out.stdout[-3000:]


def _json_of(stdout: str):
    """The CLI's ``--output json``: its last line (warnings are logged before it)."""
    return json.loads(stdout.strip().splitlines()[-1])


def _dag(queue_of_reader: str | None, own: dict | None, dag_params: dict | None = None):
    from airflow.sdk import DAG
    from airflow.providers.standard.operators.empty import EmptyOperator

    with DAG("asgard_own_settings", schedule=None, start_date=pendulum.datetime(2026, 1, 1),
             params=dag_params or {}) as dag:
        produce = EmptyOperator(task_id="produce", queue="asgard-h1", params={"asgard": own} if own else None)
        produce >> EmptyOperator(task_id="read", **({"queue": queue_of_reader} if queue_of_reader else {}))
    return dag


@pytest.mark.fast  # no server: definitions only
def test_a_dags_settings_are_checked_when_its_file_is_parsed(monkeypatch):
    from asgard_airflow.errors import XComBackendConfigError, XComPlacementCannotServeError, XComTaskSettingError
    from asgard_airflow.task_settings import TaskSettings, check_dag_settings, task_settings

    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    dag = _dag("asgard-h2", {"placement": "producer-local", "replicas": 1})
    assert task_settings(dag.get_task("produce")) == TaskSettings(placement="producer-local", replicas="1")
    with pytest.raises(XComPlacementCannotServeError) as caught:
        check_dag_settings(dag, placement="ring")
    error = caught.value
    assert isinstance(error, XComBackendConfigError)  # one base for a backend's configuration
    assert (error.dag_id, error.task_id, error.key, error.value) == ("asgard_own_settings", "produce", "placement",
                                                                    "producer-local")
    assert error.why == "the CeleryExecutor routes produce to queue 'asgard-h1' but read to 'asgard-h2'", error.why
    assert "same queue" in error.what_to_do and "(nothing was written)" in str(error)
    check_dag_settings(_dag("asgard-h1", {"placement": "producer-local"}), placement="ring")  # one host's queue
    # the setting's producer-local is checked for a task with none of its own; the task's own wins
    with pytest.raises(XComPlacementCannotServeError) as caught:
        check_dag_settings(_dag(None, None), placement="producer-local")
    assert caught.value.source == "[asgard] placement = producer-local" and "but read to 'default'" in caught.value.why
    check_dag_settings(_dag(None, {"placement": "ring"}), placement="producer-local")
    monkeypatch.setenv("AIRFLOW__ASGARD__PLACEMENT", "producer-local")  # not given: the [asgard] option
    with pytest.raises(XComPlacementCannotServeError):
        check_dag_settings(_dag(None, None))
    monkeypatch.delenv("AIRFLOW__ASGARD__PLACEMENT")
    check_dag_settings(_dag(None, None))  # the declared default, ring
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")  # one host runs them all
    check_dag_settings(_dag("asgard-h2", {"placement": "producer-local"}), placement="ring")
    # a DAG's params apply to each task that sets none
    dag = _dag(None, None, dag_params={"asgard": {"codec": "blosc-lz4"}})
    assert task_settings(dag.get_task("read")).codec == "blosc-lz4"
    # values an option cannot take, and options there are not
    for own, key, allowed in (({"codec": "gzip"}, "codec", "zstd"), ({"replicas": 2}, "replicas", "auto"),
                              ({"placement": "nearby"}, "placement", "producer-local"),
                              ({"chunk_size": 1}, "chunk_size", "codec, placement, replicas")):
        with pytest.raises(XComTaskSettingError) as caught:
            check_dag_settings(_dag(None, own), placement="ring")
        error = caught.value
        assert (error.task_id, error.key, error.value) == ("produce", key, own[key]), error
        assert allowed in str(error.allowed) and "params['asgard']" in str(error), error
