"""A task's own choices for the values it pushes: ``params={"asgard": {...}}``.

Airflow has no per-output metadata; a task's ``params`` are its own definition-time settings (a
DAG's ``params`` apply to each of its tasks that sets none, Airflow's precedence). Under the key
``asgard``, any of::

    @task(params={"asgard": {"codec": "zstd", "placement": "ring", "replicas": 1}})

win over the ``[asgard]`` settings for the values that task stores (``auto`` is decided per value,
as the settings' ``auto``). The task's Rendered Template (``asgard_edges``) and the XCom reference
say so. What was declared is read, not a run's ``conf``: a run cannot change where data lives.

A value an option cannot take fails the push with :class:`XComTaskSettingError`; a
``producer-local`` (the task's, or ``[asgard] placement``) whose readers may run on other hosts
with :class:`XComPlacementCannotServeError`; both before anything is written.
:func:`check_dag_settings` raises the same when the DAG file is parsed, before any run launches;
as the deployment's cluster policy it checks every DAG (``$AIRFLOW_HOME/config/airflow_local_settings.py``)::

    from asgard_airflow.task_settings import dag_policy  # a DAG that cannot be served fails to load
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asgard.resources.stores.errors import StoreConfigError
from asgard.resources.stores.local_copy import AUTO_PLACEMENT, PLACEMENTS, PRODUCER_LOCAL
from asgard.resources.stores.replicas import REPLICA_SETTINGS, check_replicas
from asgard.resources.stores.serde import AUTO_CODEC, CODECS
from asgard.resources.stores.settings import STORAGE

from .errors import XComPlacementCannotServeError, XComTaskSettingError
from .placement import readers_on_this_host

#: the ``params`` key holding a task's choices
PARAM = "asgard"
#: each option a task can set, and the values it can take
ALLOWED = {"codec": [*sorted(CODECS), AUTO_CODEC], "placement": list(PLACEMENTS), "replicas": list(REPLICA_SETTINGS)}


@dataclass(frozen=True)
class TaskSettings:
    """What a task's ``params["asgard"]`` sets; None leaves an option to the ``[asgard]`` settings."""

    codec: str | None = None
    placement: str | None = None
    replicas: str | None = None

    def reason(self, option: str) -> str:
        return f"params['{PARAM}'] {option} = {getattr(self, option)}"


def task_settings(task: Any | None) -> TaskSettings:
    """``task``'s own choices (none for a value pushed outside a task), each checked."""
    params = getattr(task, "params", None)
    declared = params.get(PARAM) if params is not None else None
    if declared is None:
        return TaskSettings()
    if not isinstance(declared, dict):
        raise XComTaskSettingError(task, PARAM, declared, [f"a dict of {', '.join(ALLOWED)}"])
    unknown = sorted(set(declared) - set(ALLOWED))
    if unknown:
        raise XComTaskSettingError(task, unknown[0], declared[unknown[0]], [f"an option of {', '.join(ALLOWED)}"])
    chosen = {}
    for option, value in declared.items():
        try:
            chosen[option] = check_replicas(value) if option == "replicas" else _checked(value, ALLOWED[option])
        except StoreConfigError:
            raise XComTaskSettingError(task, option, value, ALLOWED[option]) from None
    return TaskSettings(**chosen)


def _checked(value: Any, allowed: list[str]) -> str:
    if value not in allowed:
        raise StoreConfigError(f"{value!r} is not one of {allowed}")
    return value


def check_placement_serves(task: Any, own: TaskSettings, setting: str) -> None:
    """Raise :class:`XComPlacementCannotServeError` where the task's placement (its ``own``, else
    the ``[asgard]`` ``setting``) is ``producer-local`` and a task downstream of it may run on
    another host."""
    placement = own.placement or setting
    if placement != PRODUCER_LOCAL:
        return
    same, why = readers_on_this_host(task)
    if same is False:
        source = own.reason("placement") if own.placement else f"[asgard] placement = {setting}"
        raise XComPlacementCannotServeError(
            task, source, why, "Give the task and every task downstream of it the same queue, one host's "
            f"(queue=...), or set the placement to '{AUTO_PLACEMENT}' or 'ring'")


def check_dag_settings(dag: Any, placement: str | None = None) -> None:
    """Check every task of ``dag`` as its pushes will: its ``params["asgard"]``, and a
    ``producer-local`` (its own, else ``placement``, the ``[asgard]`` option, read here when
    not given; a connection's extra is not read at parse time) against where its readers run. Call it in the DAG file to fail at parse time."""
    if placement is None:  # the option alone: parsing a DAG reads no connection
        from airflow.sdk.configuration import conf

        from .settings import SECTION

        placement = (conf.get(SECTION, "placement", fallback="") or "").strip() or STORAGE["placement"].default
    for task in dag.tasks:
        check_placement_serves(task, task_settings(task), placement)


def dag_policy(dag: Any) -> None:
    """Airflow's cluster policy hook: :func:`check_dag_settings` on every DAG parsed, so that one
    whose settings cannot serve is an import error (``AirflowClusterPolicyError``), never run."""
    check_dag_settings(dag)
