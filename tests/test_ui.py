"""The Dagster UI in a real browser: ``dagster dev`` on workspace.yaml, driven by Debian's
Chromium through Selenium and Debian's chromedriver (nothing downloads a browser or a driver).

The code location loads; the applications, the demo and the retune job are listed, and the
sensors and schedules, each stopped and saying how to turn it on; the demo launched from its
Launchpad succeeds and its outputs show where they are stored, their size in MiB and the write
speed among the first rows of the event log; the retune job's decision shows in its run.
Screenshots go to ``reports/ui/`` (git ignores it, so CI leaves the tree clean);
``ASGARD_UI_SCREENSHOTS=docs/ui`` refreshes the ones the README shows.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from .browser import headless_chromium

pytestmark = pytest.mark.timeout(900)

ROOT = Path(__file__).resolve().parent.parent
SHOTS = Path(os.environ.get("ASGARD_UI_SCREENSHOTS", ROOT / "reports" / "ui"))
LOCATION = "asgard"
APP_JOBS = ["video_analytics__cassandra", "lightgbm_forest__cassandra", "word_count__cassandra"]
DEMO, RETUNE = "fan_out_fan_in", "asgard_retune_cassandra"
SENSORS = ["asgard_purge_succeeded_runs", "asgard_upcoming_runs_sensor"]
SCHEDULES = [f"{j}_nightly" for j in APP_JOBS] + ["asgard_retune_schedule"]
# a dry run (apply: false): the decision is computed and shown, the shared node is not reconfigured
RETUNE_CONFIG = f"""ops:
  plan_workload:
    config:
      upcoming_jobs: [{DEMO}]
      apply: false
      evaluations: 200
      lookahead_seconds: 3600
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(base: str, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(f"{base}/graphql", data=json.dumps({"query": query, "variables": variables or {}})
                                     .encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        body = json.load(response)
    assert "errors" not in body, body
    return body["data"]


def _alive(processes) -> list:
    import psutil

    out = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def _group(pgid: int) -> list:
    """The processes of one process group (the dev server's session)."""
    import psutil

    members = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                members.append(p)
        except (OSError, psutil.Error):
            pass
    return members


def _stop_tree(proc: subprocess.Popen, descendants: list) -> list:
    """SIGTERM the dev server's process group and every descendant seen while it ran (a run
    worker may sit in a group of its own), SIGKILL whatever is left after a grace period; the
    group is SIGKILLed in any case, since shutting down, dagster dev may restart its code server.
    The processes still alive after that."""
    import psutil

    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        targets = {p.pid: p for p in [*descendants, *_group(proc.pid)]}
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        for p in _alive(targets.values()):
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        deadline = time.monotonic() + grace
        while _alive(targets.values()) and time.monotonic() < deadline:
            time.sleep(0.5)
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    return _alive([*descendants, *_group(proc.pid)])


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory, cassandra_node):
    """``dagster dev -w workspace.yaml`` (webserver, daemon, code server) on a free port, with a
    DAGSTER_HOME of its own; its whole process tree is gone afterwards."""
    import psutil

    home = tmp_path_factory.mktemp("dagster_home")
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DAGSTER_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    log = (home / "dagster-dev.log").open("w")
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.Popen([str(dagster), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    descendants: dict[int, psutil.Process] = {}
    try:
        deadline = time.monotonic() + 180  # a cold start imports torch and the apps: slow on a busy machine
        while True:
            assert proc.poll() is None, f"dagster dev exited {proc.returncode}:\n{(home / 'dagster-dev.log').read_text()[-4000:]}"
            try:
                with urllib.request.urlopen(f"{base}/server_info", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"no webserver on {base}:\n{(home / 'dagster-dev.log').read_text()[-4000:]}"
            time.sleep(2)
        # the "join the community" dialog a local UI opens once would cover the buttons we click
        _graphql(base, "mutation { setNuxSeen }")
        yield {"url": base, "home": home, "remember": lambda: descendants.update(
            {p.pid: p for p in psutil.Process(proc.pid).children(recursive=True)})}
    finally:
        try:
            descendants.update({p.pid: p for p in psutil.Process(proc.pid).children(recursive=True)})
        except psutil.Error:
            pass
        left = _stop_tree(proc, list(descendants.values()))
        log.close()
        assert not left, f"dagster dev left processes {[(p.pid, p.cmdline()) for p in left]}"


@pytest.fixture(scope="module")
def browser():
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver = headless_chromium()
    try:
        yield driver
    finally:
        driver.quit()


def body_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def wait_for(driver, *texts: str, timeout: float = 120) -> str:
    """Wait until every one of ``texts`` is visible on the page; the page's text."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, timeout, poll_frequency=1).until(lambda d: all(t in body_text(d) for t in texts))
    except TimeoutException:
        shown = body_text(driver)
        raise AssertionError(f"{[t for t in texts if t not in shown]} not shown at {driver.current_url} after "
                             f"{timeout} s; the page shows:\n{shown[:3000]}") from None
    return body_text(driver)


def open_page(driver, dev, path: str, *texts: str, timeout: float = 120) -> str:
    driver.get(dev["url"] + path)
    return wait_for(driver, *texts, timeout=timeout)


def shot(driver, name: str) -> None:
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def launch_and_wait(driver, dev, timeout: float = 600) -> str:
    """Click the Launchpad's Launch Run; wait for the run page to show a finished status. The run id."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 60).until(EC.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Launch Run']"))).click()
    WebDriverWait(driver, 120).until(lambda d: re.search(r"/runs/[0-9a-f-]{36}", d.current_url))
    run_id = re.search(r"/runs/([0-9a-f-]{36})", driver.current_url).group(1)

    def finished(d) -> bool:
        dev["remember"]()  # the run's worker processes, for the teardown
        return any(s in body_text(d) for s in ("Success", "Failure", "Canceled"))

    WebDriverWait(driver, timeout, poll_frequency=2).until(finished)
    status = _graphql(dev["url"], 'query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }',
                      {"id": run_id})["runOrError"]["status"]
    assert status == "SUCCESS", f"run {run_id} ended {status}:\n{body_text(driver)[-3000:]}"
    assert "Success" in body_text(driver)
    return run_id


def test_code_location_loads(dagster_dev, browser):
    text = open_page(browser, dagster_dev, "/locations", LOCATION, "Loaded", timeout=240)
    assert "asgard.pipelines.definitions" in text
    assert not any(s in text for s in ("Failed", "Error")), text
    shot(browser, "locations")


def test_jobs_list_the_applications_the_demo_and_the_retune_job(dagster_dev, browser):
    open_page(browser, dagster_dev, "/jobs", *APP_JOBS, DEMO, RETUNE)
    shot(browser, "jobs")


def test_sensors_and_schedules_are_listed_stopped_and_say_how_to_start(dagster_dev, browser):
    from selenium.webdriver.common.by import By

    open_page(browser, dagster_dev, "/automation", *SENSORS, *SCHEDULES, "Run status sensor", "Every 30 minutes")
    shot(browser, "automation")
    for kind, names in (("sensor", SENSORS), ("schedule", SCHEDULES)):
        for name in names:
            text = open_page(browser, dagster_dev, f"/locations/{LOCATION}/{kind}s/{name}", "Description", "Starts stopped")
            assert f"dagster {kind} start {name}" in text
            switches = browser.find_elements(By.XPATH, "//input[@type='checkbox']")
            assert switches and not any(s.is_selected() for s in switches), f"{name} is on"
            if name == SENSORS[0]:
                shot(browser, "sensor")  # the purge sensor's description and its switch, off


def test_demo_from_the_launchpad_succeeds_and_shows_where_its_outputs_are(dagster_dev, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    # the Launchpad opens with the demo's default config (4 chunks of 8 MiB), which is valid as it is
    open_page(browser, dagster_dev, f"/locations/{LOCATION}/jobs/{DEMO}/playground", "chunk_mib: 8", "No errors", "Launch Run")
    shot(browser, "launchpad")
    run_id = launch_and_wait(browser, dagster_dev)

    text = open_page(browser, dagster_dev, f"/runs/{run_id}?" + _logs("step:make_chunks", "type:HANDLED_OUTPUT"),
                     "HANDLED_OUTPUT", f"cassandra://127.0.0.1:9042/asgard.objects/run/{run_id}/make_chunks/result/chunk_0")
    # each output's rows before the fold ("View full message"): the URI, then MiB and MB/s
    folded = [t.split("View full message")[0] for t in text.split('Handled output "result"')[1:]]
    assert len(folded) == 4, text
    for rows in folded:
        assert re.search(r"dagster/uri\s+cassandra://\S+/make_chunks/result/chunk_\d", rows), rows
        assert re.search(r"size_mib\s+8\n", rows), rows  # 8 MiB of float64 and a pickle header of 121 bytes
        speed = re.search(r"write_mb_s\s+([\d.]+)", rows)
        assert speed and float(speed.group(1)) > 0, rows
        assert rows.index("dagster/uri") < rows.index("size_mib") < rows.index("write_mb_s")
    shot(browser, "demo_run")

    # the whole of one output's metadata
    browser.find_elements(By.XPATH, "//button[normalize-space()='View full message']")[0].click()
    wait_for(browser, "python_type", "stored_bytes", "checksum", "numpy.ndarray")
    shot(browser, "demo_output_metadata")
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)


def test_retune_decision_shows_in_its_run(dagster_dev, browser):
    from dagster import DagsterEventType, DagsterInstance

    # the Launchpad opened with this run config, as "Open in Launchpad" does
    open_page(browser, dagster_dev, f"/locations/{LOCATION}/jobs/{RETUNE}/playground/setup?"
              + urllib.parse.urlencode({"config": RETUNE_CONFIG}), "apply: false", "Launch Run")
    run_id = launch_and_wait(browser, dagster_dev)
    text = open_page(browser, dagster_dev, f"/runs/{run_id}?" + _logs("step:reconfigure", "type:STEP_OUTPUT"),
                     "STEP_OUTPUT", "reconfigure", "reason", "benefit", "cost", "restart_source")

    # what the UI shows is the decision the run recorded
    with DagsterInstance.from_ref(_instance_ref(dagster_dev["home"])) as instance:
        records = instance.get_records_for_run(run_id, of_type=DagsterEventType.STEP_OUTPUT).records
    decision = next(r.event_log_entry.dagster_event.event_specific_data.metadata for r in records
                    if r.event_log_entry.step_key == "reconfigure")
    assert f"reason {decision['reason'].value}" in text
    assert f"reconfigure {str(decision['reconfigure'].value).lower()}" in text
    assert re.search(rf"benefit\s+{re.escape(_shown(decision['benefit'].value))}\n", text), text
    shot(browser, "retune_decision")


def test_runs_and_overview_show_both_runs(dagster_dev, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    text = open_page(browser, dagster_dev, "/runs", DEMO, RETUNE)
    assert text.count("Success") >= 2, text
    shot(browser, "runs")
    open_page(browser, dagster_dev, "/overview", DEMO, RETUNE, "1hr")
    browser.find_element(By.XPATH, "//button[normalize-space()='1hr']").click()  # the runs are minutes long
    WebDriverWait(browser, 60).until(lambda d: "Refreshing data" not in body_text(d))
    shot(browser, "overview")


def _logs(*tokens: str) -> str:
    """The run page's event-log filter as its URL carries it (tokens joined by '|')."""
    return urllib.parse.urlencode({"logs": "|".join(tokens)})


def _instance_ref(home: Path):
    from dagster._core.instance.ref import InstanceRef

    return InstanceRef.from_dir(str(home))


def _shown(value: float) -> str:
    """A float as the UI prints it (JavaScript's shortest form: 3.0 is 3)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
