"""A Dagster celery worker (dagster-celery's ``celery -A dagster_celery.app worker``) as a managed
server, run inside an emulated host's namespace.

The worker takes the tasks of its queues from the broker (the project's Redis), executes each step
in its own process (prefork, ``concurrency`` at a time, one task prefetched) and sends the step's
events back through the result backend (the same Redis). What a worker needs, after
dagster-celery's ``worker start``:

* the broker and result backend in a module ``dagster_celery_config`` on its ``PYTHONPATH``
  (``dagster_celery.app`` imports it): here ``<workdir>/config/dagster_celery_config.py``, 0600, as
  the URLs carry the Redis password;
* the user's code importable: each task names its job by module or file (``reconstructable``),
  which the worker imports; ``code_paths`` go on ``PYTHONPATH``;
* the run's instance: a task carries the submitting instance's ref (its run and event storage),
  which every worker opens: SQLite under one ``DAGSTER_HOME`` works here because the emulated hosts
  share this machine's filesystem; real hosts need Postgres or MySQL storage;
* whatever the job's resources read from the environment (``environment``: the ring's login).

The worker's node name is ``dagster@<host>``; it listens on the queue ``<host>`` (a step tagged
``{"dagster-celery/queue": "<host>"}`` runs there) and on the shared ``dagster`` queue (every
other step).

Example::

    worker = DagsterCeleryWorker("asgard-h1", netns="asgard-h1",
                                 broker_url="redis://:pw@10.213.0.1:6390/0")
    worker.start()          # until it answers a ping through the broker
    worker.stop()           # warm shutdown: a step running finishes first
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..network.namespace import current_netns
from ..paths import run_dir, write_private
from ..process import ServerError
from .celery_worker import QUEUE_ORDER_STRATEGY, CeleryWorker

#: the queue every worker takes besides its host's: dagster-celery's default for an untagged step
SHARED_QUEUE = "dagster"
#: the op tag dagster-celery routes a step by (dagster_celery.tags.DAGSTER_CELERY_QUEUE_TAG)
QUEUE_TAG = "dagster-celery/queue"

__all__ = ["DagsterCeleryWorker", "WorkerError", "current_netns", "SHARED_QUEUE", "QUEUE_TAG"]


class WorkerError(ServerError):
    """A worker could not be set up (dagster-celery missing, no broker given)."""


class DagsterCeleryWorker(CeleryWorker):
    """The Dagster celery worker of host ``host`` (its queue's name).

    Args:
        host: the host's name: the worker's queue and the host part of its node name.
        broker_url: the Celery broker (``redis://:password@address:port/0``) as this host reaches it.
        result_backend: where step events go back; the broker's Redis, database 1, by default. The
            executor's ``backend`` must be the same.
        netns: the network namespace the worker runs in (the host's).
        code_paths: directories the user's code imports from (put on ``PYTHONPATH``).
        dagster_home: the ``DAGSTER_HOME`` of the worker (runs launched through the celery run
            launcher open it; a step task opens the instance of its run's ref).
        environment: more variables for the job's resources (e.g. the ring's login).
        concurrency: steps the worker runs at once, each in a process of its own.
    """

    start_timeout = 90.0
    app_name = "dagster"
    shared_queue = SHARED_QUEUE

    def __init__(self, host: str, broker_url: str, result_backend: str | None = None, netns: str | None = None,
                 code_paths: list[str | Path] = (), dagster_home: str | Path | None = None,
                 environment: dict[str, str] | None = None, concurrency: int = 1, workdir: Path | None = None):
        if not broker_url:
            raise WorkerError(f"the worker of {host} needs a broker URL (redis://:password@address:port/0)")
        workdir = workdir or run_dir("workers", host, "dagster")
        super().__init__(f"dagster-worker-{host}", workdir, host, broker_url,
                         result_backend or _database(broker_url, 1), netns=netns, concurrency=concurrency)
        self.code_paths = [str(Path(p).resolve()) for p in code_paths]
        self.dagster_home = Path(dagster_home) if dagster_home else self.workdir / "dagster_home"
        self.extra_environment = dict(environment or {})

    @property
    def config_dir(self) -> Path:
        return self.workdir / "config"

    def prepare(self) -> None:
        try:
            import dagster_celery  # noqa: F401  (the worker's app; checked here for a clear error)
        except ModuleNotFoundError as exc:
            raise WorkerError("dagster-celery is not installed: run scripts/setup.sh "
                              "(pip install -e '.[dagster-celery]')") from exc
        self.dagster_home.mkdir(parents=True, exist_ok=True)
        write_private(self.config_dir / "dagster_celery_config.py", "".join([
            "# written by resources/workers/dagster_worker.py on every start\n",
            f"broker_url = {self.broker_url!r}\n",
            f"result_backend = {self.result_backend!r}\n",
            "broker_connection_retry_on_startup = True\n",
            # a worker that loses Redis for a moment reconnects instead of exiting
            "broker_connection_max_retries = None\n",
            # dagster-celery's own transport options, and the host's queue read first
            "from dagster_celery.defaults import broker_transport_options\n",
            f"broker_transport_options = {{**broker_transport_options, 'queue_order_strategy': {QUEUE_ORDER_STRATEGY!r}}}\n",
        ]))

    def command(self) -> list[str]:
        return [sys.executable, "-m", "celery", "-A", "dagster_celery.app", "worker", "--loglevel", "INFO",
                "--pool", "prefork", "--concurrency", str(self.concurrency), "--prefetch-multiplier", "1",
                "-Q", ",".join(self.queues), "-n", self.node_name, "--without-mingle", "--without-gossip"]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        paths = [str(self.config_dir), *self.code_paths] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        env.update(self.extra_environment, PYTHONPATH=os.pathsep.join(paths), DAGSTER_HOME=str(self.dagster_home))
        return env


def _database(url: str, number: int) -> str:
    """``url`` (``redis://...[/n]``) on database ``number``."""
    base, _, tail = url.rpartition("/")
    if base.endswith(":/") or not tail.isdigit():  # no database in the URL
        return f"{url.rstrip('/')}/{number}"
    return f"{base}/{number}"
