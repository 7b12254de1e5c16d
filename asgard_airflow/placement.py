"""Where a task's stored XCom lives relative to the tasks that read it (``[asgard] placement``).

``ring`` and ``producer-local`` apply to every value as the store's setting
(``asgard.resources.stores.local_copy``). ``auto`` decides per value from the task pushing it and
the executor: a value whose downstream tasks all run on this host gets a producer-local copy.

* the LocalExecutor (and the SequentialExecutor, and ``airflow dags test``'s in-process runs) runs
  every task on one host: always;
* the CeleryExecutor only where the task and every downstream task name the same ``queue`` other
  than ``[operators] default_queue`` (the project's workers take their host's queue and the shared
  one: a named queue is one host's);
* the CeleryExecutor with ``[asgard] host_queues`` also where the one downstream task follows this one
  to its host (:mod:`asgard_airflow.task_routing`);
* any other executor: where its tasks run is not known here, so the ring.

A task's own ``params={"asgard": {"placement": ...}}`` wins (:mod:`asgard_airflow.task_settings`).
The decision and its reason go into the XCom's reference row (``placement``, ``placement_reason``),
which the task's rendered XCom shows.
"""
from __future__ import annotations

from typing import Any

from asgard.resources.stores.local_copy import AUTO_PLACEMENT, PlacementChoice, choose_placement

ONE_HOST_EXECUTORS = ("LocalExecutor", "SequentialExecutor")
CELERY_EXECUTOR = "CeleryExecutor"
#: how far up the call stack the running task instance is looked for (the task runner is ~10 frames
#: above a push; a pull while templates render, such as a task's arguments, is deeper)
MAX_FRAMES = 80


def running_task(dag_id: str | None = None, task_id: str | None = None) -> Any | None:
    """The task the task runner is running (``task_id`` given: only that task), None where none is
    found (a value pushed or pulled by hand).

    Airflow hands an XCom backend the task's ids, not the task, and pushes a task's return value
    after its context is gone (``get_current_context`` fails there): the task instance is found
    on the call stack (the task runner's ``ti``, whose ``task`` has the downstream tasks)."""
    import sys

    frame = sys._getframe(1)
    for _ in range(MAX_FRAMES):
        if frame is None:
            return None
        ti = frame.f_locals.get("ti")
        task = getattr(ti, "task", None)
        if task is not None and (task_id is None or (getattr(task, "task_id", None) == task_id
                                                     and getattr(ti, "dag_id", dag_id) == dag_id)):
            return task
        frame = frame.f_back
    return None


def _executor(task: Any) -> str:
    """The executor that runs ``task``: its own, else the first one ``[core] executor`` names."""
    from airflow.sdk.configuration import conf

    named = getattr(task, "executor", None) or (conf.get("core", "executor", fallback="") or "LocalExecutor")
    return named.split(",")[0].strip().rsplit(".", 1)[-1]


def readers_on_this_host(task: Any) -> tuple[bool | None, str]:
    """Whether every task downstream of ``task`` runs on its host, and why (None: none is)."""
    readers = list(getattr(task, "downstream_list", []) or [])
    if not readers:
        return None, "no task downstream of it"
    executor = _executor(task)
    if executor in ONE_HOST_EXECUTORS:
        return True, f"the {executor} runs its {len(readers)} downstream task(s) on this host"
    if executor != CELERY_EXECUTOR:
        return False, f"the {executor}: where its tasks run is not known here"
    from airflow.sdk.configuration import conf

    from .task_routing import follower_of

    follower = follower_of(task)
    if follower is not None:
        return True, f"[asgard] host_queues routes each instance of {follower} to the host that ran its upstream"
    shared = conf.get("operators", "default_queue", fallback="default")
    mine = getattr(task, "queue", None) or shared
    if mine == shared:
        return False, f"the CeleryExecutor may run {task.task_id} and its readers on any host: queue '{shared}' is shared"
    elsewhere = {t.task_id: t.queue for t in readers if (getattr(t, "queue", None) or shared) != mine}
    if elsewhere:
        return False, (f"the CeleryExecutor routes {task.task_id} to queue '{mine}' but "
                       + ", ".join(f"{r} to '{q}'" for r, q in sorted(elsewhere.items())))
    return True, f"the CeleryExecutor routes {task.task_id} and its {len(readers)} reader(s) to queue '{mine}', one host's"


def placement_for(setting: str, task: Any | None, store_read_mib_s=lambda: None, own: str | None = None,
                  own_reason: str = "") -> PlacementChoice | None:
    """The placement of the value ``task`` (the running task, :func:`running_task`) pushes: the
    task's ``own`` (its params, ``own_reason`` saying so), which wins; else None leaves it to the
    store's ``setting`` (``ring`` or ``producer-local``); ``auto`` is decided here
    (``store_read_mib_s()``: the store's reads as measured here, what a copy saves each reader)."""
    if own is not None and own != AUTO_PLACEMENT:
        return choose_placement(own, None, f"the task's {own_reason}")
    if own is None and setting != AUTO_PLACEMENT:
        return None
    if task is None:
        return choose_placement(AUTO_PLACEMENT, None, "no task around it")
    same, why = readers_on_this_host(task)
    if own is not None:
        why = f"the task's {own_reason}: {why}"
    return choose_placement(AUTO_PLACEMENT, same, why, len(getattr(task, "downstream_list", []) or []),
                            store_read_mib_s=store_read_mib_s())
