"""Faults survived against the real node: writers killed mid-put, and a fresh deployment's
first parallel puts racing to create the schema."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

from asgard.resources.stores import ObjectKey, ObjectMissingError
from asgard.resources.stores.cql import CassandraObjectStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ELEMENTS = 2 * 1024 * 1024  # int32: 8 MiB, 32 chunks of 256 KiB

WRITER = r"""
import sys, numpy as np
from asgard.resources.stores import ObjectKey
from asgard.resources.stores.cql import CassandraObjectStore
keyspace, value = sys.argv[1], int(sys.argv[2])
store = CassandraObjectStore(keyspace=keyspace, chunk_size=256 * 1024, ttl_seconds=3600, concurrency=4)
store.ping()
data = np.full(%d, value, dtype=np.int32)
print("ready", flush=True)
store.put(ObjectKey.for_run("killed", "writer", "result"), data)
print("done", flush=True)
""" % ELEMENTS


def _spawn(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _drop(keyspace: str) -> None:
    store = CassandraObjectStore(keyspace=keyspace)
    store.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)


def test_writers_killed_at_50_random_points_never_leave_a_torn_object(cassandra_node):
    keyspace = f"asgard_kill_{uuid.uuid4().hex[:8]}"
    reader = CassandraObjectStore(keyspace=keyspace)
    key = ObjectKey.for_run("killed", "writer", "result")
    rng = random.Random(1234)
    try:
        # how long a whole put takes here (the second: the first also creates the schema), so
        # the kills spread over its length
        for _ in range(2):
            probe = _spawn(WRITER, keyspace, "0")
            assert probe.stdout.readline().strip() == "ready"
            t0 = time.perf_counter()
            assert probe.stdout.readline().strip() == "done", probe.stderr.read()
            put_seconds = time.perf_counter() - t0
            probe.wait(timeout=60)
        committed, killed_mid_put, torn = 0, 0, []
        for value in range(1, 51):
            writer = _spawn(WRITER, keyspace, str(value))
            assert writer.stdout.readline().strip() == "ready", writer.stderr.read()
            time.sleep(rng.uniform(0, put_seconds))
            writer.send_signal(signal.SIGKILL)
            out, _ = writer.communicate(timeout=60)
            finished = "done" in out
            stored, _ = reader.get(key)
            assert stored.shape == (ELEMENTS,)
            seen = set(np.unique(stored).tolist())
            if len(seen) != 1 or seen.pop() not in (committed, value):
                torn.append(value)
                continue
            if finished:
                assert stored[0] == value  # a put that returned is what readers see
            killed_mid_put += stored[0] != value
            committed = int(stored[0])
        assert torn == []
        assert killed_mid_put >= 15, f"{killed_mid_put} of 50 kills landed inside a put ({put_seconds:.3f} s)"

        # what the killed puts left behind (their chunks, index rows) expires with the TTL
        rows = list(reader.session.execute(
            f"SELECT version, TTL(data) AS data_ttl, TTL(manifest) AS head_ttl FROM {reader.qualified_table}"))
        versions = {r.version for r in rows if r.version}
        assert len(versions) > 1 and all(
            (r.data_ttl or r.head_ttl) and 0 < (r.data_ttl or r.head_ttl) <= 3600 for r in rows)
        index = list(reader.session.execute(
            f"SELECT TTL(groups) AS ttl FROM {reader.qualified_index} WHERE scope = 'run/killed'"))
        assert index and all(r.ttl and r.ttl <= 3600 for r in index)
    finally:
        _drop(keyspace)


FIRST_PUT = r"""
import sys
from asgard.resources.stores import ObjectKey
from asgard.resources.stores.cql import CassandraObjectStore
keyspace, i = sys.argv[1], sys.argv[2]
store = CassandraObjectStore(keyspace=keyspace)
key = ObjectKey.for_run("first-use", "step", i)
store.put(key, {"writer": int(i)})
assert store.get(key)[0] == {"writer": int(i)}
"""


@pytest.mark.parametrize("attempt", range(4))
def test_16_first_puts_at_once_into_a_keyspace_that_does_not_exist(cassandra_node, attempt):
    keyspace = f"asgard_first_{uuid.uuid4().hex[:8]}"
    try:
        writers = [_spawn(FIRST_PUT, keyspace, str(i)) for i in range(16)]
        failures = []
        for i, w in enumerate(writers):
            _, err = w.communicate(timeout=180)
            if w.returncode != 0:
                failures.append((i, err.strip().splitlines()[-1:]))
        assert failures == []
        store = CassandraObjectStore(keyspace=keyspace)
        assert sorted(store.list_paths("run/first-use")) == sorted(f"step/{i}" for i in range(16))
    finally:
        _drop(keyspace)


@pytest.fixture(scope="module")
def nearly_full_node(tmp_path_factory):
    """A node whose data disk counts as full past 32 MiB (Cassandra's disk-usage guardrail with
    a small max disk size, checked every 200 ms), with an application role that is not a
    superuser: the guardrail spares superusers, as it would an operator. The node's own tables
    took 1-4 MiB of that when it started (an 8 MiB limit was full before the first put once)."""
    from asgard.resources.cassandra import CassandraNode

    node = CassandraNode(index=10, heap="1G", workdir=tmp_path_factory.mktemp("nearly-full"), authenticate=True,
                         system_properties={"cassandra.disk_usage.monitor_interval_ms": "200"})
    node.set_overrides({"data_disk_usage_percentage_fail_threshold": 50, "data_disk_usage_max_disk_size": "64MiB"})
    node.start()
    try:
        yield from _with_pipeline_role(node)
    finally:
        node.stop()  # also when the set-up fails: a leftover node would answer the next run's fixture


def _with_pipeline_role(node):
    from asgard.resources.stores import StoreUnavailableError

    deadline = time.monotonic() + 60
    while True:  # the stock superuser is made a moment after CQL opens
        try:
            admin = CassandraObjectStore(contact_points=[node.address], keyspace="asgard_full",
                                         username="cassandra", password="cassandra")
            admin.ensure_schema()
            break
        except StoreUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    for cql in ("CREATE ROLE IF NOT EXISTS pipeline WITH LOGIN = true AND PASSWORD = 'pipeline-secret'",
                "GRANT MODIFY ON KEYSPACE asgard_full TO pipeline", "GRANT SELECT ON KEYSPACE asgard_full TO pipeline"):
        admin.session.execute(cql)
    yield node


def test_a_full_disk_fails_the_step_with_a_typed_error_and_keeps_what_was_stored(
        nearly_full_node, monkeypatch, dagster_instance):
    from dagster import EnvVar, job, op

    from asgard_dagster import CassandraIOManager, CassandraResource
    from asgard.resources.stores import StoreFullError

    monkeypatch.setenv("ASGARD_TEST_PIPELINE_PASSWORD", "pipeline-secret")
    io_manager = CassandraIOManager(cassandra=CassandraResource(
        contact_points=["127.0.0.10"], keyspace="asgard_full", username="pipeline",
        password=EnvVar("ASGARD_TEST_PIPELINE_PASSWORD")))
    store = CassandraObjectStore(contact_points=["127.0.0.10"], keyspace="asgard_full", username="pipeline",
                                 password="pipeline-secret")
    kept = ObjectKey.for_run("before", "step", "result")
    store.put(kept, {"stored": "before the disk filled"})

    @op
    def big_output() -> bytes:
        return np.random.default_rng(0).bytes(8 * 1024 * 1024)

    @job(resource_defs={"io_manager": io_manager})
    def fills_the_disk():
        big_output()

    outcomes = []
    for _ in range(16):  # 8 MiB a run: the node reports full after a few (memtables count)
        result = fills_the_disk.execute_in_process(instance=dagster_instance, raise_on_error=False)
        outcomes.append(result.success)
        if not result.success:
            failure = next(e for e in result.all_events if e.is_step_failure)
            text = failure.event_specific_data.error.to_string()
            break
        time.sleep(0.5)
    assert outcomes[0] and not outcomes[-1], outcomes
    assert "StoreFullError" in text and "Cassandra at 127.0.0.10:9042 refused the write: it is full" in text
    assert "purge finished runs" in text
    assert store.get(kept)[0] == {"stored": "before the disk filled"}
    with pytest.raises(StoreFullError):
        store.put(kept, {"stored": "after"})
    assert store.get(kept)[0] == {"stored": "before the disk filled"}
