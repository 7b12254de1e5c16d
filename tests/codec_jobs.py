"""Jobs for tests/test_codec_choice.py (module level: the multiprocess executor reconstructs them)."""
from __future__ import annotations

import numpy as np
from dagster import DynamicOut, DynamicOutput, Out, Output, job, op

from asgard_dagster import CassandraIOManager, CassandraResource
from tests.forkserver_steps import FORKSERVER_EXECUTOR  # runs go through forkserver_with_this_environment

ROWS = 2_000_000


@op
def columns() -> np.ndarray:
    # 15 MiB of 2-bit values, sorted (a category column in long runs): compressed by far. Unsorted,
    # lz4's 3.5x sat at the 10% margin here (83 ms against 91 ms as is) and the choice flipped with the machine
    return np.sort(np.random.default_rng(3).integers(0, 4, ROWS).astype(np.int64))


@op
def noise() -> np.ndarray:
    return np.random.default_rng(4).random(ROWS)  # 15 MiB of random floats: no codec helps


@op(out=Out(metadata={"asgard/codec": "zstd"}))
def noise_forced_zstd() -> np.ndarray:
    return np.random.default_rng(5).random(ROWS // 4)


@op
def count_a(values: np.ndarray) -> int:
    return int(values.sum())


@op
def count_b(values: np.ndarray) -> int:
    return int(values.sum())


@op
def count_c(values: np.ndarray) -> int:
    return int(values.sum())


@op
def mean(values: np.ndarray) -> float:
    return float(values.mean())


@job(resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(keyspace="asgard_test"),
                                                   codec="auto")},
     executor_def=FORKSERVER_EXECUTOR)
def codec_per_output_job():
    data = columns()  # read by three steps: a broadcast
    count_a(data)
    count_b(data)
    count_c(data)
    mean(noise())
    mean.alias("mean_forced")(noise_forced_zstd())


@op(out=Out(metadata={"asgard/codec": "gzip"}))
def misnamed_codec() -> np.ndarray:
    return np.zeros(10)


@job(resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(keyspace="asgard_test"))})
def misnamed_codec_job():
    mean(misnamed_codec())


@op(out={"parts": DynamicOut(), "lookup": Out()})
def scatter(context):
    for i in range(3):  # a fan-out of 3: the analyzer assumes 8 until a run has shown it
        yield DynamicOutput(i, mapping_key=str(i), output_name="parts")
    yield Output(np.random.default_rng(6).integers(0, 4, ROWS).astype(np.int64), "lookup")


@op
def lookup_part(part: int, lookup: np.ndarray) -> int:
    return int(lookup[part])


@op
def total(values: list) -> int:
    return sum(values)


@job(resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(keyspace="asgard_test"),
                                                   codec="auto")},
     executor_def=FORKSERVER_EXECUTOR)
def broadcast_to_mapped_job():
    parts, lookup = scatter()
    total(parts.map(lambda p: lookup_part(p, lookup)).collect())


@op(out=Out(metadata={"asgard/codec": "blosc-lz4"}))
def orders_table():
    from asgard.pipelines.etl_columnar import orders_partition

    return orders_partition(1 / 64, 1, 0, 0)  # 16 MiB of the ETL's orders: int64, float64 and int32 columns


@op
def orders_amount(table) -> float:
    return float(table.column("amount").to_numpy().sum())


@job(resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(keyspace="asgard_test"),
                                                   codec="lz4")},
     executor_def=FORKSERVER_EXECUTOR)
def numeric_table_job():
    orders_amount(orders_table())
