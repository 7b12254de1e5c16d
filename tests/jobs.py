"""Module-level jobs for tests that need a reconstructable job (multiprocess executor)."""
from __future__ import annotations

import os

from dagster import EnvVar, job, multiprocess_executor, op

from asgard_dagster import CassandraIOManager, CassandraResource
from asgard_dagster.redis import RedisIOManager, RedisResource


@op
def produce() -> list:
    return list(range(1000))


def fail_while_flagged() -> None:
    """Fail while ``ASGARD_TEST_FAIL_FLAG`` names a file that exists (a re-execution test removes it)."""
    flag = os.environ.get("ASGARD_TEST_FAIL_FLAG")
    if flag and os.path.exists(flag):
        raise RuntimeError("failing on purpose until the flag file is removed")


@op
def consume(values: list) -> int:
    fail_while_flagged()
    return sum(values)


@job(resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(keyspace="asgard_test"))},
     executor_def=multiprocess_executor)
def flaky_job():
    consume(produce())


# a secure node (tests/test_cassandra_tls.py): address, CA and login all from the environment
@op
def produce_secret_array() -> list:
    return [float(i) for i in range(50_000)]  # ~1 MiB pickled: more than one chunk request


@op
def total_secret_array(values: list) -> float:
    return sum(values)


@job(resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(
    contact_points=["127.0.0.8"], keyspace="asgard_tls",
    ssl_ca_file=EnvVar("ASGARD_TEST_CASSANDRA_CA"),
    username=EnvVar("ASGARD_TEST_CASSANDRA_USER"), password=EnvVar("ASGARD_TEST_CASSANDRA_PASSWORD")))},
    executor_def=multiprocess_executor)
def secure_job():
    total_secret_array(produce_secret_array())


@job(
    resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(keyspace="asgard_test"),
                                                   signing_key=EnvVar("ASGARD_TEST_SIGNING_KEY"))},
    executor_def=multiprocess_executor,
)
def signed_job():
    consume(produce())


# nested connection resources (tests/test_nested_resources.py): a setting from the environment,
# read in every step process
@job(resource_defs={"io_manager": RedisIOManager(redis=RedisResource(key_prefix=EnvVar("ASGARD_TEST_NESTED_PREFIX")))},
     executor_def=multiprocess_executor)
def nested_redis_env_job():
    consume(produce())


@job(resource_defs={"io_manager": CassandraIOManager(
    cassandra=CassandraResource(keyspace=EnvVar("ASGARD_TEST_NESTED_KEYSPACE")))},
    executor_def=multiprocess_executor)
def nested_cassandra_env_job():
    consume(produce())


def fan_out_fan_in_test_job():
    """The demo's ``fan_out_fan_in`` (multiprocess) on the test keyspace: the connection is the IO
    manager's nested resource, set where the job is defined, not in the run's config."""
    from asgard.pipelines.demo import fan_out_fan_in
    from tests.conftest import TEST_KEYSPACE

    return fan_out_fan_in.graph.to_job(
        name=fan_out_fan_in.name, executor_def=fan_out_fan_in.executor_def,
        resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(keyspace=TEST_KEYSPACE))})


# the workspace's word-count assets, map side, on the test keyspace (tests/test_io_shapes.py)
def word_count_map_assets_job():
    from dagster import Definitions

    from asgard.pipelines.assets import ASSETS, word_count_map_job
    from tests.conftest import TEST_KEYSPACE

    defs = Definitions(assets=ASSETS, jobs=[word_count_map_job], executor=multiprocess_executor,
                       resources={"io_manager": CassandraIOManager(cassandra=CassandraResource(keyspace=TEST_KEYSPACE))})
    return defs.resolve_job_def("word_count_map")



def flaky_assets_job():
    """Two assets, the second failing while ``ASGARD_TEST_FAIL_FLAG`` names a file that exists: an
    asset run re-executed from failure (tests/test_io_shapes.py)."""
    from dagster import Definitions, asset, define_asset_job

    from tests.conftest import TEST_KEYSPACE

    @asset
    def flaky_upstream() -> list:
        return [float(i) for i in range(50_000)]  # ~1 MiB pickled: several chunks

    @asset
    def flaky_downstream(flaky_upstream: list) -> float:
        fail_while_flagged()
        return sum(flaky_upstream)

    defs = Definitions(assets=[flaky_upstream, flaky_downstream], executor=multiprocess_executor,
                       jobs=[define_asset_job("flaky_assets")],
                       resources={"io_manager": CassandraIOManager(cassandra=CassandraResource(keyspace=TEST_KEYSPACE))})
    return defs.resolve_job_def("flaky_assets")
