"""Jobs for tests/test_placement.py (module level: the multiprocess executor reconstructs them)."""
from __future__ import annotations

import os

import numpy as np
from dagster import In, Nothing, Out, executor, job, op

from asgard_dagster import CassandraIOManager, CassandraResource
from tests.forkserver_steps import FORKSERVER_EXECUTOR  # runs go through forkserver_with_this_environment

ROWS = 500_000  # 4 MiB of floats: 4 chunks of 1 MiB, over the 2 MiB kept inline in a manifest


def values(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(ROWS)


def _io_manager(placement: str) -> CassandraIOManager:
    return CassandraIOManager(cassandra=CassandraResource(keyspace="asgard_test"), placement=placement)


@op
def shared() -> np.ndarray:
    return values(1)  # read by two steps on this host: auto keeps a local copy


@op(out=Out(metadata={"asgard/placement": "ring"}))
def forced_ring() -> np.ndarray:
    return values(2)  # auto would keep a copy: the output's choice wins


@op(out=Out(metadata={"asgard/placement": "producer-local"}))
def flipped() -> np.ndarray:
    return values(3)  # its copy gets a changed byte before its reader runs (one reader: forced)


@op(out=Out(metadata={"asgard/placement": "producer-local"}))
def truncated() -> np.ndarray:
    return values(4)  # its copy loses its tail before its reader runs (one reader: forced)


@op
def single() -> np.ndarray:
    return values(6)  # one reader: auto leaves it in the ring (a copy would cost more than it saves)


@op(out=Out(metadata={"asgard/placement": "producer-local"}))
def leaf_forced_local() -> np.ndarray:
    return values(5)  # read by no step (auto: the ring): the output's choice wins


def _copy_path(run_id: str, step: str):
    from asgard.resources.stores import ObjectKey
    from asgard.resources.stores.cql import CassandraObjectStore

    return CassandraObjectStore(keyspace="asgard_test").local_copies.path(ObjectKey.for_run(run_id, step, "result"))


@op(ins={"after_flipped": In(Nothing), "after_truncated": In(Nothing)})
def damage(context) -> None:
    """Changes a byte in the middle of one copy and cuts another short, as a disk or a crash might."""
    path = _copy_path(context.run_id, "flipped")
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    path = _copy_path(context.run_id, "truncated")
    os.truncate(path, os.path.getsize(path) - 12345)


@op
def total(values: np.ndarray) -> float:
    return float(values.sum())


@op(ins={"values": In(), "damaged": In(Nothing)})
def total_after_damage(values: np.ndarray) -> float:
    return float(values.sum())


@job(resource_defs={"io_manager": _io_manager("auto")}, executor_def=FORKSERVER_EXECUTOR)
def placement_job():
    data = shared()
    total.alias("total_a")(data)
    total.alias("total_b")(data)
    total.alias("total_ring")(forced_ring())
    total.alias("total_single")(single())
    f, t = flipped(), truncated()
    done = damage(after_flipped=f, after_truncated=t)
    total_after_damage.alias("total_flipped")(values=f, damaged=done)
    total_after_damage.alias("total_truncated")(values=t, damaged=done)
    leaf_forced_local()


@executor(name="elsewhere")
def elsewhere_executor(_init_context):
    """An executor whose steps this project cannot place (it runs them in process here)."""
    from dagster._core.execution.retries import RetryMode
    from dagster._core.executor.in_process import InProcessExecutor

    return InProcessExecutor(retries=RetryMode.DISABLED)


@op(out=Out(metadata={"asgard/placement": "producer-local"}))
def pinned_nowhere() -> np.ndarray:
    return values(6)


@job(resource_defs={"io_manager": _io_manager("ring")}, executor_def=elsewhere_executor)
def unservable_placement_job():
    total(pinned_nowhere())


@op(out=Out(metadata={"asgard/placement": "nearby"}))
def misnamed_placement() -> np.ndarray:
    return values(7)


@job(resource_defs={"io_manager": _io_manager("ring")})
def misnamed_placement_job():
    total(misnamed_placement())


@job(resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(keyspace="asgard_test"),
                                                     placement="auto", codec="auto")},
     executor_def=FORKSERVER_EXECUTOR)
def one_reader_job():
    total(single())  # a 1:1 edge: whether a copy pays turns on how fast the store reads here
