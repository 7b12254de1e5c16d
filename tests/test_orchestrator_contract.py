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
    ("airflow.sdk.serde", "_match", "asgard_airflow/allowed_classes.py"),
    ("airflow.sdk.serde", "_extra_allowed", "asgard_airflow/allowed_classes.py"),
    ("dagster._core.execution.retries", "RetryMode", "asgard_dagster/step_routing.py"),
    ("dagster_celery.executor", "_submit_task", "asgard_dagster/step_routing.py"),
    ("dagster_celery.executor", "CELERY_CONFIG", "asgard_dagster/step_routing.py"),
    ("dagster_celery.executor", "CeleryExecutor", "asgard_dagster/step_routing.py"),
    ("dagster_celery.core_execution_loop", "core_celery_execution_loop", "asgard_dagster/step_routing.py"),
    ("dagster_celery.core_execution_loop", "TICK_SECONDS", "asgard_dagster/step_routing.py"),
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


def test_dagster_celerys_loop_still_sends_each_step_through_the_function_it_is_given():
    """The host-routed executor passes its own ``step_execution_fn`` (the queue swapped, then
    ``_submit_task``) and learns where a step ran from the worker's ``Celery worker`` metadata."""
    from dagster_celery import core_execution_loop, tasks
    from dagster_celery.executor import CeleryExecutor, _submit_task

    from asgard_dagster.step_routing import WORKER_METADATA_KEY

    where = "asgard_dagster/step_routing.py"
    assert list(inspect.signature(_submit_task).parameters) == ["app", "plan_context", "step", "queue", "priority",
                                                                "known_state"], RECHECK.format(
        what="dagster_celery.executor._submit_task's parameters", where=where, lib="dagster_celery")
    assert "step_execution_fn" in inspect.signature(core_execution_loop.core_celery_execution_loop).parameters
    loop = inspect.getsource(core_execution_loop.core_celery_execution_loop)
    assert "step_execution_fn(" in loop and "active_execution.get_steps_to_execute()" in loop, RECHECK.format(
        what="core_celery_execution_loop's call of step_execution_fn", where=where, lib="dagster_celery")
    assert f'"{WORKER_METADATA_KEY}": self.request.hostname' in inspect.getsource(tasks), RECHECK.format(
        what=f"the worker's engine event metadata {WORKER_METADATA_KEY!r}", where=where, lib="dagster_celery")
    # the executor's poll_interval_seconds sets the module global the loop sleeps between polls
    assert "time.sleep(TICK_SECONDS)" in loop, RECHECK.format(
        what="core_celery_execution_loop's sleep of TICK_SECONDS between polls", where=where, lib="dagster_celery")
    assert set(inspect.signature(CeleryExecutor.__init__).parameters) >= {"retries", "broker", "backend", "include",
                                                                          "config_source"}


def _private_imports() -> set[tuple[str, str, str]]:
    """``from <lib>...._x... import name`` in the adapters' sources, for lib dagster or airflow, and
    ``from <plug-in> import _name`` of their plug-ins."""
    found = set()
    for package in ("asgard_dagster", "asgard_airflow"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    parts = node.module.split(".")
                    private_module = parts[0] in ("dagster", "airflow") and any(p.startswith("_") for p in parts[1:])
                    for alias in node.names:
                        # a plug-in's private name (dagster_celery's _submit_task) is the same contract
                        if private_module or (parts[0].startswith(("dagster", "airflow")) and alias.name.startswith("_")):
                            found.add((node.module, alias.name, str(path.relative_to(ROOT))))
    return found


def test_every_private_import_of_the_adapters_is_in_this_contract():
    listed = {(m, a) for m, a, _ in NAMES} | set(EXTRA_PRIVATE_IMPORTS)
    missing = sorted(f"{path}: from {m} import {a}" for m, a, path in _private_imports() if (m, a) not in listed)
    assert not missing, "add these to tests/test_orchestrator_contract.py NAMES (or use the public API): " + \
        "; ".join(missing)


#: private imports checked by a test of their own above, or registered by the module that uses them
EXTRA_PRIVATE_IMPORTS: list[tuple[str, str]] = []
