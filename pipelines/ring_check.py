"""A fan-out/fan-in job that checks a ring across hosts (tests/test_hosts_ring.py, ``asgard bench
nemesis``): replication factor 3 at LOCAL_QUORUM, over TLS with the ring's login. Where the ring is comes from the
environment the caller sets before its first run: ASGARD_RING_CONTACTS, ASGARD_RING_CA, ASGARD_RING_USER,
ASGARD_RING_PASSWORD. Each step's process forks from the executor's forkserver, started by the process's first
run, and has the environment that server started with. Every mapped step checks the bytes it read."""
from __future__ import annotations

import os
import time

import numpy as np
from dagster import DynamicOut, DynamicOutput, EnvVar, job, multiprocess_executor, op

from asgard_dagster import CassandraIOManager, CassandraResource

KEYSPACE = "asgard_hosts"
PIECES = 6


def piece(i: int) -> np.ndarray:
    return np.full(200_000, i, dtype=np.int64)  # 1.6 MiB: two chunks


@op(out=DynamicOut())
def scatter():
    for i in range(PIECES):
        yield DynamicOutput(piece(i), mapping_key=str(i))


@op
def work(arr) -> np.ndarray:
    i = int(arr[0])
    if not np.array_equal(arr, piece(i)):
        raise AssertionError(f"piece {i} read back differs from the one written")
    time.sleep(float(os.environ.get("ASGARD_RING_STEP_SLEEP", "0.5")))  # steps in flight when a host dies
    return arr * 2


@op
def gather(parts) -> int:
    total = int(sum(int(p.sum()) for p in parts))
    expected = sum(2 * i * 200_000 for i in range(PIECES))
    if total != expected:
        raise AssertionError(f"gathered {total}, expected {expected}")
    return total


def _connection() -> CassandraResource:
    return CassandraResource(
        contact_points=[c for c in os.environ.get("ASGARD_RING_CONTACTS", "127.0.0.1").split(",") if c],
        keyspace=KEYSPACE, replication_factor=3, consistency="LOCAL_QUORUM",
        # the nemesis kills members with kill -9: without the commit log (the store's default) a
        # member loses what it had not flushed, and three members crashing in turn between flushes
        # lose a row on every replica (318 of 923 outputs in a run with 20 host restarts)
        durable_writes=True,
        username=EnvVar("ASGARD_RING_USER"), password=EnvVar("ASGARD_RING_PASSWORD"),
        ssl_ca_file=os.environ.get("ASGARD_RING_CA"), ride_through_seconds=120.0)


# forked steps: a spawned one imports Dagster and the driver itself, about 4.5 CPU-s on 2 cores, and a nemesis
# loops runs for many minutes beside the ring it checks (docs/results/ci-time.txt)
@job(resource_defs={"io_manager": CassandraIOManager(cassandra=_connection())},
     executor_def=multiprocess_executor.configured(
         {"max_concurrent": 2, "start_method": {"forkserver": {"preload_modules": [
             "asgard.pipelines.ring_check", "asgard.pipelines.forkserver_preload"]}}},
         name="multiprocess_forkserver_2"))
def hosts_ring_job():
    gather(scatter().map(work).collect())
