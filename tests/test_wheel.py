"""The distribution as a user installs it: the wheel, with its own dependencies (uv resolves them),
in fresh virtual environments outside the repository that borrow nothing from the project's, used
from a folder with the user's own ``resources.py`` and ``pipelines/`` (common names in Dagster
projects) against the real node:

* ``asgard-dagster[dagster,airflow,retune]``: a Dagster job through ``CassandraIOManager``, the retune
  job's dry run, a DAG through the XCom backend (``airflow dags test``), ``asgard tune recommend``;
* ``asgard-dagster[airflow,retune]`` (no Dagster there, and no torch: ``retune`` is what the retune
  DAG and ``asgard tune recommend`` need with the shipped LightGBM model, ``tune`` adds the fitting
  libraries): the DAG, the retune DAG's dry run, every module of the Airflow adapter, the client,
  the tuner and the CLI imported, ``asgard tune recommend``.

Each environment is installed once per module (``uv pip install``, PyPI and uv's cache: pip took
1-2.5 min and about 160 CPU-s an install here, uv 16-20 s and about 35 CPU-s, its bytecode compiled;
docs/results/ci-time.txt), and ``pip check``
checks it; the time of each install is printed in the terminal summary."""
from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
from uv import find_uv_bin

from .conftest import TEST_KEYSPACE

REPO = Path(__file__).resolve().parent.parent
INSTALL_TIMEOUT = 1200

USER_RESOURCES = "DATABASE_URL = 'the user own resources module'\n"
USER_STEPS = "def double(values):\n    return [2 * v for v in values]\n"

# the user's Dagster job (imported by the retune script too)
USER_JOB = textwrap.dedent('''
    import json, sys
    import resources                      # the user's own module, not the plugin's
    from pipelines.steps import double    # the user's own package
    import dagster as dg
    import asgard_dagster
    from asgard_dagster import CassandraIOManager, CassandraResource

    KEYSPACE = sys.argv[1]

    @dg.op
    def make():
        return list(range(1000))

    @dg.op
    def use(values):
        return double(values)

    @dg.job
    def user_job():
        use(make())

    def io_manager():
        return CassandraIOManager(cassandra=CassandraResource(contact_points=["127.0.0.1"], keyspace=KEYSPACE))

    if __name__ == "__main__":
        result = user_job.execute_in_process(resources={"io_manager": io_manager()},
                                             instance=dg.DagsterInstance.get())
        out = result.output_for_node("use")
        uris = [e.event_specific_data.metadata["dagster/uri"].value for e in result.all_events
                if e.event_type_value == "HANDLED_OUTPUT"]
        print(json.dumps({"success": result.success, "sum": sum(out), "user_resources": resources.__file__,
                          "plugin": asgard_dagster.__file__, "uris": uris}))
''')

# the retune job's dry run for the user's job, sized by the job's last run in the instance
USER_RETUNE = textwrap.dedent('''
    import json
    import dagster as dg
    from asgard_dagster import CassandraResource
    from asgard_dagster.retune import make_retune_job
    from user_job import KEYSPACE, io_manager, user_job

    instance = dg.DagsterInstance.get()
    assert user_job.execute_in_process(resources={"io_manager": io_manager()}, instance=instance).success
    retune = make_retune_job([user_job], connection=CassandraResource(contact_points=["127.0.0.1"], keyspace=KEYSPACE))
    config = {"upcoming_jobs": [user_job.name], "apply": False, "evaluations": 100, "lookahead_seconds": 3600,
              "probe_seconds": 0, "keyspace": KEYSPACE}
    result = retune.execute_in_process(run_config={"ops": {"plan_workload": {"config": config}}}, instance=instance)
    print(json.dumps({"success": result.success, "plan": result.output_for_node("plan_workload"),
                      "recommendation": result.output_for_node("recommend_configuration"),
                      "outcome": result.output_for_node("reconfigure")}, default=str))
''')

# the user's DAG (> the 64 KiB threshold from produce to check) and the retune DAG watching it
USER_DAGS = textwrap.dedent('''
    import pendulum
    from airflow.sdk import dag, task

    import resources                      # the user's own module (the DAGs folder is on sys.path)
    from pipelines.steps import double    # the user's own package
    from asgard_airflow.retune import make_retune_dag

    N = 20_000  # about 130 kB of JSON

    @dag(dag_id="user_xcom", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False)
    def user_xcom():
        @task
        def produce():
            return {"source": resources.DATABASE_URL, "values": double(list(range(N)))}

        @task
        def check(payload):
            assert payload["source"] == "the user own resources module", payload["source"]
            assert payload["values"] == [2 * v for v in range(N)]
            import asgard_airflow
            print(f"USER-CHECK ok n={len(payload['values'])} plugin={asgard_airflow.__file__}")
            return len(payload["values"])

        check(produce())

    watched = user_xcom()
    retune = make_retune_dag([watched], dag_id="user_retune", schedule=None)
''')

