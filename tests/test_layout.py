"""The package layout: what a pipeline imports stays light, and no module imports itself back.

``asgard_dagster`` is what a Dagster user puts in ``Definitions``; the benchmarks (``asgard_bench``)
and the seed applications (``pipelines``) are not part of it, and neither is matplotlib.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["asgard_dagster", "asgard_bench", "resources", "tuner", "pipelines"]
NAMESPACED = ("resources", "tuner", "pipelines")


def test_what_a_pipeline_imports_pulls_in_no_benchmark_no_pipeline_and_no_matplotlib():
    code = (
        "import json, sys\n"
        "import asgard_dagster, asgard_dagster.definitions, asgard_dagster.sensors\n"
        "import asgard_dagster.retune, asgard_dagster.topology, asgard_dagster.io_manager\n"
        "from asgard_dagster import CassandraIOManager, CassandraResource\n"
        "from asgard_dagster.definitions import asgard_definitions\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert not [m for m in loaded if m == "matplotlib" or m.startswith("matplotlib.")]
    assert not [m for m in loaded if m == "asgard.pipelines" or m.startswith("asgard.pipelines.")]
    # and nothing under a generic top-level name a user's own project may hold
    assert not [m for m in loaded if m.split(".")[0] in ("resources", "tuner", "pipelines")]
    # nor the lab's command line and benchmarks (asgard.cli mounts them)
    assert not [m for m in loaded if m == "asgard.cli" or m.startswith("asgard_bench")]


def test_the_benchmarks_are_still_asgard_bench_commands():
    from asgard.cli import main

    result = CliRunner().invoke(main, ["bench", "--help"])
    assert result.exit_code == 0, result.output
    for command in ("io", "apps", "dynamic", "scaling", "load", "startup", "report"):
        assert f"  {command} " in result.output, result.output
    result = CliRunner().invoke(main, ["bench", "io", "--help"])
    assert result.exit_code == 0 and "--backends" in result.output


def _imports(name: str, path: Path, modules: set[str]) -> set[str]:
    """Project modules ``name`` imports anywhere in its body (a function-level import is still an
    edge), except under ``if TYPE_CHECKING:``, which never runs."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            targets = [module] + [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_no_import_cycle_between_project_modules():
    files = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if package in NAMESPACED:  # installed as asgard.<package> (setup.py's package_dir)
                parts = ["asgard"] + parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = defaultdict(set)
    for name, path in files.items():
        graph[name] = _imports(name, path, set(files))
    # a module that reaches itself through its imports is on a cycle
    cycles = []
    for start in files:
        seen, todo = set(), list(graph[start])
        while todo:
            node = todo.pop()
            if node == start:
                cycles.append(start)
                break
            if node not in seen:
                seen.add(node)
                todo.extend(graph[node])
    assert cycles == [], f"modules on an import cycle: {cycles}"


def test_the_layers_hold_as_lint_imports_checks_them():
    """The contracts in .importlinter: the client depends on the drivers only, the two adapters on
    the client and their own orchestrator, the tuner on neither orchestrator."""
    out = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout and out.stdout.count(" KEPT") >= 5, out.stdout


# a finder that refuses a module family, as an environment without it installed would
_WITHOUT = """
import importlib.abc, sys
class Without(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {refused!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Without())
"""


#: (the orchestrator missing, the modules refused with it, what must still import there)
WITHOUT_ORCHESTRATOR = [
    ("dagster", {"dagster", "dagster_aws", "dagster_webserver", "asgard_dagster"},
     "import asgard_airflow, asgard_airflow.xcom, asgard_airflow.retune, asgard_airflow.cli\n"
     "from asgard_airflow import CassandraXComBackend\n"
     "from asgard.tuner import retune, surrogates\n"),
    ("airflow", {"airflow", "asgard_airflow"},
     "import asgard_dagster, asgard_dagster.definitions, asgard_dagster.retune, asgard_dagster.sensors\n"
     "from asgard_dagster import CassandraIOManager, CassandraResource\n"),
]


@pytest.mark.parametrize("missing,refused,imports", WITHOUT_ORCHESTRATOR, ids=["without-dagster", "without-airflow"])
def test_each_adapter_imports_where_the_other_orchestrator_is_not_installed(missing, refused, imports):
    code = _WITHOUT.format(refused=refused) + imports + (
        f"print(sorted(m for m in sys.modules if m.split('.')[0] == {missing!r}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


# every module of the four layers, imported with the environment watched
_WATCH_ENVIRON = """
import os, sys, pkgutil, importlib, json
read = set()
ROOT = os.getcwd()
def _by_project():  # the nearest caller outside os and collections.abc is a module of this project
    frame = sys._getframe(2)
    while frame and frame.f_code.co_filename.endswith(("os.py", "_collections_abc>", "_collections_abc.py")):
        frame = frame.f_back
    name = frame.f_code.co_filename if frame else ""
    return name.startswith(ROOT) and "/.venv/" not in name
class Watched(os._Environ):
    def __getitem__(self, key):
        if _by_project():
            read.add(key)
        return super().__getitem__(key)
    def __contains__(self, key):
        if _by_project():
            read.add(key)
        return super().__contains__(key)
os.environ.__class__ = Watched
import asgard, asgard_airflow, asgard_dagster, asgard_bench
import asgard.resources, asgard.tuner, asgard.pipelines
names = []
for package in (asgard.resources, asgard.tuner, asgard_airflow, asgard_dagster):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        names.append(info.name)
for name in ["asgard.cli", "asgard.pipelines.airflow_apps"] + names:
    importlib.import_module(name)
print(json.dumps(sorted(k for k in read if k.startswith(("ASGARD_", "AIRFLOW__ASGARD__")))))
"""


def test_no_module_reads_the_projects_settings_from_the_environment_at_import():
    """Settings are read when used (cached getters), never when a module loads: a process that sets
    a variable after importing the plugin still gets it."""
    out = subprocess.run([sys.executable, "-c", _WATCH_ENVIRON], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "ASGARD_CQL_BATCH": "1000", "ASGARD_CASSANDRA_VERSION": "5.0.9"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [], out.stdout


def test_the_node_runtime_is_one_server_class_with_collaborators_not_mixins():
    """CassandraNode is a ManagedServer and nothing else: its jobs (node_command, node_security,
    node_records) are objects it owns, built from its NodeSpec, so no two classes share its state."""
    import importlib
    import inspect

    from asgard.resources.cassandra.node import CassandraNode
    from asgard.resources.process import ManagedServer

    assert CassandraNode.__bases__ == (ManagedServer,)
    for path in sorted((ROOT / "resources" / "cassandra").glob("node*.py")):
        module = importlib.import_module(f"asgard.resources.cassandra.{path.stem}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue  # imported, not defined here
            # one base at most: a second one would be a mixin sharing the instance's attributes
            assert len(cls.__bases__) == 1, f"{path.name}: {name} has bases {cls.__bases__}"
            if path.stem != "node":
                assert cls not in CassandraNode.__mro__, f"{path.name}: {name} is a base of CassandraNode"
