"""A fan-out/fan-in job on the 3-instance ring (127.0.0.11-13) with replication factor 2 and
consistency ONE, for the test that kills an instance in the middle of it. Every mapped step
checks the bytes it read, so a wrong or torn read fails the run."""
from __future__ import annotations

import time

import numpy as np
from dagster import DynamicOut, DynamicOutput, job, op

from asgard_dagster import CassandraIOManager, CassandraResource
from tests.forkserver_steps import FORKSERVER_EXECUTOR

KEYSPACE = "asgard_rf2"
PIECES = 8


def piece(i: int) -> np.ndarray:
    return np.full(250_000, i, dtype=np.int64)  # 2 MiB: chunked


@op(out=DynamicOut())
def scatter():
    for i in range(PIECES):
        yield DynamicOutput(piece(i), mapping_key=str(i))


@op
def work(arr) -> np.ndarray:
    i = int(arr[0])
    if not np.array_equal(arr, piece(i)):
        raise AssertionError(f"piece {i} read back differs from the one written")
    time.sleep(1.0)  # long enough for the instance to die while steps are in flight
    return arr * 2


@op
def gather(parts) -> int:
    total = int(sum(int(p.sum()) for p in parts))
    expected = sum(2 * i * 250_000 for i in range(PIECES))
    if total != expected:
        raise AssertionError(f"gathered {total}, expected {expected}")
    return total


@job(resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(
        contact_points=["127.0.0.11", "127.0.0.12", "127.0.0.13"], keyspace=KEYSPACE, replication_factor=2,
        consistency="ONE"))},
     executor_def=FORKSERVER_EXECUTOR)  # its runs go through forkserver_with_this_environment
def ring_fault_job():
    gather(scatter().map(work).collect())
