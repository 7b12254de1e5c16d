"""Workers of the distributed executors: one per emulated host, each a
:class:`~asgard.resources.process.ManagedServer` run inside its host's network namespace.

``DagsterCeleryWorker`` runs ``celery -A dagster_celery.app worker`` (dagster-celery's worker) on
the queue named after its host and the shared queue ``dagster``, with the broker on the project's
Redis. Nothing here imports Dagster or Celery: the worker is a process started with them.
"""
from __future__ import annotations

from .dagster_worker import DagsterCeleryWorker, WorkerError, current_netns

__all__ = ["DagsterCeleryWorker", "WorkerError", "current_netns"]
