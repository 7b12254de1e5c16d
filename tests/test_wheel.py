"""The distribution as a user installs it: the wheel, in a fresh environment outside the repository,
imported from a Dagster project that has its own ``resources.py`` and ``pipelines/`` (common names
in Dagster projects), runs a job through ``CassandraIOManager`` on the real node."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from .conftest import TEST_KEYSPACE

REPO = Path(__file__).resolve().parent.parent

USER_JOB = textwrap.dedent('''
    import json, sys
    import resources                      # the user's own module, not the plugin's
    from pipelines.steps import double    # the user's own package
    import dagster as dg
    import asgard_dagster
    from asgard_dagster import CassandraIOManager, CassandraResource

    @dg.op
    def make():
        return list(range(1000))

    @dg.op
    def use(values):
        return double(values)

    @dg.job
    def user_job():
        use(make())

    result = user_job.execute_in_process(resources={"io_manager": CassandraIOManager(
        cassandra=CassandraResource(contact_points=["127.0.0.1"], keyspace=sys.argv[1]))})
    out = result.output_for_node("use")
    uris = [e.event_specific_data.metadata["dagster/uri"].value for e in result.all_events
            if e.event_type_value == "HANDLED_OUTPUT"]
    print(json.dumps({"success": result.success, "sum": sum(out), "user_resources": resources.__file__,
                      "plugin": asgard_dagster.__file__, "uris": uris,
                      "plugin_modules": sorted(m for m in sys.modules if m.split(".")[0] == "asgard")[:5]}))
''')


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


def test_the_wheel_installs_nothing_under_a_generic_top_level_name(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops <= {"asgard", "asgard_dagster", "asgard_airflow", "asgard_bench"}, tops
    # the package data the runtime needs comes along, under the namespace
    assert any(n.startswith("asgard/resources/cassandra/patches/5.0.9/") and n.endswith(".patch") for n in names)
    assert "asgard/resources/cassandra/pom.xml" in names and "asgard/resources/network/profiles.yaml" in names
    assert "asgard/resources/stores/cql/store.py" in names


def test_a_job_runs_from_the_installed_wheel_beside_the_users_own_resources_and_pipelines(
        wheel, cassandra_node, tmp_path):
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # the plugin's dependencies from the project's environment (a path, not its .pth files: the
    # repository's editable install must not come along), the plugin itself from the wheel
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, text=True)

    project = tmp_path / "user_project"
    (project / "pipelines").mkdir(parents=True)
    (project / "resources.py").write_text("DATABASE_URL = 'the user own resources module'\n")
    (project / "pipelines" / "__init__.py").write_text("")
    (project / "pipelines" / "steps.py").write_text("def double(values):\n    return [2 * v for v in values]\n")
    (project / "job.py").write_text(USER_JOB)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["ASGARD_HOME"] = str(tmp_path / "asgard_home")
    env["DAGSTER_HOME"] = str(tmp_path / "dagster_home")
    (tmp_path / "dagster_home").mkdir()
    run = subprocess.run([str(python), "job.py", TEST_KEYSPACE], cwd=project, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["success"] and report["sum"] == 2 * sum(range(1000))
    assert report["user_resources"] == str(project / "resources.py")
    assert report["plugin"].startswith(str(site)), report["plugin"]  # the wheel's, not the repository's
    assert report["uris"] and all(u.startswith(f"cassandra://127.0.0.1:9042/{TEST_KEYSPACE}.objects/run/")
                                  for u in report["uris"]), report["uris"]