# every module of the Airflow adapter, the tuner, the client and the CLI, imported one by one
IMPORT_ALL = textwrap.dedent('''
    import importlib, json, pkgutil, sys, traceback
    failed = {}
    for root in sys.argv[1:]:
        names = [root]
        package = importlib.import_module(root)
        if hasattr(package, "__path__"):
            names += [m.name for m in pkgutil.walk_packages(package.__path__, root + ".")]
        for name in names:
            try:
                importlib.import_module(name)
            except BaseException as exc:
                failed[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"failed": failed, "dagster": sorted(m for m in sys.modules if m.split(".")[0] == "dagster")}))
''')

DRY_RETUNE = {"apply": False, "always": True, "evaluations": 60, "probe_seconds": 0}


# --- the wheel and the environments ------------------------------------------------------------

@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy of the tracked files: setuptools' build/ in the checkout could carry a
    # module the tree no longer has into the wheel
    source = tmp_path_factory.mktemp("source") / "asgard-dagster"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout.split(b"\0")
    for name in filter(None, (t.decode() for t in tracked)):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(source)], check=True, capture_output=True, text=True)
    (built,) = out.glob("asgard_dagster-*.whl")
    return built


def _clean_env(**extra: str) -> dict:
    """The caller's environment without anything that would reach into the repository or its venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "DAGSTER_HOME", "AIRFLOW_HOME")
           and not k.startswith(("AIRFLOW__", "ASGARD_CQL_"))}
    return {**env, **extra}


def _fresh_env(request, tmp_path_factory, wheel: Path, extras: str) -> dict:
    """A virtual environment outside the repository with the wheel and its own dependencies."""
    where = tmp_path_factory.mktemp(f"venv-{extras.replace(',', '-')}")
    env_dir = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    started = time.monotonic()
    # uv installs into the new environment (--python), from PyPI and uv's cache; no .pth, no
    # --no-deps: a dependency missing from the wheel's metadata fails here or below. Compiled as pip
    # does: with PYTHONDONTWRITEBYTECODE set nothing would, and each process would compile its imports
    out = subprocess.run([find_uv_bin(), "pip", "install", "--compile-bytecode", "--python", str(python),
                          f"{wheel}[{extras}]"],
                         env=_clean_env(), capture_output=True, text=True, timeout=INSTALL_TIMEOUT, cwd=where)
    seconds = time.monotonic() - started
    assert out.returncode == 0, f"uv pip install {wheel.name}[{extras}] failed:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    check = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "check"], env=_clean_env(),
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # nothing borrowed: no .pth into the repository, nothing of it on the environment's sys.path
    assert not [p.name for p in site.glob("*.pth") if str(REPO) in p.read_text()]
    path = json.loads(subprocess.run([str(python), "-c", "import json, sys; print(json.dumps(sys.path))"],
                                     check=True, capture_output=True, text=True, env=_clean_env(), cwd=where).stdout)
    assert not [p for p in path if p.startswith(str(REPO))], path
    _report(request, f"test_wheel: uv pip install {wheel.name}[{extras}] into a fresh venv: {seconds:.0f} s "
            f"({_size_mb(site)} MB)")
    return {"dir": env_dir, "bin": env_dir / "bin", "python": python, "site": site, "install_seconds": seconds}


def _size_mb(path: Path) -> int:
    out = subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True)
    return int(out.stdout.split()[0]) if out.returncode == 0 else -1


def _report(request, line: str) -> None:
    """A line in pytest's output now (past its capture), and again when the module's tests are done."""
    _INSTALLS.append(line)
    _write_lines(request, [line])


def _write_lines(request, lines: list[str]) -> None:
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.ensure_newline()
        for line in lines:
            reporter.write_line(line)


_INSTALLS: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _install_times(request):
    yield
    _write_lines(request, _INSTALLS)


@pytest.fixture(scope="module")
def full_env(request, tmp_path_factory, wheel):
    venv = _fresh_env(request, tmp_path_factory, wheel, "dagster,airflow,retune")
    yield venv
    shutil.rmtree(venv["dir"], ignore_errors=True)  # 0.8 GB: not kept in pytest's last 3 runs


@pytest.fixture(scope="module")
def airflow_env(request, tmp_path_factory, wheel):
    venv = _fresh_env(request, tmp_path_factory, wheel, "airflow,retune")
    yield venv
    shutil.rmtree(venv["dir"], ignore_errors=True)


@pytest.fixture(scope="module")
def user_project(tmp_path_factory) -> Path:
    """The user's folder: their own resources.py and pipelines/, a Dagster job, the DAGs."""
    project = tmp_path_factory.mktemp("user") / "user_project"
    (project / "pipelines").mkdir(parents=True)
    (project / "resources.py").write_text(USER_RESOURCES)
    (project / "pipelines" / "__init__.py").write_text("")
    (project / "pipelines" / "steps.py").write_text(USER_STEPS)
    (project / "user_job.py").write_text(USER_JOB)
    (project / "user_retune.py").write_text(USER_RETUNE)
    (project / "user_dags.py").write_text(USER_DAGS)
    return project


