"""A job whose steps run on the emulated hosts' Dagster celery workers (tests/test_celery_hosts.py),
its outputs in the ring across those hosts (replication factor 3, LOCAL_QUORUM, TLS, the ring's
login) through the project's ``CassandraIOManager``.

``produce_<h>`` runs on host ``h`` (its queue: the ``dagster-celery/queue`` tag), ``transform_<h>``
on the next host, reading what ``produce_<h>`` wrote from there; ``gather`` goes to the shared
queue (whichever worker takes it) and reads all three, each input's chunks at ONE from the member
on the reader's own host (``chunk_reads="auto"``). Every step records the namespace it ran in
(output metadata ``host``) and checks the bytes it read. Where the ring and the broker are comes
from the environment (``EmulatedDeployment.client_environment()``), set in the test's process and
in every worker's."""
from __future__ import annotations

import os

import numpy as np
from dagster import EnvVar, In, Out, job, op
from dagster_celery import celery_executor

from asgard.resources.network.namespace import current_netns
from asgard_dagster import CassandraIOManager, CassandraResource

KEYSPACE = "asgard_hosts"
HOSTS = [f"asgard-h{n}" for n in (1, 2, 3)]
ELEMENTS = 400_000  # int64: 3.2 MiB, four chunks (over the two kept inline in a manifest)
QUEUE_TAG = "dagster-celery/queue"


def piece(i: int) -> np.ndarray:
    return np.full(ELEMENTS, i, dtype=np.int64)


def _where(context) -> None:
    context.add_output_metadata({"host": current_netns() or "root namespace", "pid": os.getpid()})


def _producer(n: int):
    @op(name=f"produce_{n}", tags={QUEUE_TAG: HOSTS[n - 1]}, out=Out(np.ndarray))
    def produce(context):
        _where(context)
        return piece(n)

    return produce


def _transformer(n: int):
    @op(name=f"transform_{n}", tags={QUEUE_TAG: HOSTS[n % len(HOSTS)]}, ins={"arr": In(np.ndarray)},
        out=Out(np.ndarray))
    def transform(context, arr):
        if not np.array_equal(arr, piece(n)):
            raise AssertionError(f"produce_{n}'s output read back on {current_netns()} differs from the one written")
        _where(context)
        return arr * 2

    return transform


@op(ins={f"part_{n}": In(np.ndarray) for n in (1, 2, 3)})
def gather(context, part_1, part_2, part_3) -> int:
    total = int(sum(int(p.sum()) for p in (part_1, part_2, part_3)))
    expected = sum(2 * n * ELEMENTS for n in (1, 2, 3))
    if total != expected:
        raise AssertionError(f"gathered {total}, expected {expected}")
    _where(context)
    return total


def _connection() -> CassandraResource:
    return CassandraResource(
        contact_points=[c for c in os.environ.get("ASGARD_RING_CONTACTS", "127.0.0.1").split(",") if c],
        keyspace=KEYSPACE, replication_factor=3, consistency="LOCAL_QUORUM",
        username=EnvVar("ASGARD_RING_USER"), password=EnvVar("ASGARD_RING_PASSWORD"),
        ssl_ca_file=os.environ.get("ASGARD_RING_CA"), ride_through_seconds=120.0,
        chunk_reads="auto")  # each reader's chunks at ONE from its own host's member


_produce = [_producer(n) for n in (1, 2, 3)]
_transform = [_transformer(n) for n in (1, 2, 3)]


@job(resource_defs={"io_manager": CassandraIOManager(cassandra=_connection())},
     executor_def=celery_executor.configured({"broker": {"env": "ASGARD_CELERY_BROKER"},
                                              "backend": {"env": "ASGARD_CELERY_BACKEND"}}))
def celery_hosts_job():
    parts = [t(p()) for p, t in zip(_produce, _transform)]
    gather(*parts)
