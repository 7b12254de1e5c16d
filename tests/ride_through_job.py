"""A fan-out/fan-in job on the node at 127.0.0.2 for the ride-through test: each consumer
checks the bytes it read, so a torn or wrong read fails the run."""
from __future__ import annotations

import numpy as np
from dagster import In, Out, job, multiprocess_executor, op

from asgard_dagster import CassandraIOManager, CassandraResource

KEYSPACE = "asgard_ride"
EXPECTED = np.arange(300_000, dtype=np.int64)  # 2.3 MiB: chunked, not inline


@op(out=Out(io_manager_key="io_manager"))
def produce():
    return EXPECTED.copy()


@op(ins={"arr": In()})
def check(arr) -> int:
    if not np.array_equal(arr, EXPECTED):
        raise AssertionError("the output read back differs from the one written")
    return int(arr.sum())


@op
def record(a: int, b: int) -> int:
    from asgard.resources.stores import ObjectKey
    from asgard.resources.stores.cql import CassandraObjectStore

    if a != b or a != int(EXPECTED.sum()):
        raise AssertionError(f"sums differ: {a} {b}")
    CassandraObjectStore(contact_points=["127.0.0.2"], keyspace=KEYSPACE).put(ObjectKey("ride-through", "last"),
                                                                               EXPECTED)
    return a


@job(resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(
        contact_points=["127.0.0.2"], keyspace=KEYSPACE, ride_through_seconds=60.0))},
     executor_def=multiprocess_executor.configured({"max_concurrent": 2}))
def ride_through_job():
    arr = produce()
    record(check.alias("check_a")(arr), check.alias("check_b")(arr))
