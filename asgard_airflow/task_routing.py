"""Airflow's CeleryExecutor sending a mapped task's instance to the host that ran the upstream
instance it reads (issue 37, item 3: "routing the consumer to the producer's host through the
executor's queues"), the Airflow side of ``asgard_dagster.step_routing``.

A task *follows* its upstream task where it is mapped over that task's output alone, the
upstream is mapped too (instance i reads instance i's value) and reads nothing else downstream
of it, and the follower has no queue of its own (:func:`followed_upstream`: the ETL's
``join_customers`` follows ``filter_orders``, ``aggregate`` follows ``join_customers``). Airflow
creates a mapped task's instances once its upstream instances are done and calls the cluster
policy's ``task_instance_mutation_hook`` on each (and again, last, when it refreshes one from
its task); :func:`task_instance_mutation_hook` there sets a follower's instance's ``queue`` to
the queue of the host whose worker ran the upstream instance of its map index (its
``hostname``), by ``[asgard] host_queues`` (``<hostname>=<queue>,...``). Install it in the
scheduler's ``$AIRFLOW_HOME/config/airflow_local_settings.py``::

    from asgard_airflow.task_routing import task_instance_mutation_hook

With ``[asgard] placement = auto`` the upstream's value then keeps its copy on its host
(:mod:`asgard_airflow.placement`), and the ring stays the source of truth.
"""
from __future__ import annotations

from typing import Any

from .settings import SECTION


def host_queues() -> dict[str, str]:
    """``[asgard] host_queues``: the queue of each worker host, by the ``hostname`` its task
    instances record (``<hostname>=<queue>,...``); empty where routing is off."""
    from airflow.sdk.configuration import conf

    pairs = (p.partition("=") for p in (conf.get(SECTION, "host_queues", fallback="") or "").split(","))
    return {host.strip(): queue.strip() for host, _, queue in pairs if host.strip() and queue.strip()}


def _default_queue() -> str:
    from airflow.sdk.configuration import conf

    return conf.get("operators", "default_queue", fallback="default")


def followed_upstream(task: Any) -> str | None:
    """The task id ``task`` follows, if any (the module's rule), read from the task's DAG: a
    running task instance's task is its unmapped copy, the DAG's task is the mapped one."""
    dag = getattr(task, "dag", None)
    if dag is None:
        return None
    mapped = dag.get_task(task.task_id)
    if not getattr(mapped, "is_mapped", False) or (getattr(mapped, "queue", None) or _default_queue()) != _default_queue():
        return None
    sources = list(mapped.iter_mapped_dependencies())
    if len(sources) != 1:
        return None
    upstream = dag.get_task(sources[0].task_id)
    if not getattr(upstream, "is_mapped", False) or [t.task_id for t in upstream.downstream_list] != [task.task_id]:
        return None
    return upstream.task_id


def follower_of(task: Any) -> str | None:
    """The task that follows ``task`` to its host where routing is on (``[asgard] host_queues``)."""
    dag = getattr(task, "dag", None)
    downstream = list(dag.get_task(task.task_id).downstream_list) if dag is not None else []
    if len(downstream) != 1 or not host_queues():
        return None
    return downstream[0].task_id if followed_upstream(downstream[0]) == task.task_id else None


def task_instance_mutation_hook(ti: Any, dag_run: Any = None) -> None:
    """Airflow's cluster policy hook: a follower's mapped instance to the queue of the host that
    ran its upstream instance (nothing else is changed; routing off without ``host_queues``)."""
    task = getattr(ti, "task", None)
    if task is None or ti.map_index is None or ti.map_index < 0 or dag_run is None:
        return
    upstream = followed_upstream(task)
    queues = host_queues() if upstream else {}
    if not queues:
        return
    from sqlalchemy import select
    from sqlalchemy.orm import object_session

    from airflow.models.taskinstance import TaskInstance

    session = object_session(dag_run)
    if session is None:
        return
    with session.no_autoflush:
        hostname = session.scalar(select(TaskInstance.hostname).where(
            TaskInstance.dag_id == ti.dag_id, TaskInstance.run_id == ti.run_id,
            TaskInstance.task_id == upstream, TaskInstance.map_index == ti.map_index))
    queue = queues.get(hostname or "")
    if queue:
        ti.queue = queue
