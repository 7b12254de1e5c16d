"""Module-level jobs for tests that need a reconstructable job (multiprocess executor)."""
from __future__ import annotations

import os

from dagster import EnvVar, job, multiprocess_executor, op

from asgard_dagster import CassandraIOManager


@op
def produce() -> list:
    return list(range(1000))


@op
def consume(values: list) -> int:
    flag = os.environ.get("ASGARD_TEST_FAIL_FLAG")
    if flag and os.path.exists(flag):
        raise RuntimeError("failing on purpose until the flag file is removed")
    return sum(values)


@job(resource_defs={"io_manager": CassandraIOManager()}, executor_def=multiprocess_executor)
def flaky_job():
    consume(produce())


@job(
    resource_defs={"io_manager": CassandraIOManager(keyspace="asgard_test",
                                                   signing_key=EnvVar("ASGARD_TEST_SIGNING_KEY"))},
    executor_def=multiprocess_executor,
)
def signed_job():
    consume(produce())
