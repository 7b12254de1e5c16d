"""The package layout: what a pipeline imports stays light, and no module imports itself back.

``asgard_dagster`` is what a Dagster user puts in ``Definitions``; the benchmarks (``asgard_bench``)
and the seed applications (``pipelines``) are not part of it, and neither is matplotlib.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["asgard_dagster", "asgard_bench", "resources", "tuner", "pipelines"]
NAMESPACED = ("resources", "tuner", "pipelines")


def test_what_a_pipeline_imports_pulls_in_no_benchmark_no_pipeline_and_no_matplotlib():
    code = (
        "import json, sys\n"
        "import asgard_dagster, asgard_dagster.cli, asgard_dagster.definitions, asgard_dagster.sensors\n"
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
    # the CLI mounts the bench's click group; the benchmarks themselves load only when run
    assert {m for m in loaded if m.startswith("asgard_bench")} <= {"asgard_bench", "asgard_bench.cli",
                                                                 "asgard_bench.apps_cli"}


def test_the_benchmarks_are_still_asgard_bench_commands():
    from asgard_dagster.cli import main

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
