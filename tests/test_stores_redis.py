"""RedisObjectStore, RedisServer and RedisIOManager against a real redis-server (127.0.0.1:6380).

The session fixture starts the project's Redis through :class:`RedisServer` (idempotent: a
running one is reused, and only a server this session started is stopped at the end). If the
server cannot be started or reached, the tests fail; nothing is skipped.
"""
from __future__ import annotations

import socket
import time
import uuid

import numpy as np
import pandas as pd
import pytest
from dagster import build_input_context, build_output_context, job, op

from asgard_dagster.redis import RedisIOManager, RedisResource
from asgard.resources.redis import RedisServer
from asgard.resources.stores import (
    ChecksumMismatchError, ObjectKey, ObjectMissingError, StoreFullError, StoreUnavailableError,
)
from asgard.resources.stores.base import MiB
from asgard.resources.stores.redis import RedisObjectStore

pytestmark = pytest.mark.timeout(300)




@pytest.fixture
def prefix(redis_server):
    """A key prefix of this test alone; every key under it is removed afterwards."""
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    client = redis_server.client()
    keys = list(client.scan_iter(match=f"{name}[:#]*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture
def make_store(redis_server, prefix):
    def make(**kwargs) -> RedisObjectStore:
        kwargs.setdefault("key_prefix", prefix)
        return RedisObjectStore(host=redis_server.host, port=redis_server.port,
                                password=redis_server.password, **kwargs)

    return make


def keys(server: RedisServer, prefix: str) -> set[str]:
    return {k.decode() for k in server.client().scan_iter(match=f"{prefix}[:#]*", count=1000)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the server ----------------------------------------------------------------------
def test_server_answers_with_its_config(redis_server):
    status = redis_server.status()
    assert status["running"] and status["ready"] and status["endpoint"] == "redis://127.0.0.1:6380/0"
    client = redis_server.client()
    assert client.ping()
    config = client.config_get("*")
    assert config["save"] == "" and config["appendonly"] == "no"
    assert config["maxmemory-policy"] == "noeviction" and config["protected-mode"] == "yes"
    assert int(config["maxmemory"]) > 0
    assert config["port"] == "6380"
    text = redis_server.config_file.read_text()
    assert 'save ""' in text and "appendonly no" in text
    assert (redis_server.config_file.stat().st_mode & 0o077) == 0


def test_start_is_idempotent(redis_server):
    pid = redis_server.pid()
    assert redis_server.start() < 15
    assert redis_server.pid() == pid


def test_full_server_refuses_writes_with_a_clear_error(tmp_path):
    server = RedisServer(port=free_port(), maxmemory="4mb", workdir=tmp_path / "redis-small")
    server.start()
    try:
        store = RedisObjectStore(port=server.port, password=server.password, chunk_size=1 * MiB)
        key = ObjectKey.for_run("r", "s", "o")
        store.put(key, {"previous": 1})
        with pytest.raises(StoreFullError, match=rf"Redis at 127.0.0.1:{server.port}/0 refused.*maxmemory"):
            store.put(key, b"x" * (16 * MiB))
        assert store.get(key)[0] == {"previous": 1}  # nothing already stored was lost
    finally:
        assert server.stop()
    assert not server.is_running()


# --- round trips ---------------------------------------------------------------------
VALUES = {
    "bytes": b"\x00\x01asgard" * 1000,
    "none": None,
    "nested": {"a": [1, 2.5, "three", (4, None)], "b": {"c": {"d": b"bytes", "e": [{"f": True}]}}, 7: {1, 2}},
    "dataframe": pd.DataFrame({"x": np.arange(50_000), "y": np.linspace(0, 1, 50_000), "s": ["v"] * 50_000}),
}


@pytest.mark.parametrize("name", list(VALUES))
def test_round_trip(make_store, name):
    store = make_store()
    key = ObjectKey.for_run("run-a", "step", name)
    store.put(key, VALUES[name])
    value, result = store.get(key)
    expected = VALUES[name]
    if isinstance(expected, pd.DataFrame):
        pd.testing.assert_frame_equal(value, expected)
    else:
        assert value == expected and type(value) is type(expected)
    assert result.manifest.python_type.endswith(type(expected).__qualname__)


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_round_trip_64mib_array(make_store, codec):
    store = make_store(codec=codec)
    array = np.random.default_rng(1).integers(0, 1 << 31, size=64 * MiB // 8, dtype=np.int64)
    key = ObjectKey.for_run("run-a", "step", "array")
    put = store.put(key, array)
    assert put.manifest.size > 64 * MiB and put.manifest.chunks == 17  # 64 MiB + pickle header, 4 MiB chunks
    value, _ = store.get(key)
    assert value.dtype == array.dtype and np.array_equal(value, array)


# --- layout ----------------------------------------------------------------------------
def test_key_layout(redis_server, make_store, prefix):
    store = make_store(chunk_size=1 * MiB, ttl_seconds=3600)
    key = ObjectKey.for_run("run-1", "make_data", "result")
    put = store.put(key, b"z" * (3 * MiB + 10))
    v = put.manifest.version
    assert put.manifest.chunks == 4
    assert keys(redis_server, prefix) == {
        *(f"{prefix}:run/run-1:make_data/result:{v}:{i}" for i in range(4)),
        f"{prefix}:run/run-1:make_data/result:manifest",
        f"{prefix}#index:run/run-1",
    }
    client = redis_server.client()
    assert {m.decode() for m in client.smembers(f"{prefix}#index:run/run-1")} == keys(redis_server, prefix) - {
        f"{prefix}#index:run/run-1"}
    for name in keys(redis_server, prefix):
        assert 3590 < client.ttl(name) <= 3600, name
    assert put.uri == f"redis://127.0.0.1:6380/0/{prefix}:run/run-1:make_data/result"
    assert store.list_paths("run/run-1") == ["make_data/result"]


def test_no_ttl_keys_persist(redis_server, make_store, prefix):
    store = make_store(ttl_seconds=0)
    store.put(ObjectKey.for_run("r", "s", "o"), b"data")
    client = redis_server.client()
    assert all(client.ttl(k) == -1 for k in keys(redis_server, prefix))


def test_colon_in_path_is_kept_apart(make_store):
    store = make_store()
    hourly = ObjectKey.for_asset(["events"], "2026-11-22-03:00")
    store.put(hourly, "hour 3")
    store.put(ObjectKey.for_asset(["events"], "2026-11-22-03"), "no colon")
    assert store.get(hourly)[0] == "hour 3"
    assert store.list_paths("asset/events") == ["2026-11-22-03", "2026-11-22-03:00"]
    store.delete(hourly)
    assert store.list_paths("asset/events") == ["2026-11-22-03"]


def test_small_object_is_one_round_trip_each_way(redis_server, make_store, prefix):
    store = make_store(chunk_size=1 * MiB)
    key = ObjectKey.for_run("run-1", "s", "small")
    client = redis_server.client()
    before = client.info("stats")["total_commands_processed"]
    put = store.put(key, b"q" * 10_000)
    assert put.manifest.inline
    # one pipeline: SADD + 2 x EXPIRE on the index, SET ... GET (+1: the INFO below)
    assert client.info("stats")["total_commands_processed"] - before == 5
    assert keys(redis_server, prefix) == {f"{prefix}:run/run-1:s/small:manifest", f"{prefix}#index:run/run-1"}
    before = client.info("stats")["total_commands_processed"]
    assert store.get(key)[0] == b"q" * 10_000
    assert client.info("stats")["total_commands_processed"] - before == 2  # GET (+ INFO)


# --- overwrite, delete and purge -----------------------------------------------------------
def test_overwrite_leaves_no_old_chunks(redis_server, make_store, prefix):
    from asgard.resources.stores.redis import _background

    store = make_store(chunk_size=1 * MiB)
    key = ObjectKey.for_run("run-1", "s", "o")
    first = store.put(key, b"a" * (5 * MiB))
    second = store.put(key, b"b" * (2 * MiB))
    assert first.manifest.version < second.manifest.version  # time-ordered versions
    _background().submit(lambda: None).result()  # the displaced chunks go on the clean-up thread
    found = keys(redis_server, prefix)
    assert not any(first.manifest.version in k for k in found)
    assert sum(second.manifest.version in k for k in found) == second.manifest.chunks == 3
    assert len(redis_server.client().smembers(f"{prefix}#index:run/run-1")) == 4  # 3 chunks + manifest
    assert store.get(key)[0] == b"b" * (2 * MiB)


def test_purge_scope_removes_one_run_only(redis_server, make_store, prefix):
    store = make_store(chunk_size=1 * MiB)
    for run in ("run-1", "run-10", "run-2"):
        for out in ("a", "b"):
            store.put(ObjectKey.for_run(run, "step", out), (run + out).encode() * 300_000)
    store.purge_scope("run/run-1")
    found = keys(redis_server, prefix)
    assert not any(":run/run-1:" in k or k.endswith("#index:run/run-1") for k in found)
    assert store.list_paths("run/run-1") == []
    for run in ("run-10", "run-2"):
        assert store.list_paths(f"run/{run}") == ["step/a", "step/b"]
        assert store.get(ObjectKey.for_run(run, "step", "b"))[0] == (run + "b").encode() * 300_000
    with pytest.raises(ObjectMissingError):
        store.get(ObjectKey.for_run("run-1", "step", "a"))


def test_delete_removes_the_path_and_its_orphans_only(redis_server, make_store, prefix):
    store = make_store(chunk_size=1 * MiB)
    key = ObjectKey.for_run("run-1", "s", "o")
    store.put(key, b"x" * (2 * MiB))
    store.put(ObjectKey.for_run("run-1", "s", "o2"), b"keep")
    # chunks of a put that died before its manifest
    store._write_chunks(key, uuid.uuid4().hex, iter([(0, b"orphan")]), 1)
    store.delete(key)
    assert not store.exists(key)
    assert all(":s/o:" not in k for k in keys(redis_server, prefix))
    assert store.get(ObjectKey.for_run("run-1", "s", "o2"))[0] == b"keep"


def test_ttl_expiry_gives_object_missing(redis_server, make_store, prefix):
    store = make_store(ttl_seconds=1)
    key = ObjectKey.for_run("run-1", "s", "o")
    store.put(key, b"short-lived" * 1000)
    assert store.get(key)[0] == b"short-lived" * 1000
    time.sleep(2.2)
    with pytest.raises(ObjectMissingError, match="expired after its TTL of 1s"):
        store.get(key)
    assert keys(redis_server, prefix) == set()  # Redis itself dropped chunks, manifest and index


# --- failures -------------------------------------------------------------------------------
def test_corrupted_chunk_gives_checksum_mismatch(redis_server, make_store):
    store = make_store(chunk_size=1 * MiB)
    key = ObjectKey.for_run("run-1", "s", "o")
    put = store.put(key, np.arange(600_000, dtype=np.int64))
    name = store.chunk_key(key, put.manifest.version, 2)
    client = redis_server.client()
    data = bytearray(client.get(name))
    data[100] ^= 0xFF
    client.set(name, bytes(data), keepttl=True)
    with pytest.raises(ChecksumMismatchError) as info:
        store.get(key)
    assert info.value.chunk == 2


def test_missing_object(make_store):
    with pytest.raises(ObjectMissingError, match="never written"):
        make_store().get(ObjectKey.for_run("nope", "s", "o"))


def test_unreachable_server_gives_store_unavailable():
    store = RedisObjectStore(port=free_port(), connect_timeout=1.0)
    key = ObjectKey.for_run("r", "s", "o")
    for call in (store.ping, lambda: store.put(key, b"x"), lambda: store.get(key), lambda: store.purge_scope("run/r")):
        with pytest.raises(StoreUnavailableError, match="asgard redis up") as info:
            call()
        assert info.value.backend == "Redis" and f"127.0.0.1:{store.port}" in info.value.where


# --- Dagster ---------------------------------------------------------------------------------
def test_io_manager_round_trip_with_built_contexts(redis_server, prefix):
    manager = RedisIOManager(redis=RedisResource(port=redis_server.port, password=redis_server.password,
                                                 key_prefix=prefix),
                             chunk_size_bytes=1 * MiB)
    run_id = str(uuid.uuid4())
    frame = pd.DataFrame({"a": np.arange(300_000), "b": np.random.default_rng(0).random(300_000)})
    out = build_output_context(step_key="make_frame", name="result", run_id=run_id)
    manager.handle_output(out, frame)
    meta = out.get_logged_metadata()
    assert meta["backend"].value == "redis" and meta["chunks"].value == 5
    assert meta["dagster/uri"].value == f"redis://127.0.0.1:6380/0/{prefix}:run/{run_id}:make_frame/result"
    assert f"{prefix}:run/{run_id}:make_frame/result:manifest" in keys(redis_server, prefix)
    loaded = manager.load_input(build_input_context(upstream_output=out))
    pd.testing.assert_frame_equal(loaded, frame)
    manager.purge_run(run_id)
    assert keys(redis_server, prefix) == set()
    with pytest.raises(ObjectMissingError, match="Re-execute the step"):
        manager.load_input(build_input_context(upstream_output=out))


def test_job_through_redis_io_manager(redis_server, prefix):
    @op
    def make():
        return np.arange(1_000_000)

    @op
    def total(xs):
        return int(xs.sum())

    @job(resource_defs={"io_manager": RedisIOManager(redis=RedisResource(
        port=redis_server.port, password=redis_server.password, key_prefix=prefix))})
    def pipeline():
        total(make())

    result = pipeline.execute_in_process()
    assert result.success and result.output_for_node("total") == 999_999 * 1_000_000 // 2
    store = RedisResource(port=redis_server.port, password=redis_server.password, key_prefix=prefix).get_store()
    assert store.list_paths(f"run/{result.run_id}") == ["make/result", "total/result"]
    RedisResource(port=redis_server.port, password=redis_server.password, key_prefix=prefix).purge_run(result.run_id)
    assert keys(redis_server, prefix) == set()


def test_requirepass_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ASGARD_REDIS_PASSWORD", "s3cret-for-test")
    server = RedisServer(port=free_port(), workdir=tmp_path / "redis-auth")
    assert server.password == "s3cret-for-test"
    server.start()
    try:
        assert "requirepass s3cret-for-test" in server.config_file.read_text()
        key = ObjectKey.for_run("r", "s", "o")
        store = RedisObjectStore(port=server.port)  # a local host: the password comes from the environment
        store.put(key, {"ok": 1})
        assert store.get(key)[0] == {"ok": 1}
        monkeypatch.delenv("ASGARD_REDIS_PASSWORD")
        for password in (None, "wrong"):
            with pytest.raises(StoreUnavailableError, match="Authentication"):
                RedisObjectStore(port=server.port, password=password).get(key)
    finally:
        server.stop()


def test_a_server_refuses_to_start_where_another_one_answers(tmp_path):
    """A leftover server on the address would otherwise be taken for the one just started."""
    from asgard.resources.process import ServerError

    port = free_port()
    first = RedisServer(port=port, workdir=tmp_path / "first")
    first.start()
    try:
        second = RedisServer(port=port, workdir=tmp_path / "second", password=first.password)
        with pytest.raises(ServerError, match="already answers.*Stop that server first"):
            second.start()
        assert first.is_running() and not second.is_running()
    finally:
        first.stop()


def test_server_cpu_sees_a_few_milliseconds_of_work(redis_server, prefix):
    """Cost reports charge the server's CPU per run; a small run costs Redis a few ms, under one
    clock tick of /proc/<pid>/stat, and must still read as work done (a CI run read 0.0)."""
    client = redis_server.client()
    before = redis_server.cpu_seconds()
    for i in range(200):
        client.set(f"{prefix}:k{i}", b"x" * 100)
        client.get(f"{prefix}:k{i}")
    spent = redis_server.cpu_seconds() - before
    assert 0 < spent < 2.0, spent
    # a process that is sleeping does not gain CPU time
    idle0 = redis_server.cpu_seconds()
    idle1 = redis_server.cpu_seconds()
    assert 0 <= idle1 - idle0 < spent, (idle0, idle1)