def _asgard_home() -> str:
    # the home the project's node was launched from: the installed `asgard` sees the node the user
    # started (`asgard cassandra up`), as the user's own install would
    from asgard.resources.paths import asgard_home

    return str(asgard_home())


def _run(venv: dict, args: list, cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**env, "PATH": f"{venv['bin']}{os.pathsep}{env.get('PATH', '')}"}
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _last_json(out: subprocess.CompletedProcess):
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- Airflow: one AIRFLOW_HOME per environment, the user's folder as the DAGs folder ------------

def _airflow_home(venv: dict, project: Path, home: Path) -> dict:
    env = _clean_env(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__XCOM_BACKEND="asgard_airflow.CassandraXComBackend",
        AIRFLOW__CORE__DAGS_FOLDER=str(project),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
        AIRFLOW__ASGARD__KEYSPACE=TEST_KEYSPACE,
        AIRFLOW__ASGARD__THRESHOLD_BYTES=str(64 * 1024),
        AIRFLOW__ASGARD__TTL_SECONDS="3600",
        ASGARD_HOME=_asgard_home(),
    )
    out = _run(venv, ["airflow", "db", "migrate"], project, env, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return {"home": home, "env": env, "db": home / "airflow.db", "venv": venv, "project": project}


def _dags_test(home: dict, dag_id: str, conf: dict | None = None) -> tuple[str, str]:
    args = ["airflow", "dags", "test", dag_id] + (["-c", json.dumps(conf)] if conf is not None else [])
    out = _run(home["venv"], args, home["project"], home["env"], timeout=600)
    text = out.stdout + out.stderr
    match = re.search(r"DagRun Finished: dag_id=[^,]+, logical_date=[^,]+, run_id=([^,]+), .*state=(\w+)", text)
    assert out.returncode == 0 and match, f"airflow {' '.join(args[1:])}:\n{text[-6000:]}"
    assert match.group(2) == "success", text[-6000:]
    return match.group(1), text


def _xcom(home: dict, dag_id: str, run_id: str) -> dict:
    with sqlite3.connect(home["db"]) as db:
        rows = db.execute("SELECT task_id, key, value FROM xcom WHERE dag_id = ? AND run_id = ?",
                          (dag_id, run_id)).fetchall()
    return {(t, k): json.loads(v) if isinstance(v, str) else v for t, k, v in rows}


def _run_user_dag_and_retune(home: dict) -> None:
    """The user's DAG through the backend (the value over the threshold stored in Cassandra, read
    back downstream), then the retune DAG's dry run sized by that run."""
    run_id, text = _dags_test(home, "user_xcom")
    assert "USER-CHECK ok n=20000" in text, text[-4000:]
    assert f"plugin={home['venv']['site']}" in text, text[-4000:]  # the wheel's adapter, not the repository's
    rows = _xcom(home, "user_xcom", run_id)
    ref = rows[("produce", "return_value")]
    assert isinstance(ref, dict) and ref.get("__asgard_xcom__") == 1, ref  # a reference: the value is in Cassandra
    assert ref["uri"].startswith(f"cassandra://127.0.0.1:9042/{TEST_KEYSPACE}."), ref
    assert rows[("check", "return_value")] == 20000  # small: in Airflow's own row

    run_id, text = _dags_test(home, "user_retune", DRY_RETUNE)
    rows = _xcom(home, "user_retune", run_id)
    plan = rows[("plan_workload", "return_value")]
    assert plan["job"] == "user_xcom" and plan["dags"]["user_xcom"]["sized_by_run"], plan
    recommendation = rows[("recommend_configuration", "return_value")]
    assert recommendation["search"]["evaluations"] > 0, recommendation
    outcome = rows[("reconfigure", "return_value")]
    assert outcome["dry_run"] is True and outcome["applied"] is None, outcome
    assert isinstance(outcome["decision"]["reconfigure"], bool) and outcome["decision"]["reason"], outcome

    # the stored values go with the test, through the installed CLI
    out = _run(home["venv"], ["asgard", "airflow", "purge", "--older-than", "0s"], home["project"], home["env"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def _tune_recommend(venv: dict, project: Path) -> None:
    out = _run(venv, ["asgard", "tune", "recommend", "--pattern", "scatter", "--fanout", "8", "--object-kib", "1024",
                      "--evaluations", "200", "--json"], project, _clean_env(ASGARD_HOME=_asgard_home()))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    doc = json.loads(out.stdout)  # --json: one indented document
    assert doc["workload"]["pattern"] == "scatter" and doc["evaluations"] > 0, doc
    assert isinstance(doc["predicted_ratio"], float) and doc["knobs"], doc
    model = _run(venv, ["python", "-c", "from asgard.tuner.dataset import DEFAULT_MODEL; print(DEFAULT_MODEL)"],
                 project, _clean_env())
    assert model.returncode == 0 and model.stdout.strip().startswith(str(venv["site"])), model.stdout + model.stderr


# --- the tests ---------------------------------------------------------------------------------

def test_the_wheel_installs_nothing_under_a_generic_top_level_name(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops <= {"asgard", "asgard_dagster", "asgard_airflow", "asgard_bench"}, tops
    # the package data the runtime needs comes along, under the namespace
    assert any(n.startswith("asgard/resources/cassandra/patches/5.0.9/") and n.endswith(".patch") for n in names)
    assert "asgard/resources/cassandra/pom.xml" in names and "asgard/resources/network/profiles.yaml" in names
    assert "asgard/resources/stores/cql/store.py" in names
    assert "asgard/tuner/data/model.json" in names and "asgard/tuner/data/model.lgb.txt" in names


def test_a_job_and_the_retune_job_run_from_the_installed_wheel_beside_the_users_own_modules(
        full_env, user_project, cassandra_node, tmp_path):
    (tmp_path / "dagster_home").mkdir()
    env = _clean_env(ASGARD_HOME=_asgard_home(), DAGSTER_HOME=str(tmp_path / "dagster_home"))
    report = _last_json(_run(full_env, ["python", "user_job.py", TEST_KEYSPACE], user_project, env, timeout=300))
    assert report["success"] and report["sum"] == 2 * sum(range(1000))
    assert report["user_resources"] == str(user_project / "resources.py")
    assert report["plugin"].startswith(str(full_env["site"])), report["plugin"]  # the wheel's, not the repository's
    assert report["uris"] and all(u.startswith(f"cassandra://127.0.0.1:9042/{TEST_KEYSPACE}.objects/run/")
                                  for u in report["uris"]), report["uris"]

    # the retune job's dry run: planned from the job's run, recommended by the shipped model, decided
    report = _last_json(_run(full_env, ["python", "user_retune.py", TEST_KEYSPACE], user_project, env, timeout=600))
    assert report["success"]
    assert report["plan"]["job"] == "user_job" and report["plan"]["lookahead_seconds"] == 3600, report["plan"]
    assert report["recommendation"]["knobs"] and report["recommendation"]["search"]["evaluations"] > 0
    outcome = report["outcome"]
    assert outcome["applied"] is None, outcome  # dry run
    assert isinstance(outcome["decision"]["reconfigure"], bool) and outcome["decision"]["reason"], outcome


def test_a_dag_and_the_retune_dag_run_through_the_backend_from_the_installed_wheel(
        full_env, user_project, cassandra_node, tmp_path):
    _run_user_dag_and_retune(_airflow_home(full_env, user_project, tmp_path / "airflow_home"))


def test_asgard_tune_recommend_with_the_shipped_model(full_env, user_project):
    _tune_recommend(full_env, user_project)


def test_the_airflow_only_install_has_no_dagster_and_imports_every_module_it_ships(airflow_env, user_project):
    for absent in ("dagster", "torch"):
        no = _run(airflow_env, ["python", "-c", f"import {absent}"], user_project, _clean_env())
        assert no.returncode != 0 and f"No module named '{absent}'" in no.stderr, no.stdout + no.stderr
    out = _run(airflow_env, ["python", "-c", IMPORT_ALL, "asgard_airflow", "asgard.resources", "asgard.tuner",
                             "asgard.cli", "asgard.pipelines.airflow_apps"], user_project,
               _clean_env(ASGARD_HOME=_asgard_home()))
    report = _last_json(out)
    assert report["failed"] == {} and report["dagster"] == [], report


def test_the_airflow_only_install_runs_the_dag_and_the_retune_dag(airflow_env, user_project, cassandra_node, tmp_path):
    _run_user_dag_and_retune(_airflow_home(airflow_env, user_project, tmp_path / "airflow_home"))


def test_asgard_tune_recommend_without_dagster(airflow_env, user_project):
    _tune_recommend(airflow_env, user_project)
