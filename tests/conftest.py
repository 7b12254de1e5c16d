"""Shared fixtures: the real servers the test command starts (scripts/test.sh).

A fixture starts its server if it is not running (idempotent) and fails if it cannot: a
test never skips for a missing service.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from asgard.resources.cassandra import CassandraNode

TEST_KEYSPACE = "asgard_test"


@pytest.fixture(scope="session", autouse=True)
def _close_driver_sessions():
    """Drivers still reconnecting to nodes the tests stopped would fail noisily at exit."""
    yield
    from asgard.resources.stores.cql import close_sessions

    close_sessions()


@pytest.fixture(scope="session")
def cassandra_node() -> CassandraNode:
    node = CassandraNode()  # 127.0.0.1:9042, the node `asgard cassandra up` runs
    node.start()
    if os.environ.get("ASGARD_TEST_ON_RELEASE") == "1":
        # the suites a user's cluster must pass, run on the release's classes as such a cluster runs
        # them (scripts/test.sh restarts the node with ASGARD_CASSANDRA_PATCHES=0 for this pass)
        classpath = _classpath(node)
        assert not any(Path(p).name == "patches.jar" for p in classpath), (
            f"ASGARD_TEST_ON_RELEASE=1 but {node.address} runs the project's patches ({classpath[0]}): restart it "
            "with ASGARD_CASSANDRA_PATCHES=0 (`asgard cassandra down`, then `ASGARD_CASSANDRA_PATCHES=0 asgard "
            "cassandra up`)")
    yield node
    # the suite's outputs carry the store's TTL (days) and add up to gigabytes per run: they go
    # with the suite (auto_snapshot is off, so the files go too), not a week later. A second
    # pytest session on the same node sets ASGARD_TEST_KEEP_KEYSPACE=1 so it does not drop the
    # keyspace under the first one
    if node.is_running() and os.environ.get("ASGARD_TEST_KEEP_KEYSPACE") != "1":
        from asgard.resources.stores.cql import CassandraObjectStore

        CassandraObjectStore(keyspace=TEST_KEYSPACE).session.execute(
            f"DROP KEYSPACE IF EXISTS {TEST_KEYSPACE}", timeout=120)


def _classpath(node) -> list[str]:
    argv = Path(f"/proc/{node.pid()}/cmdline").read_bytes().split(b"\0")
    return argv[argv.index(b"-cp") + 1].decode().split(os.pathsep)


def _running(server):
    """Start ``server`` unless it runs already; stop it afterwards only if started here."""
    started_here = not server.is_running()
    server.start()
    yield server
    if started_here:
        server.stop()


@pytest.fixture(scope="session")
def redis_server():
    from asgard.resources.redis import RedisServer

    yield from _running(RedisServer())  # 127.0.0.1:6380, the server `asgard redis up` runs


@pytest.fixture(scope="session")
def minio_server():
    from asgard.resources.minio import MinioServer

    yield from _running(MinioServer())  # 127.0.0.1:9000, the server `asgard minio up` runs


@pytest.fixture(scope="session")
def all_servers(cassandra_node, redis_server, minio_server):
    return {"cassandra": cassandra_node, "redis": redis_server, "minio": minio_server}


@pytest.fixture
def cassandra_store(cassandra_node):
    from asgard.resources.stores.cql import CassandraObjectStore

    return CassandraObjectStore(keyspace=TEST_KEYSPACE)


@pytest.fixture
def run_id() -> str:
    return str(uuid.uuid4())


@pytest.fixture
def dagster_instance(tmp_path):
    from dagster import DagsterInstance

    home = tmp_path / "dagster_home"
    home.mkdir()
    with DagsterInstance.local_temp(tempdir=str(home)) as instance:
        yield instance


@pytest.fixture(scope="module")
def forked_steps():
    """A module whose jobs fork their steps from a forkserver (tests/forkserver_steps.py): no forkserver of its
    is left to the modules after it."""
    from tests.forkserver_steps import stop_forkserver

    yield
    stop_forkserver()
