"""The adapters' contract with Dagster and Airflow: every private or internal name they rely on.

A release of either that renames one would break a sensor, the topology analyzer or the XCom
backend at run time; this test, which needs no server, fails first and says what to re-check.
Every ``dagster._*`` or ``airflow...._*`` import in the adapters must be listed here.
"""
from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parent.parent
RECHECK = ("{what} (used by {where}) is gone or changed in the installed {lib}: re-check it against the new "
           "release's source, then update the adapter and tests/test_orchestrator_contract.py together.")

#: (module, attribute, where the project uses it)
NAMES = [
    ("dagster._core.definitions.run_request", "InstigatorType", "asgard_dagster/sensors.py"),
    ("dagster._core.scheduler.instigation", "InstigatorStatus", "asgard_dagster/sensors.py"),
    ("dagster._core.definitions.unresolved_asset_job_definition", "UnresolvedAssetJobDefinition",
     "asgard_dagster/definitions.py"),
    ("dagster._core.definitions.dependency", "DynamicCollectDependencyDefinition", "asgard_dagster/topology.py"),
    ("dagster._core.definitions.dependency", "NodeHandle", "asgard_dagster/topology.py"),
    ("airflow.serialization.encoders", "coerce_to_core_timetable", "asgard_airflow/upcoming.py"),
    ("airflow.sdk.execution_time.comms", "GetPreviousDagRun", "asgard_airflow/upcoming.py"),
    ("airflow.sdk.execution_time.task_runner", "SUPERVISOR_COMMS", "asgard_airflow/upcoming.py"),
    ("airflow.sdk.definitions._internal.expandinput", "DictOfListsExpandInput", "asgard_airflow/xcom.py"),
    ("airflow.sdk.definitions._internal.expandinput", "ListOfDictsExpandInput", "asgard_airflow/xcom.py"),
]


@pytest.mark.parametrize("module,attribute,where", NAMES, ids=[f"{m}.{a}" for m, a, _ in NAMES])
def test_each_private_name_the_adapters_use_is_still_there(module, attribute, where):
    lib = module.split(".")[0]
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(RECHECK.format(what=f"module {module}", where=where, lib=lib) + f" ({exc})")
    # a module global set at run time (SUPERVISOR_COMMS) is declared by its annotation
    assert hasattr(found, attribute) or attribute in getattr(found, "__annotations__", {}), RECHECK.format(what=f"{module}.{attribute}", where=where, lib=lib)


def test_the_previous_dag_run_message_still_takes_what_upcoming_sends():
    from airflow.sdk.execution_time.comms import GetPreviousDagRun

    fields = set(GetPreviousDagRun.model_fields)
    assert {"dag_id", "logical_date", "state"} <= fields, RECHECK.format(
        what=f"GetPreviousDagRun's fields {sorted(fields)}", where="asgard_airflow/upcoming.py", lib="airflow")


def test_basexcom_set_still_tells_the_backend_the_mapped_length():
    """Airflow passes ``_mapped_length`` to ``BaseXCom.set`` when downstream tasks map over a value:
    the backend stores such a list one object per element."""
    from airflow.sdk.bases.xcom import BaseXCom

    for method in (BaseXCom.set, BaseXCom.aset):
        params = inspect.signature(method).parameters
        assert "_mapped_length" in params, RECHECK.format(
            what=f"BaseXCom.{method.__name__}(_mapped_length=...)", where="asgard_airflow/xcom.py", lib="airflow")


def _private_imports() -> set[tuple[str, str, str]]:
    """``from <lib>...._x... import name`` in the adapters' sources, for lib dagster or airflow."""
    found = set()
    for package in ("asgard_dagster", "asgard_airflow"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    parts = node.module.split(".")
                    if parts[0] in ("dagster", "airflow") and any(p.startswith("_") for p in parts[1:]):
                        for alias in node.names:
                            found.add((node.module, alias.name, str(path.relative_to(ROOT))))
    return found


def test_every_private_import_of_the_adapters_is_in_this_contract():
    listed = {(m, a) for m, a, _ in NAMES} | set(EXTRA_PRIVATE_IMPORTS)
    missing = sorted(f"{path}: from {m} import {a}" for m, a, path in _private_imports() if (m, a) not in listed)
    assert not missing, "add these to tests/test_orchestrator_contract.py NAMES (or use the public API): " + \
        "; ".join(missing)


#: private imports checked by a test of their own above, or registered by the module that uses them
EXTRA_PRIVATE_IMPORTS: list[tuple[str, str]] = []
