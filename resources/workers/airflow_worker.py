"""Airflow's CeleryExecutor across the emulated hosts: an ``airflow celery worker`` per host and the
API server its tasks report to, each a managed server (design: ``docs/design/airflow-celery-hosts.md``).

A task queued by the CeleryExecutor (the scheduler's, or ``airflow dags test --use-executor``'s)
goes through the broker to a worker taking its ``queue``; the worker runs it in a process of its
own, which talks to the API server's execution API only (Airflow 3 workers never open the metadata
database) and pushes and pulls XComs through the configured backend, here the ring. So:

* the API server runs on this machine's bridge address, which every host reaches, on the
  deployment's SQLite database (only it and the coordinator write there);
* each worker takes its host's queue and ``default`` (``[operators] default_queue``), and names
  itself ``airflow@<host>``;
* every host's namespace has this machine's hostname, so a task's ``hostname`` (what the UI fetches
  its log from) is the host's address, from :func:`hostname` (``[core] hostname_callable``).

Example::

    api = AirflowApiServer("10.213.0.1", environment)     # `airflow db migrate`, then the server
    api.start()
    AirflowCeleryWorker("asgard-h1", "10.213.0.11", environment, netns="asgard-h1").start()
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from ..paths import run_dir
from ..process import ManagedServer, ServerError
from .celery_worker import CeleryWorker

#: the deployment's airflow_local_settings.py (asgard_airflow.task_routing, on [asgard] host_queues)
ROUTING_POLICY = "from asgard_airflow.task_routing import task_instance_mutation_hook  # noqa: F401\n"
#: a worker's airflow_local_settings.py: the module its tasks would import after the fork, imported
#: once when celery starts the worker, before its pool forks (each task's process is forked from it)
WORKER_PRELOAD = """from celery.signals import worker_init


@worker_init.connect
def _preload(**_):
    import importlib

    importlib.import_module({module!r})
"""

API_PORT = 8080
#: the queue every worker takes besides its host's (Airflow's ``[operators] default_queue``)
DEFAULT_QUEUE = "default"
#: the variable :func:`hostname` reads: the address the host's processes are reached at
HOST_ADDRESS_VARIABLE = "ASGARD_HOST_ADDRESS"
AIRFLOW = str(Path(sys.executable).parent / "airflow")

__all__ = ["AirflowApiServer", "AirflowCeleryWorker", "AirflowSetupError", "hostname", "API_PORT", "DEFAULT_QUEUE"]


class AirflowSetupError(ServerError):
    """Airflow's database could not be made ready for the deployment's API server."""


def hostname() -> str:
    """A task instance's ``hostname`` on an emulated host: the host's address (its namespaces share
    this machine's UTS name), else this machine's FQDN as Airflow's default."""
    return os.environ.get(HOST_ADDRESS_VARIABLE) or socket.getfqdn()


class AirflowApiServer(ManagedServer):
    """``airflow api-server`` on ``address`` (the bridge's), over the deployment's database.

    Args:
        address: where the workers' tasks reach the execution API.
        environment: the deployment's Airflow settings (``AIRFLOW__*``), the database's included.
        airflow_home: its ``AIRFLOW_HOME``.
    """

    start_timeout = 180.0

    def __init__(self, address: str, environment: dict[str, str], airflow_home: Path | None = None,
                 port: int = API_PORT, workdir: Path | None = None):
        super().__init__("airflow-api-server", workdir or run_dir("deployment", "airflow-api-server"))
        self.address, self.port = address, port
        self.airflow_environment = dict(environment)
        self.airflow_home = Path(airflow_home) if airflow_home else self.workdir / "airflow_home"

    @property
    def endpoint(self) -> str:
        return f"http://{self.address}:{self.port}"

    def environment(self) -> dict[str, str]:
        return {**os.environ, **self.airflow_environment, "AIRFLOW_HOME": str(self.airflow_home)}

    def prepare(self) -> None:
        self.airflow_home.mkdir(parents=True, exist_ok=True)
        # the cluster policy of every Airflow command on this AIRFLOW_HOME (a coordinator's scheduler):
        # a mapped task's instance to the host that ran the upstream instance it reads
        policy = self.airflow_home / "config" / "airflow_local_settings.py"
        policy.parent.mkdir(parents=True, exist_ok=True)
        policy.write_text(ROUTING_POLICY)
        out = subprocess.run([AIRFLOW, "db", "migrate"], env=self.environment(), capture_output=True, text=True,
                             timeout=600)
        if out.returncode != 0:
            raise AirflowSetupError(f"`airflow db migrate` failed for the deployment's API server:\n{out.stderr[-2000:]}")

    def command(self) -> list[str]:
        return [AIRFLOW, "api-server", "--host", self.address, "--port", str(self.port), "--workers", "1"]

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/api/v2/monitor/health", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False


class AirflowCeleryWorker(CeleryWorker):
    """The Airflow celery worker of host ``host``: its queue is the host's name.

    Args:
        host: the host's name (its queue, and its worker's node name ``airflow@<host>``).
        address: the host's address, given to its tasks as their ``hostname``.
        environment: the deployment's Airflow settings (broker, result backend, execution API URL,
            secrets, the XCom backend's ``[asgard]`` settings).
        netns: the host's namespace.
        airflow_home: its ``AIRFLOW_HOME`` (its tasks' logs), on the host's own root.
        concurrency: tasks the worker runs at once.
        preload: a module the worker imports before it forks any task (what its tasks import
            after the fork, e.g. ``asgard.pipelines.airflow_task_preload``), or None.
    """

    start_timeout = 120.0
    app_name = "airflow"
    shared_queue = DEFAULT_QUEUE

    def __init__(self, host: str, address: str, environment: dict[str, str], netns: str | None = None,
                 airflow_home: Path | None = None, concurrency: int = 1, workdir: Path | None = None,
                 preload: str | None = None):
        super().__init__(f"airflow-worker-{host}", workdir or run_dir("workers", host, "airflow"), host,
                         environment["AIRFLOW__CELERY__BROKER_URL"], environment["AIRFLOW__CELERY__RESULT_BACKEND"],
                         netns=netns, concurrency=concurrency)
        self.address = address
        self.airflow_environment = dict(environment)
        self.airflow_home = Path(airflow_home) if airflow_home else self.workdir / "airflow_home"
        self.preload = preload

    def environment(self) -> dict[str, str]:
        return {**os.environ, **self.airflow_environment, "AIRFLOW_HOME": str(self.airflow_home),
                HOST_ADDRESS_VARIABLE: self.address}

    def prepare(self) -> None:
        # Airflow imports $AIRFLOW_HOME/config/airflow_local_settings.py in each process it starts on this
        # home: here the worker, whose tasks' processes are forked from it
        settings = self.airflow_home / "config" / "airflow_local_settings.py"
        settings.parent.mkdir(parents=True, exist_ok=True)
        if self.preload:
            settings.write_text(WORKER_PRELOAD.format(module=self.preload))
        else:
            settings.unlink(missing_ok=True)

    def command(self) -> list[str]:
        return [AIRFLOW, "celery", "worker", "-H", self.node_name, "-q", ",".join(self.queues),
                "-c", str(self.concurrency), "--without-mingle", "--without-gossip"]
