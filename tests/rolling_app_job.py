"""The application of the rolling-retune test: a fan-out/fan-in job on the 2-instance ring
(127.0.0.16-17) through the Cassandra IO manager. Every value depends on the run's ``salt``, and
every consumer checks the bytes it read, so a missing, stale or torn read fails the run; the
test reads every output back afterwards too (``expected_outputs``)."""

import time
from pathlib import Path

import numpy as np
from dagster import Config, DynamicOut, DynamicOutput, job, op

from asgard_dagster import CassandraIOManager, CassandraResource
from tests.forkserver_steps import FORKSERVER_EXECUTOR

RING = ["127.0.0.16", "127.0.0.17"]
KEYSPACE_RF2, KEYSPACE_RF1 = "asgard_rolling", "asgard_rolling_rf1"
PIECES = 3


def piece(salt: int, i: int) -> np.ndarray:
    return np.arange(200_000, dtype=np.int64) * (i + 1) + salt  # 1.5 MiB: two chunks


class ScatterConfig(Config):
    salt: int = 0
    # the RF 1 test holds a run in flight until it creates this file (or hold_seconds pass)
    release_file: str = ""
    hold_seconds: float = 0.0


@op(out=DynamicOut())
def scatter(config: ScatterConfig):
    deadline = time.monotonic() + config.hold_seconds
    while config.release_file and not Path(config.release_file).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    for i in range(PIECES):
        yield DynamicOutput(piece(config.salt, i), mapping_key=str(i))


@op
def work(arr) -> np.ndarray:
    salt, i = int(arr[0]), int(arr[1] - arr[0]) - 1
    if not np.array_equal(arr, piece(salt, i)):
        raise AssertionError(f"piece {i} of salt {salt} read back differs from the one written")
    return arr * 2


@op
def gather(parts) -> int:
    total = int(sum(int(p.sum()) for p in parts))
    salt = int(parts[0][0]) // 2
    expected = sum(2 * int(piece(salt, i).sum()) for i in range(PIECES))
    if total != expected:
        raise AssertionError(f"gathered {total}, expected {expected}")
    return total


def expected_outputs(salt: int) -> dict[str, object]:
    """Every output a run of ``salt`` stores, by its path in the run's scope."""
    out: dict = {f"scatter/result/{i}": piece(salt, i) for i in range(PIECES)}
    out.update({f"work[{i}]/result": 2 * piece(salt, i) for i in range(PIECES)})
    out["gather/result"] = sum(2 * int(piece(salt, i).sum()) for i in range(PIECES))
    return out


def _io_manager(keyspace: str, rf: int) -> CassandraIOManager:
    return CassandraIOManager(cassandra=CassandraResource(contact_points=RING, keyspace=keyspace, replication_factor=rf))


EXECUTOR = FORKSERVER_EXECUTOR  # its runs go through forkserver_with_this_environment


# module-level jobs: the multiprocess executor reconstructs them in each step's process
@job(resource_defs={"io_manager": _io_manager(KEYSPACE_RF2, 2)}, executor_def=EXECUTOR)
def rolling_app_rf2():
    gather(scatter().map(work).collect())


@job(resource_defs={"io_manager": _io_manager(KEYSPACE_RF1, 1)}, executor_def=EXECUTOR)
def rolling_app_rf1():
    gather(scatter().map(work).collect())
