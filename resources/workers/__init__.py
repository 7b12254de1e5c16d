"""Workers of the distributed executors: one per emulated host, each a
:class:`~asgard.resources.process.ManagedServer` run inside its host's network namespace.

``DagsterCeleryWorker`` runs ``celery -A dagster_celery.app worker`` (dagster-celery's worker) on
the queue named after its host and the shared queue ``dagster``; ``AirflowCeleryWorker`` runs
``airflow celery worker`` on its host's queue and ``default``, beside ``AirflowApiServer`` (the
execution API its tasks report to). The broker is the project's Redis. Nothing here imports
Dagster or Airflow: each worker is a process started with them.
"""
from __future__ import annotations

from .airflow_worker import AirflowApiServer, AirflowCeleryWorker
from .dagster_worker import DagsterCeleryWorker, WorkerError, current_netns

__all__ = ["AirflowApiServer", "AirflowCeleryWorker", "DagsterCeleryWorker", "WorkerError", "current_netns"]
