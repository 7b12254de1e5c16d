"""The applications on the emulated hosts (``asgard hosts up``): dagster-celery's executor, whose
workers (one per host) take the steps of one run, and IO managers on the stores every host reaches:
the ring across the hosts (replication factor 3, TLS, the ring's login) and the deployment's MinIO
on the bridge (the S3 peers). Where they are comes from the environment
(:meth:`~asgard.resources.workers.deployment.EmulatedDeployment.client_environment`), which the
run's coordinator sets and every worker is started with; secrets go through ``EnvVar``.

``make_job(app, backend, network=HOSTS_NETWORK)`` (:mod:`asgard.pipelines.jobs`) binds these.
"""
from __future__ import annotations

import os

import dagster as dg

#: the network name of the emulated hosts' deployment (beside the profiles of asgard.resources.network)
HOSTS_NETWORK = "hosts3"
#: the keyspace of the day's outputs on the ring (the ring test's is asgard_hosts)
KEYSPACE = "asgard_day"
REPLICATION_FACTOR = 3
#: the backends a job on the hosts can store into (a store every host reaches)
HOSTS_BACKENDS = ("cassandra", "s3", "s3_stock")


class HostsEnvironmentError(RuntimeError):
    """A job on the emulated hosts was built where the deployment's environment is not set.

    Attributes:
        missing: the variables that are not set.
    """

    def __init__(self, missing: list[str]):
        self.missing = missing
        super().__init__(f"{', '.join(missing)} not set: `asgard hosts up`, then set what `asgard hosts env` "
                         "prints in the process that launches the run")


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise HostsEnvironmentError([name])
    return value


def ring_contacts() -> list[str]:
    return [c for c in _env("ASGARD_RING_CONTACTS").split(",") if c]


def celery_executor() -> dg.ExecutorDefinition:
    """dagster-celery's executor on the deployment's broker, host-routed
    (:mod:`asgard_dagster.step_routing`): a step that alone reads its producer's output goes to the
    queue of the host that ran the producer; any other untagged step to the shared queue, which
    every host's worker takes."""
    from asgard_dagster.step_routing import host_routed_celery_executor

    queues = [q for q in _env("ASGARD_CELERY_HOST_QUEUES").split(",") if q]
    return host_routed_celery_executor.configured(
        {"broker": {"env": "ASGARD_CELERY_BROKER"}, "backend": {"env": "ASGARD_CELERY_BACKEND"},
         "host_queues": queues}, name="celery_hosts")


def hosts_io_manager(backend: str):
    """The IO manager of ``backend`` on the hosts' stores."""
    if backend not in HOSTS_BACKENDS:
        raise ValueError(f"backend {backend!r} is not reachable from the emulated hosts; choose from {HOSTS_BACKENDS}")
    from dagster import EnvVar

    if backend == "cassandra":
        from asgard_dagster import CassandraIOManager, CassandraResource

        return CassandraIOManager(cassandra=CassandraResource(
            contact_points=ring_contacts(), keyspace=KEYSPACE, replication_factor=REPLICATION_FACTOR,
            username=EnvVar("ASGARD_RING_USER"), password=EnvVar("ASGARD_RING_PASSWORD"),
            ssl_ca_file=_env("ASGARD_RING_CA"), ride_through_seconds=120.0))
    endpoint = _env("ASGARD_HOSTS_S3_ENDPOINT")
    _env("ASGARD_HOSTS_S3_ACCESS_KEY")
    if backend == "s3":
        from asgard_dagster import S3IOManager, S3StoreResource

        return S3IOManager(s3=S3StoreResource(endpoint_url=endpoint,
                                              aws_access_key_id=EnvVar("ASGARD_HOSTS_S3_ACCESS_KEY"),
                                              aws_secret_access_key=EnvVar("ASGARD_HOSTS_S3_SECRET_KEY")))
    from dagster_aws.s3 import S3PickleIOManager, S3Resource

    return S3PickleIOManager(
        s3_resource=S3Resource(endpoint_url=endpoint, region_name="us-east-1",
                               aws_access_key_id=EnvVar("ASGARD_HOSTS_S3_ACCESS_KEY"),
                               aws_secret_access_key=EnvVar("ASGARD_HOSTS_S3_SECRET_KEY")),
        s3_bucket="asgard", s3_prefix="dagster-stock")


def hosts_store_kwargs(backend: str) -> dict:
    """``open_store`` keywords of ``backend`` on the hosts' stores (from the coordinator)."""
    if backend == "cassandra":
        return {"contact_points": ring_contacts(), "username": _env("ASGARD_RING_USER"),
                "password": _env("ASGARD_RING_PASSWORD"), "ssl_ca_file": _env("ASGARD_RING_CA")}
    return {"endpoint_url": _env("ASGARD_HOSTS_S3_ENDPOINT"), "aws_access_key_id": _env("ASGARD_HOSTS_S3_ACCESS_KEY"),
            "aws_secret_access_key": _env("ASGARD_HOSTS_S3_SECRET_KEY")}
