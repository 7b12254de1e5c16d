"""The jobs' forkserver preloads what a step's process imports: Dagster's instance storages, every
backend's IO manager and store, the ops' libraries. A step that imported them after the fork paid
about 0.8 s of launch each (docs/results/issue37-step-launch.txt). Real runs on the suite's
Cassandra and MinIO, with an audit hook in the forkserver recording each step's imports."""
from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PRELOAD_MODULE = TESTS.parent / "pipelines" / "forkserver_preload.py"

RUNS = """
import tempfile
import dagster as dg
import asgard.pipelines.jobs as jobs
jobs.PRELOAD.append("step_import_audit")  # the forkserver starts with the first run: before it
if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp, dg.DagsterInstance.local_temp(tempdir=tmp) as instance:
        for app, backend in [("etl_columnar", "cassandra"), ("etl_columnar", "s3_stock"), ("log_analytics", "cassandra"),
                             ("word_count", "cassandra")]:
            run = jobs.run_app(app, backend, instance=instance, **jobs.SMALL[app])
            assert run.success, (app, backend)
"""


def _third_party_or_project(name: str) -> bool:
    """A module outside the standard library that is installed (a failed optional import costs a lookup)."""
    if name.split(".")[0] in sys.stdlib_module_names:
        return False
    try:
        return find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def test_a_steps_process_imports_no_library_the_forkserver_has_not(cassandra_node, minio_server, tmp_path):
    audit = tmp_path / "imports"
    audit.mkdir()
    env = {**os.environ, "STEP_IMPORT_AUDIT_DIR": str(audit),
           "PYTHONPATH": os.pathsep.join([str(TESTS)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    script = tmp_path / "runs.py"
    script.write_text(RUNS)
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    steps = sorted(audit.iterdir())
    assert len(steps) >= 2 * 11, [p.name for p in steps]  # the ETL's 11 steps twice, word count's
    late: dict[str, set[str]] = {}  # a package's modules imported after the fork: in how many steps
    for p in steps:
        for name in set(p.read_text().split()):
            if _third_party_or_project(name):
                late.setdefault(name.split(".")[0], set()).add(p.name)
    assert not late, ("imported in steps' processes after the fork, add them to pipelines/forkserver_preload.py: "
                      + ", ".join(f"{package} ({len(pids)} of {len(steps)} steps)" for package, pids in sorted(late.items())))


#: the Airflow workers' preload on the emulated hosts (resources/workers/airflow_worker.py), the same kind of list
AIRFLOW_PRELOAD_MODULE = TESTS.parent / "pipelines" / "airflow_task_preload.py"


def _named(path: Path) -> list[tuple[str, str]]:
    return [(path.name, alias.name) for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Import)
            for alias in node.names]


@pytest.mark.fast
@pytest.mark.parametrize("preload, module", sorted(_named(PRELOAD_MODULE) + _named(AIRFLOW_PRELOAD_MODULE)))
def test_each_module_the_preload_names_is_still_there(preload, module):
    """The forkserver skips a preload module that fails to import, silently, and every step would import
    its rest again; an Airflow worker whose preload fails does not start. Each name (Dagster's and
    Airflow's private modules among them) is checked here, by name."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"{module} (pipelines/{preload}) is gone from the installed release: re-check what a step's or a "
                    f"task's process imports (tests/test_forkserver_preload.py, tests/test_celery_hosts.py say which) "
                    f"and update the list ({exc})")


@pytest.mark.fast
def test_the_private_names_the_suites_forkserver_restart_uses_are_there():
    """tests/forkserver_steps.py stops Python's forkserver through private names (it has no public stop)."""
    import multiprocessing.forkserver as forkserver

    server = forkserver._forkserver
    assert isinstance(server, forkserver.ForkServer) and callable(server._stop) and callable(server.ensure_running)
    assert hasattr(server, "_forkserver_pid")


ENV_RUNS = """
import os
from dagster import DagsterInstance, execute_job, reconstructable
from tests.forkserver_steps import forkserver_with_this_environment, stop_forkserver
import multiprocessing.forkserver as fs
from tests.forkserver_env_job import env_job
if __name__ == "__main__":
    seen, servers = [], []
    with DagsterInstance.local_temp() as instance:
        for value in ("one", "one", "two"):
            os.environ["ASGARD_FORKED_STEP_PROBE"] = value
            forkserver_with_this_environment()
            servers.append(fs._forkserver._forkserver_pid)
            with execute_job(reconstructable(env_job), instance=instance) as result:
                assert result.success
                seen.append(result.output_for_node("probe"))
        stop_forkserver()
        servers.append(fs._forkserver._forkserver_pid)
    print("SEEN", seen, "SAME", servers[0] == servers[1], "NEW", servers[1] != servers[2], "STOPPED", servers[3] is None)
"""


def test_a_forked_step_sees_the_environment_its_run_started_under(tmp_path):
    """A forkserver keeps the environment it started with; the suite's helper starts another when a run's
    differs, so a test that sets a variable for its runs reaches their steps (a real run, forked steps)."""
    script = tmp_path / "env_runs.py"
    script.write_text(ENV_RUNS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    line = next(l for l in out.stdout.splitlines() if l.startswith("SEEN"))
    assert line == "SEEN ['one', 'one', 'two'] SAME True NEW True STOPPED True", line
