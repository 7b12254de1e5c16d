"""The whole emulated deployment of a distributed executor: ``count`` hosts (network namespaces on
one bridge, :class:`~asgard.resources.network.hosts.EmulatedHosts`), each with its member of one
Cassandra ring (:class:`~asgard.resources.cassandra.hosts.HostRing`: TLS, one login, one rack per
host) and its Dagster celery worker; the broker is a Redis on this machine's bridge address, which
every host reaches, as the run's coordinator (the process that calls ``execute_job``) does, and a
MinIO beside it (port 9300) for the S3 peers::

    this machine (root namespace)          asgard-h1 (10.213.0.11)   asgard-h2 (...21)   asgard-h3
      run coordinator, Redis broker  <-->    ring member, worker       ring member, ...    ...
      10.213.0.1:6390                        queue asgard-h1           queue asgard-h2

State lives in ``$ASGARD_HOME/run/deployment`` (its ``deployment.json`` says how many hosts and the
workers' code paths, for a later ``down`` or ``status``); each host's processes (its ring member,
its agent of the ring's orders, its worker's ``ASGARD_HOME``) keep theirs on the host's own root,
``run/hosts/h<h>``, as :func:`~asgard.resources.cassandra.hosts.emulated_host_ring` does. The namespaces,
the bridge and ``run/hosts`` are the same as ``tests/test_hosts_ring.py``'s: one of the two at a time.

Example::

    deployment = EmulatedDeployment(3, code_paths=["."]).up()   # ~2 min: hosts, ring, broker, workers
    os.environ.update(deployment.client_environment())           # the ring's login, the broker
    execute_job(reconstructable(my_job), instance=instance)      # on celery_executor: steps on the hosts
    deployment.down()
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from pathlib import Path

from ..paths import run_dir, write_private
from ..process import ServerError, start_all, stop_all
from .airflow_worker import AirflowApiServer, AirflowCeleryWorker
from .celery_worker import QUEUE_ORDER_STRATEGY
from .dagster_worker import DagsterCeleryWorker

BROKER_PORT = 6390  # not the loopback Redis's 6380: both run at once in the test suite
OBJECT_STORE_PORT = 9300
AIRFLOW_API_PORT = 8080  # the hosts' MinIO (the S3 peers), not the loopback one's 9000
RING_KEYSPACE = "asgard_hosts"
#: the DAGs the Airflow workers run by default: the project's (the paper's applications)
DEFAULT_AIRFLOW_DAGS = Path(__file__).resolve().parents[2] / "pipelines" / "airflow_dags"
#: what the tasks of those DAGs import, imported by each Airflow worker before it forks them
AIRFLOW_TASK_PRELOAD = "asgard.pipelines.airflow_task_preload"
#: Airflow's broker and result backend: databases of their own on the broker's Redis (dagster-celery's
#: 0 and 1 hold queues of the same names, which a dagster worker would take from)
AIRFLOW_BROKER_DB, AIRFLOW_BACKEND_DB = 2, 3
#: what a job's resources and the executor's config read (asgard.pipelines.ring_check's names)
CLIENT_VARIABLES = ("ASGARD_RING_CONTACTS", "ASGARD_RING_CA", "ASGARD_RING_USER", "ASGARD_RING_PASSWORD",
                    "ASGARD_CELERY_BROKER", "ASGARD_CELERY_BACKEND", "ASGARD_CELERY_HOST_QUEUES", "ASGARD_HOSTS_S3_ENDPOINT",
                    "ASGARD_HOSTS_S3_ACCESS_KEY", "ASGARD_HOSTS_S3_SECRET_KEY")


class DeploymentError(ServerError):
    """The emulated deployment is not up (or not as the command needs it)."""


class EmulatedDeployment:
    """``count`` emulated hosts, each with a ring member and a Dagster celery worker, and the broker.

    Args:
        count: hosts (3 for a ring at replication factor 3).
        heap: each ring member's heap.
        code_paths: directories the workers import the user's code from.
        worker_concurrency: steps each worker runs at once.
        link_mbit: each host's link, Mbit/s each way (``None``: as before, or the unshaped bridge; 0: unshaped).
    """

    def __init__(self, count: int | None = None, heap: str | None = None, code_paths: list[str | Path] | None = None,
                 worker_concurrency: int | None = None, airflow_dags: str | Path | None = None,
                 link_mbit: int | None = None):
        saved = self._saved()
        self.count = count or saved.get("count", 3)
        self.heap = heap or saved.get("heap", "768M")
        self.code_paths = [str(Path(p).resolve()) for p in (code_paths if code_paths is not None
                                                             else saved.get("code_paths", []))]
        self.worker_concurrency = worker_concurrency or saved.get("worker_concurrency", 1)
        self.airflow_dags = str(Path(airflow_dags or saved.get("airflow_dags") or DEFAULT_AIRFLOW_DAGS).resolve())
        self.link_mbit = (link_mbit if link_mbit is not None else saved.get("link_mbit")) or None
        from ..network.hosts import EmulatedHosts

        self.hosts = EmulatedHosts(self.count, numa_nodes=2, addresses_per_host=1)

    # --- where things are -------------------------------------------------------------------
    @staticmethod
    def state_dir() -> Path:
        return run_dir("deployment")

    @classmethod
    def _state_file(cls) -> Path:
        return cls.state_dir() / "deployment.json"

    @classmethod
    def _saved(cls) -> dict:
        try:
            return json.loads(cls._state_file().read_text())
        except (FileNotFoundError, ValueError):
            return {}

    @property
    def ring_ca(self) -> Path:
        return self.state_dir() / "ring-ca"

    @property
    def dagster_home(self) -> Path:
        """The workers' ``DAGSTER_HOME`` (a run coordinator on this machine may share it)."""
        return self.state_dir() / "dagster_home"

    def ring(self):
        """The ring of the hosts' members (needs the hosts up: each member's plan reads its host's sysfs)."""
        from ..cassandra.hosts import HostRing

        return HostRing(self.hosts.hosts, ring_ca=self.ring_ca, heap=self.heap, instances_per_host=1,
                        replication_factor=min(3, self.count))

    def broker(self):
        from ..redis import RedisServer

        password_file = self.state_dir() / "broker.password"
        if not password_file.exists():
            write_private(password_file, secrets.token_urlsafe(24) + "\n")
        # a password, not protected mode: the hosts reach it over the bridge, which is not loopback
        broker = RedisServer(host=self.hosts.bridge_address, port=BROKER_PORT, maxmemory="256mb",
                             password=password_file.read_text().strip(), workdir=self.state_dir() / "broker")
        broker.name = "broker"  # not the loopback baseline's "redis"
        return broker

    def object_store(self):
        """A MinIO on the bridge, which every host reaches: the S3 peers of runs on the hosts."""
        from ..minio import MinioServer

        store = MinioServer(host=self.hosts.bridge_address, port=OBJECT_STORE_PORT,
                            console_port=OBJECT_STORE_PORT + 1, workdir=self.state_dir() / "minio")
        store.name = "hosts-minio"  # not the loopback baseline's "minio"
        return store

    def _redis_url(self, database: int) -> str:
        broker = self.broker()
        return f"redis://:{broker.password}@{broker.host}:{broker.port}/{database}"

    @property
    def broker_url(self) -> str:
        """The Celery broker: database 0 of the broker's Redis."""
        return self._redis_url(0)

    @property
    def result_backend(self) -> str:
        """Where the workers send step events back: database 1 of the same Redis."""
        return self._redis_url(1)

    def workers(self) -> list[DagsterCeleryWorker]:
        environment = self.client_environment()  # the executor's config reads the broker's variables too
        return [DagsterCeleryWorker(host.name, self.broker_url, self.result_backend, netns=host.netns,
                                    code_paths=self.code_paths, dagster_home=self.dagster_home,
                                    environment={**environment, **host.environment()},
                                    concurrency=self.worker_concurrency,
                                    workdir=self.state_dir() / "workers" / host.name)
                for host in self.hosts.hosts]

    def _secret(self, name: str) -> str:
        """A secret of the deployment's, made once (0600 in its state folder)."""
        path = self.state_dir() / name
        if not path.exists():
            write_private(path, secrets.token_urlsafe(32) + "\n")
        return path.read_text().strip()

    def airflow_environment(self) -> dict[str, str]:
        """Airflow's settings for every part of the deployment (``AIRFLOW__*``): the CeleryExecutor on
        the broker, the execution API on the bridge, the secrets its parts share, and the XCom
        backend on the ring (its login from the environment, as Airflow's secrets should)."""
        ring = self.ring_environment()
        return {
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": self.airflow_dags,
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__XCOM_BACKEND": "asgard_airflow.CassandraXComBackend",
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "asgard.resources.workers.airflow_worker.hostname",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.airflow_api_server_url()}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.state_dir() / 'airflow' / 'airflow.db'}",
            "AIRFLOW__CELERY__BROKER_URL": self._redis_url(AIRFLOW_BROKER_DB),
            "AIRFLOW__CELERY__RESULT_BACKEND": self._redis_url(AIRFLOW_BACKEND_DB),
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__QUEUE_ORDER_STRATEGY": QUEUE_ORDER_STRATEGY,
            # the API server checks the tokens the executor signs, and signs its log requests to workers
            "AIRFLOW__API_AUTH__JWT_SECRET": self._secret("airflow-jwt.secret"),
            "AIRFLOW__API__SECRET_KEY": self._secret("airflow-api.secret"),
            "AIRFLOW__ASGARD__BACKEND": "cassandra",
            "AIRFLOW__ASGARD__CONTACT_POINTS": ring["ASGARD_RING_CONTACTS"],
            "AIRFLOW__ASGARD__KEYSPACE": RING_KEYSPACE,
            "AIRFLOW__ASGARD__REPLICATION_FACTOR": str(min(3, self.count)),
            "AIRFLOW__ASGARD__SSL_CA_FILE": ring["ASGARD_RING_CA"],
            "AIRFLOW__ASGARD__USERNAME": ring["ASGARD_RING_USER"],
            "AIRFLOW__ASGARD__PASSWORD": ring["ASGARD_RING_PASSWORD"],
            "AIRFLOW__ASGARD__RIDE_THROUGH_SECONDS": "120",
            # each host's queue by the hostname its tasks record (asgard_airflow.task_routing)
            "AIRFLOW__ASGARD__HOST_QUEUES": ",".join(f"{h.address}={h.name}" for h in self.hosts.hosts),
        }

    def airflow_coordinator_environment(self) -> dict[str, str]:
        """What a coordinator on this machine runs Airflow with (``airflow dags test --use-executor``,
        a scheduler): the deployment's settings and the API server's ``AIRFLOW_HOME``."""
        return {**self.airflow_environment(), "AIRFLOW_HOME": str(self.state_dir() / "airflow")}

    def airflow_api_server_url(self) -> str:
        return f"http://{self.hosts.bridge_address}:{AIRFLOW_API_PORT}"

    def airflow_api_server(self) -> AirflowApiServer:
        """Airflow's API server on the bridge: the execution API its workers' tasks report to."""
        return AirflowApiServer(self.hosts.bridge_address, self.airflow_environment(), port=AIRFLOW_API_PORT,
                                airflow_home=self.state_dir() / "airflow", workdir=self.state_dir() / "airflow-api-server")

    def airflow_workers(self, overrides: dict[str, str] | None = None) -> list[AirflowCeleryWorker]:
        """Each host's Airflow worker, on the deployment's settings and ``overrides`` (a task's XCom
        backend reads its settings in the worker's process: a bench changes them by a restart)."""
        environment = {**self.airflow_environment(), **(overrides or {})}
        return [AirflowCeleryWorker(host.name, host.address, {**environment, **host.environment()},
                                    netns=host.netns, airflow_home=host.root / "airflow",
                                    concurrency=self.worker_concurrency,
                                    workdir=self.state_dir() / "workers" / host.name / "airflow",
                                    preload=AIRFLOW_TASK_PRELOAD if self.airflow_dags == str(DEFAULT_AIRFLOW_DAGS) else None)
                for host in self.hosts.hosts]

    def agents(self) -> list:
        """Each host's agent of the ring's orders (a process in its namespace, on its root)."""
        from ..cassandra.host_agent import HostAgentProcess

        return [HostAgentProcess(host.name, host.root, netns=host.netns) for host in self.hosts.hosts]

    def ring_environment(self) -> dict[str, str]:
        """The ring's contact points, CA and login, as the job's resources read them."""
        password = self.ring_ca / "superuser.password"
        return {"ASGARD_RING_CONTACTS": ",".join(h.address for h in self.hosts.hosts),
                "ASGARD_RING_CA": str(self.ring_ca / "ca.pem"), "ASGARD_RING_USER": "asgard_admin",
                "ASGARD_RING_PASSWORD": password.read_text().strip() if password.exists() else ""}

    def client_environment(self) -> dict[str, str]:
        """What the run coordinator sets: the ring's login and the executor's broker and backend
        (``celery_executor`` config ``{"broker": {"env": "ASGARD_CELERY_BROKER"}, ...}``)."""
        s3 = self.object_store()
        return {**self.ring_environment(), "ASGARD_CELERY_BROKER": self.broker_url,
                "ASGARD_CELERY_BACKEND": self.result_backend,
                # each host's worker takes the queue of its host's name (a step routed to that host)
                "ASGARD_CELERY_HOST_QUEUES": ",".join(h.name for h in self.hosts.hosts),
                "ASGARD_HOSTS_S3_ENDPOINT": s3.endpoint,
                "ASGARD_HOSTS_S3_ACCESS_KEY": s3.access_key, "ASGARD_HOSTS_S3_SECRET_KEY": s3.secret_key}

    @contextlib.contextmanager
    def client_environment_set(self):
        """This process with :meth:`client_environment` set (a run coordinator's), put back as it
        was afterwards."""
        saved = {name: os.environ.get(name) for name in CLIENT_VARIABLES}
        os.environ.update(self.client_environment())
        try:
            yield self
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    # --- lifecycle ----------------------------------------------------------------------------
    def hosts_up(self) -> bool:
        from ..network.namespace import namespaces

        present = set(namespaces())
        return all(h.netns in present for h in self.hosts.hosts)

    def up(self) -> "EmulatedDeployment":
        """Hosts, ring, broker and workers; what already runs is kept (the ring is made afresh only
        with its hosts). About two minutes from nothing on a 2-core machine, most of it the ring."""
        self.seconds: dict[str, float] = {}
        write_private(self._state_file(), json.dumps({"count": self.count, "heap": self.heap,
                                                      "code_paths": self.code_paths,
                                                      "worker_concurrency": self.worker_concurrency,
                                                      "airflow_dags": self.airflow_dags,
                                                      "link_mbit": self.link_mbit}))
        if not self.hosts_up():
            self._fresh_hosts()
        self.hosts.shape_links(self.link_mbit)  # running hosts too: `up --link-mbit` changes only the links
        ring = self.ring()
        if not all(m.is_running() for m in ring.members):
            self.seconds.update(ring.start())
        for agent in self.agents():  # each host's `asgard cassandra host agent`, on its own root
            self.seconds[agent.name] = agent.start()
        self.seconds["broker"] = self.broker().start()
        self.seconds["hosts-minio"] = self.object_store().start()
        self.workers_up()
        return self

    def _fresh_hosts(self) -> None:
        from ..cassandra.hosts import stop_leftovers
        from ..cassandra.ring_ca import create_ring_ca

        for worker in self._all_workers():  # a worker of a namespace that is gone cannot be reached
            worker.stop()
        stop_leftovers()
        shutil.rmtree(run_dir("hosts"), ignore_errors=True)
        shutil.rmtree(self.ring_ca, ignore_errors=True)
        self.ring_ca.mkdir(parents=True)
        create_ring_ca(self.ring_ca)  # the operator's step: members never make a CA or password of their own
        self.hosts.up()

    def workers_up(self) -> dict[str, float]:
        """One worker per host (the hosts and the broker must be up)."""
        if not self.hosts_up():
            raise DeploymentError(f"the {self.count} emulated hosts are not up: `asgard hosts up` first")
        if not self.broker().is_ready():
            raise DeploymentError(f"the broker {self.broker().endpoint} does not answer: `asgard hosts up` first")
        seconds = start_all(self.workers())
        # Airflow's: the API server its tasks report to, then a worker per host
        api = self.airflow_api_server()
        seconds[api.name] = api.start()
        seconds.update(start_all(self.airflow_workers()))
        getattr(self, "seconds", {}).update(seconds)
        return seconds

    def _all_workers(self) -> list:
        return [*self.workers(), *self.airflow_workers(), self.airflow_api_server()]

    def workers_down(self) -> None:
        stop_all(self._all_workers())

    def down(self) -> None:
        """Workers, ring, broker and hosts stopped and removed, with the ring's and the MinIO's data
        (ephemeral: the stock S3 peer never deletes what a run stored)."""
        from ..cassandra.hosts import stop_leftovers

        self.workers_down()
        # killed, not drained: their data goes next (a drain of three members took 35 s)
        stop_leftovers()
        self.broker().stop()
        self.object_store().stop()
        shutil.rmtree(self.object_store().data_dir, ignore_errors=True)
        self.hosts.down()
        shutil.rmtree(run_dir("hosts"), ignore_errors=True)
        shutil.rmtree(self.ring_ca, ignore_errors=True)

    def status(self) -> list[dict]:
        from ..numa import NumaPlanError

        rows = []
        if self.hosts_up():
            try:
                rows += [m.status() for m in self.ring().members]
            except NumaPlanError:
                pass
            for host, rate in zip(self.hosts.hosts, self.hosts.link_rates().values()):
                rows.append({"name": f"link-h{host.number}", "running": True, "ready": True, "link_mbit": rate,
                             "endpoint": f"{rate} Mbit/s" if rate else "unshaped", "pid": None,
                             "log": f"tc class show dev {host.link_ends[0]}"})
        rows += [a.status() for a in self.agents()]
        rows.append(self.broker().status())
        rows.append(self.object_store().status())
        rows += [w.status() for w in self._all_workers()]
        return rows
