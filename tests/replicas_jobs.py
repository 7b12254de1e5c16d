"""Jobs for tests/test_replicas_per_object.py (module level: the multiprocess executor reconstructs them)."""
from __future__ import annotations

import numpy as np
from dagster import Out, job, multiprocess_executor, op

from asgard_dagster import CassandraIOManager, CassandraResource

#: a keyspace at factor 2 on the single local node: written at ONE, so a second replica is not needed
KEYSPACE = "asgard_test_rf2"
ROWS = 1_500_000  # 11.4 MiB of float64: 12 chunks


def _io_manager() -> CassandraIOManager:
    return CassandraIOManager(cassandra=CassandraResource(keyspace=KEYSPACE, replication_factor=2,
                                                          consistency="ONE"))


@op(out=Out(metadata={"asgard/replicas": 1}))
def intermediate() -> np.ndarray:
    return np.random.default_rng(12).random(ROWS)  # re-made by re-running this step if lost


@op(out=Out(metadata={"asgard/replicas": "store"}))
def kept() -> np.ndarray:
    return np.random.default_rng(13).random(ROWS)


@op
def total(a: np.ndarray, b: np.ndarray) -> float:
    return float(a.sum() + b.sum())


@job(resource_defs={"io_manager": _io_manager()}, executor_def=multiprocess_executor)
def one_replica_job():
    total(intermediate(), kept())


@op(out=Out(metadata={"asgard/replicas": 3}))
def three_replicas() -> np.ndarray:
    return np.zeros(ROWS)


@job(resource_defs={"io_manager": _io_manager()})
def three_replicas_job():
    total(three_replicas(), kept())


def _auto_io_manager() -> CassandraIOManager:
    return CassandraIOManager(replicas="auto", cassandra=CassandraResource(keyspace=KEYSPACE, replication_factor=2,
                                                                           consistency="ONE"))


@op
def single() -> np.ndarray:
    return np.random.default_rng(14).random(ROWS)  # one step reads it


@op
def shared() -> np.ndarray:
    return np.random.default_rng(15).random(ROWS)  # two steps read it


@op
def total_of(values: np.ndarray) -> float:
    return float(values.sum())


@op
def largest(values: np.ndarray) -> float:
    return float(values.max())


@op
def combined(a: float, b: float, c: float) -> float:
    return a + b + c


@job(resource_defs={"io_manager": _auto_io_manager()}, executor_def=multiprocess_executor)
def auto_replicas_job():
    values = shared()
    combined(total_of(single()), total_of.alias("shared_total")(values), largest(values))
