"""Jobs for tests/test_chunk_reads.py (module level: the multiprocess executor reconstructs them)."""
from __future__ import annotations

import numpy as np
from dagster import In, Out, job, op

from asgard_dagster import CassandraIOManager, CassandraResource
from tests.forkserver_steps import FORKSERVER_EXECUTOR  # runs go through forkserver_with_this_environment

ROWS = 500_000  # 4 MiB of floats: 4 chunks of 1 MiB, over the 2 MiB kept inline in a manifest


def values(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(ROWS)


def _resources() -> dict:
    return {"io_manager": CassandraIOManager(cassandra=CassandraResource(keyspace="asgard_test"))}


@op(out=Out(metadata={"asgard/chunk_reads": "nearest-one"}))
def broadcast() -> np.ndarray:
    return values(1)  # its output says how its readers read it


@op
def plain() -> np.ndarray:
    return values(2)  # nothing said: the store's chunk_reads


@op
def total_inherits(data: np.ndarray) -> float:
    return float(data.sum())


@op(ins={"data": In(metadata={"asgard/chunk_reads": "quorum"})})
def total_overrides(data: np.ndarray) -> float:
    return float(data.sum())  # the input's own choice wins over its producer's


@op
def total_plain(data: np.ndarray) -> float:
    return float(data.sum())


@job(resource_defs=_resources(), executor_def=FORKSERVER_EXECUTOR)
def chunk_reads_job():
    data = broadcast()
    total_inherits(data)
    total_overrides(data)
    total_plain(plain())


@op(ins={"data": In(metadata={"asgard/chunk_reads": "fastest"})})
def total_misnamed(data: np.ndarray) -> float:
    return float(data.sum())


@job(resource_defs=_resources(), executor_def=FORKSERVER_EXECUTOR)
def misnamed_chunk_reads_job():
    total_misnamed(plain())
