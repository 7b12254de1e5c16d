"""Airflow for real: ``airflow standalone`` (scheduler, DAG processor, triggerer, API server;
LocalExecutor: every task in its own process, reaching the metadata only through the API server)
in a temporary AIRFLOW_HOME on a free port. A seed app DAG triggered through the CLI runs to
success through the Cassandra XCom backend; the upcoming-runs probe runs inside a supervised task
(the Task SDK reader, no database access); and Airflow's UI, opened in Debian's Chromium headless,
shows a task's XCom tab with the reference (screenshot ``reports/ui/airflow_xcom.png``;
``ASGARD_UI_SCREENSHOTS=docs/ui`` writes it there)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from .browser import headless_chromium
from .airflow_support import BIN, airflow, is_reference, make_home, purge, query, xcom_rows

pytestmark = pytest.mark.timeout(1200)

ROOT = Path(__file__).resolve().parent.parent
SHOTS = Path(os.environ.get("ASGARD_UI_SCREENSHOTS", ROOT / "reports" / "ui"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory, cassandra_node):
    """``airflow standalone`` on a free port; its whole process group is killed afterwards."""
    import psutil

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    home = make_home(tmp_path_factory.mktemp("airflow_standalone"), **{
        "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__BASE_URL": base,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base}/execution/",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",  # no login page in front of the UI
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2", "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "AIRFLOW__API__WORKERS": "1",
        # every DAG starts paused: the scheduler runs only what a test unpauses (never a retune)
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        # standalone starts its components as `airflow ...` from PATH: this environment's
        "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")])})
    log = (home["home"] / "standalone.log").open("w")
    proc = subprocess.Popen([str(BIN / "airflow"), "standalone"], env=home["env"], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    seen: dict = {}
    try:
        deadline = time.monotonic() + 240
        while True:
            text = (home["home"] / "standalone.log").read_text()
            assert proc.poll() is None and "Exception in thread" not in text, text[-4000:]
            try:
                with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=5) as r:
                    health = json.load(r)
                if health.get("scheduler", {}).get("status") == "healthy":
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"no healthy Airflow on {base}:\n{text[-4000:]}"
            time.sleep(3)
        home.update(url=base, remember=lambda: seen.update(
            {p.pid: p for p in psutil.Process(proc.pid).children(recursive=True)}))
        yield home
    finally:
        try:
            seen.update({p.pid: p for p in psutil.Process(proc.pid).children(recursive=True)})
        except psutil.Error:
            pass
        def alive() -> list:
            out = []
            for p in seen.values():
                try:
                    if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                        out.append(p)
                except psutil.Error:
                    pass
            return out

        for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            for p in alive():
                try:
                    p.send_signal(sig)
                except psutil.Error:
                    pass
            deadline = time.monotonic() + grace
            while (proc.poll() is None or alive()) and time.monotonic() < deadline:
                time.sleep(0.5)
        log.close()
        purge(home)  # the stored values go with the suite
        left = alive()
        assert not left, f"airflow standalone left processes {[(p.pid, p.cmdline()) for p in left]}"


def trigger_and_wait(home: dict, dag_id: str, conf: dict | None = None, timeout: float = 600) -> str:
    """Trigger ``dag_id`` through the CLI once the DAG processor has it; wait for success: its run id."""
    deadline = time.monotonic() + 180
    while not query(home, "SELECT dag_id FROM dag WHERE dag_id = ?", dag_id):
        assert time.monotonic() < deadline, f"the DAG processor never parsed {dag_id}"
        time.sleep(3)
    run_id = f"asgard_test__{time.strftime('%Y%m%dT%H%M%S')}_{time.monotonic_ns() % 10**6}"
    for unpaused in (dag_id, "asgard_every_10"):  # the probe forecasts the timetable of a running DAG
        out = airflow(home["env"], "dags", "unpause", unpaused)
        assert out.returncode == 0, out.stderr[-3000:]
    args = ["dags", "trigger", dag_id, "--run-id", run_id] + (["-c", json.dumps(conf)] if conf else [])
    out = airflow(home["env"], *args)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    deadline = time.monotonic() + timeout
    while True:
        home["remember"]()
        state = query(home, "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", dag_id, run_id)[0][0]
        if state in ("success", "failed"):
            break
        assert time.monotonic() < deadline, f"{dag_id} run {run_id} still {state} after {timeout} s"
        time.sleep(3)
    tis = query(home, "SELECT task_id, map_index, state, pid FROM task_instance WHERE dag_id = ? AND run_id = ?",
                dag_id, run_id)
    assert state == "success", tis
    return run_id


def test_word_count_runs_under_the_scheduler_with_tasks_in_their_own_processes(standalone):
    from asgard.pipelines.word_count import reference_counts
    from asgard.resources.stores.base import ObjectKey
    from asgard.resources.stores.registry import open_store

    run_id = trigger_and_wait(standalone, "asgard_word_count", {"fanout": 2, "scale": 0.05})
    pids = {pid for _, _, _, pid in query(standalone, "SELECT task_id, map_index, state, pid FROM task_instance "
                                                        "WHERE dag_id = 'asgard_word_count' AND run_id = ?", run_id)}
    assert len(pids) >= 5, pids  # split, 2 mappers, 2 reducers, merge: each task its own process
    rows = xcom_rows(standalone, "asgard_word_count", run_id)
    split = rows[("split_corpus", -1, "return_value")]
    assert is_reference(split) and split["items"] == 2  # the splits went through Cassandra
    result = rows[("merge_counts", -1, "return_value")]
    if is_reference(result):
        result, _ = open_store("cassandra", keyspace="asgard_airflow_tune_test").get(
            ObjectKey(result["scope"], result["path"]))
    assert result["counts"] == dict(reference_counts(0.05)) and result["n_mappers"] == 2
    standalone["word_count_run"] = run_id


def test_upcoming_runs_inside_a_supervised_task(standalone):
    """The Task SDK reader where a task has no database access (LocalExecutor's supervisor)."""
    run_id = trigger_and_wait(standalone, "asgard_upcoming_probe")
    probe = xcom_rows(standalone, "asgard_upcoming_probe", run_id)[("probe", -1, "return_value")]
    # paused, as created: the apps this test never unpaused; running: word count and every_10
    assert sorted(probe["paused"]) == ["asgard_lightgbm_forest", "asgard_video_analytics"]
    assert probe["scheduled"]["asgard_every_10"] == 3
    assert probe["queued"]["asgard_word_count"] == 0


def test_ui_xcom_tab_shows_the_reference(standalone):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    run_id = standalone.get("word_count_run") or trigger_and_wait(standalone, "asgard_word_count",
                                                                  {"fanout": 2, "scale": 0.05})
    ref = xcom_rows(standalone, "asgard_word_count", run_id)[("split_corpus", -1, "return_value")]
    assert is_reference(ref)
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver = headless_chromium()
    try:
        from urllib.parse import quote

        driver.get(f"{standalone['url']}/dags/asgard_word_count/runs/{quote(run_id)}/tasks/split_corpus/xcom")
        wanted = ("return_value", "__asgard_xcom__", ref["uri"].split("/")[-1])

        def shown(d) -> bool:
            if all(w in d.find_element(By.TAG_NAME, "body").text for w in wanted):
                return True
            # the value is a collapsed JSON tree: open it (the "expand all" button, else the row's toggle)
            for xpath in ("//button[@aria-label='Expand all extra JSON']", "//*[@aria-label='Expand']"):
                elements = d.find_elements(By.XPATH, xpath)
                for element in elements:
                    try:
                        element.click()
                    except Exception:  # stale or covered: the next poll tries again
                        pass
                if elements:
                    break
            return False

        try:
            WebDriverWait(driver, 120, poll_frequency=2).until(shown)
        except TimeoutException:
            driver.save_screenshot(str(SHOTS / "airflow_xcom_failed.png"))
            raise AssertionError(f"the XCom tab does not show {wanted}:\n"
                                 f"{driver.find_element(By.TAG_NAME, 'body').text[:3000]}") from None
        text = driver.find_element(By.TAG_NAME, "body").text
        assert ref["uri"] in text.replace("\n", "") or ref["scope"] in text, text[:3000]
        assert str(ref["bytes"]) in text.replace(",", ""), text[:3000]
        driver.save_screenshot(str(SHOTS / "airflow_xcom.png"))
        assert (SHOTS / "airflow_xcom.png").stat().st_size > 10_000
    finally:
        driver.quit()
