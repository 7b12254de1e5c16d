"""S3ObjectStore, MinioServer, S3IOManager and dagster-aws's stock S3PickleIOManager against a
real MinIO (http://127.0.0.1:9000, bucket ``asgard``).

The session fixture starts the project's MinIO through :class:`MinioServer` (idempotent: a
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

from asgard_dagster.s3 import S3IOManager, S3StoreResource, stock_s3_pickle_io_manager
from asgard.resources.minio import MINIO_VERSION, MinioServer, install_minio, minio_binary_path
from asgard.resources.stores import (
    ChecksumMismatchError,
    ObjectKey,
    ObjectMissingError,
    StoreConfigError,
    StoreUnavailableError,
)
from asgard.resources.stores.base import MiB
from asgard.resources.stores.s3 import S3ObjectStore

pytestmark = pytest.mark.timeout(300)




@pytest.fixture
def prefix(minio_server):
    """A key prefix of this test alone; every object under it is removed afterwards."""
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    client = minio_server.client()
    names = objects(minio_server, name)
    for i in range(0, len(names), 1000):
        client.delete_objects(Bucket=minio_server.bucket,
                              Delete={"Objects": [{"Key": n} for n in sorted(names)[i : i + 1000]]})


@pytest.fixture
def make_store(minio_server, prefix):
    def make(**kwargs) -> S3ObjectStore:
        kwargs.setdefault("prefix", prefix)
        kwargs.setdefault("bucket", minio_server.bucket)
        return S3ObjectStore(endpoint_url=minio_server.endpoint, **kwargs)

    return make


def objects(server: MinioServer, prefix: str) -> set[str]:
    paginator = server.client().get_paginator("list_objects_v2")
    return {item["Key"] for page in paginator.paginate(Bucket=server.bucket, Prefix=prefix + "/")
            for item in page.get("Contents", [])}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the server ----------------------------------------------------------------------------
def test_server_is_live_with_its_bucket(minio_server):
    status = minio_server.status()
    assert status["running"] and status["ready"] and status["endpoint"] == "http://127.0.0.1:9000"
    assert status["version"] == MINIO_VERSION
    assert minio_binary_path() == install_minio()  # built once, then found in the cache
    assert str(minio_binary_path()).endswith(f"cache/minio/{MINIO_VERSION}/minio")
    buckets = {b["Name"] for b in minio_server.client().list_buckets()["Buckets"]}
    assert "asgard" in buckets
    assert (minio_server.data_dir / ".minio.sys").is_dir()


def test_start_is_idempotent(minio_server):
    pid = minio_server.pid()
    assert minio_server.start() < 15
    assert minio_server.pid() == pid


# --- round trips --------------------------------------------------------------------------
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


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_round_trip_64mib_array(make_store, codec):
    store = make_store(codec=codec)
    array = np.random.default_rng(1).integers(0, 1 << 31, size=64 * MiB // 8, dtype=np.int64)
    key = ObjectKey.for_run("run-a", "step", "array")
    put = store.put(key, array)
    assert put.manifest.size > 64 * MiB and put.manifest.chunks == 9  # 64 MiB + pickle header, 8 MiB chunks
    value, _ = store.get(key)
    assert value.dtype == array.dtype and np.array_equal(value, array)


# --- layout ---------------------------------------------------------------------------------
def test_object_layout(minio_server, make_store, prefix):
    store = make_store(chunk_size=1 * MiB)
    key = ObjectKey.for_run("run-1", "make_data", "result")
    put = store.put(key, b"z" * (3 * MiB + 10))
    v = put.manifest.version
    assert put.manifest.chunks == 4
    assert objects(minio_server, prefix) == {
        *(f"{prefix}/run/run-1/make_data/result/{v}/{i}" for i in range(4)),
        f"{prefix}/run/run-1/make_data/result/manifest",
    }
    head = minio_server.client().head_object(Bucket="asgard", Key=f"{prefix}/run/run-1/make_data/result/{v}/3")
    assert head["ContentLength"] == put.manifest.chunk_sizes[3]
    assert put.uri == f"s3://asgard/{prefix}/run/run-1/make_data/result"
    assert store.list_paths("run/run-1") == ["make_data/result"]


def test_nested_paths_are_kept_apart(make_store):
    store = make_store()
    store.put(ObjectKey.for_run("r", "step", "out"), "parent")
    store.put(ObjectKey.for_run("r", "step", "out", "mapped"), "child")
    assert store.list_paths("run/r") == ["step/out", "step/out/mapped"]
    store.delete(ObjectKey.for_run("r", "step", "out"))
    assert store.list_paths("run/r") == ["step/out/mapped"]
    assert store.get(ObjectKey.for_run("r", "step", "out", "mapped"))[0] == "child"


# --- overwrite, delete and purge -----------------------------------------------------------
def test_overwrite_reads_new_and_purge_removes_superseded_chunks(minio_server, make_store, prefix):
    store = make_store(chunk_size=1 * MiB)
    key = ObjectKey.for_run("run-1", "s", "o")
    first = store.put(key, b"a" * (5 * MiB))
    second = store.put(key, b"b" * (2 * MiB))
    assert first.manifest.version < second.manifest.version  # time-ordered versions
    assert store.get(key)[0] == b"b" * (2 * MiB)
    found = objects(minio_server, prefix)
    # no read before the write: the superseded chunks wait for the purge (or a lifecycle rule)
    assert sum(first.manifest.version in n for n in found) == first.manifest.chunks == 6
    assert sum(second.manifest.version in n for n in found) == second.manifest.chunks == 3
    store.purge_scope("run/run-1")
    assert objects(minio_server, prefix) == set()


def test_small_object_is_one_put_and_one_get(minio_server, make_store, prefix):
    store = make_store(chunk_size=1 * MiB)
    key = ObjectKey.for_run("run-1", "s", "small")
    calls = []
    client = store.client

    def count(model, **kwargs):
        calls.append(model.name)

    client.meta.events.register("before-call.s3", count)
    try:
        put = store.put(key, b"q" * 10_000)
        assert calls == ["PutObject"] and put.manifest.inline
        calls.clear()
        assert store.get(key)[0] == b"q" * 10_000
        assert calls == ["GetObject"]
    finally:
        client.meta.events.unregister("before-call.s3", count)
    assert objects(minio_server, prefix) == {f"{prefix}/run/run-1/s/small/manifest"}


def test_purge_scope_removes_one_run_only(minio_server, make_store, prefix):
    store = make_store(chunk_size=1 * MiB)
    for run in ("run-1", "run-10", "run-2"):
        for out in ("a", "b"):
            store.put(ObjectKey.for_run(run, "step", out), (run + out).encode() * 300_000)
    store.purge_scope("run/run-1")
    found = objects(minio_server, prefix)
    assert not any(n.startswith(f"{prefix}/run/run-1/") for n in found)
    assert any(n.startswith(f"{prefix}/run/run-10/") for n in found)
    assert store.list_paths("run/run-1") == []
    for run in ("run-10", "run-2"):
        assert store.list_paths(f"run/{run}") == ["step/a", "step/b"]
        assert store.get(ObjectKey.for_run(run, "step", "b"))[0] == (run + "b").encode() * 300_000
    with pytest.raises(ObjectMissingError):
        store.get(ObjectKey.for_run("run-1", "step", "a"))


def test_purge_deletes_in_batches_of_1000(minio_server, make_store, prefix):
    store = make_store(chunk_size=1024, concurrency=32)
    store.put(ObjectKey.for_run("big", "s", "o"), b"q" * (1500 * 1024))
    assert len(objects(minio_server, prefix)) == 1501 + 1  # pickle header spills into one more chunk
    store.purge_scope("run/big")
    assert objects(minio_server, prefix) == set()


def test_ttl_expiry_gives_object_missing(minio_server, make_store, prefix):
    store = make_store(ttl_seconds=1)
    key = ObjectKey.for_run("run-1", "s", "o")
    store.put(key, b"short-lived")
    assert store.get(key)[0] == b"short-lived"
    time.sleep(1.5)
    with pytest.raises(ObjectMissingError, match="expired after its TTL of 1s"):
        store.get(key)
    assert not store.exists(key)
    # enforced on read only: the object (a small one: its manifest record alone) stays until
    # purge or a bucket lifecycle rule
    assert objects(minio_server, prefix) == {f"{prefix}/run/run-1/s/o/manifest"}
    rule = S3ObjectStore.lifecycle_rule(prefix + "/", 7)["Rules"][0]
    assert rule["Filter"]["Prefix"] == prefix + "/" and rule["Expiration"]["Days"] == 7


# --- failures -----------------------------------------------------------------------------
def test_corrupted_chunk_gives_checksum_mismatch(minio_server, make_store):
    store = make_store(chunk_size=1 * MiB)
    key = ObjectKey.for_run("run-1", "s", "o")
    put = store.put(key, np.arange(600_000, dtype=np.int64))
    name = store.chunk_name(key, put.manifest.version, 2)
    client = minio_server.client()
    data = bytearray(client.get_object(Bucket="asgard", Key=name)["Body"].read())
    data[100] ^= 0xFF
    client.put_object(Bucket="asgard", Key=name, Body=bytes(data))
    with pytest.raises(ChecksumMismatchError) as info:
        store.get(key)
    assert info.value.chunk == 2


def test_missing_object(make_store):
    with pytest.raises(ObjectMissingError, match="never written"):
        make_store().get(ObjectKey.for_run("nope", "s", "o"))


def test_unreachable_server_gives_store_unavailable():
    store = S3ObjectStore(endpoint_url=f"http://127.0.0.1:{free_port()}", connect_timeout=1.0)
    key = ObjectKey.for_run("r", "s", "o")
    for call in (store.ping, lambda: store.put(key, b"x"), lambda: store.get(key), lambda: store.purge_scope("run/r")):
        with pytest.raises(StoreUnavailableError, match="asgard minio up") as info:
            call()
        assert info.value.backend == "S3" and store.endpoint_url in info.value.where


def test_missing_bucket_and_bad_credentials_are_config_errors(minio_server, make_store):
    with pytest.raises(StoreConfigError, match="does not exist"):
        make_store(bucket="no-such-bucket-asgard").put(ObjectKey.for_run("r", "s", "o"), 1)
    bad = make_store(aws_access_key_id="asgard-local", aws_secret_access_key="not-the-secret")
    with pytest.raises(StoreConfigError, match="refused the credentials"):
        bad.put(ObjectKey.for_run("r", "s", "o"), 1)


# --- Dagster --------------------------------------------------------------------------------
def test_io_manager_round_trip_with_built_contexts(minio_server, prefix):
    manager = S3IOManager(s3=S3StoreResource(endpoint_url=minio_server.endpoint, prefix=prefix),
                          chunk_size_bytes=1 * MiB)
    run_id = str(uuid.uuid4())
    frame = pd.DataFrame({"a": np.arange(300_000), "b": np.random.default_rng(0).random(300_000)})
    out = build_output_context(step_key="make_frame", name="result", run_id=run_id)
    manager.handle_output(out, frame)
    meta = out.get_logged_metadata()
    assert meta["backend"].value == "s3" and meta["chunks"].value == 5
    assert meta["dagster/uri"].value == f"s3://asgard/{prefix}/run/{run_id}/make_frame/result"
    assert f"{prefix}/run/{run_id}/make_frame/result/manifest" in objects(minio_server, prefix)
    loaded = manager.load_input(build_input_context(upstream_output=out))
    pd.testing.assert_frame_equal(loaded, frame)
    manager.purge_run(run_id)
    assert objects(minio_server, prefix) == set()
    with pytest.raises(ObjectMissingError, match="Re-execute the step"):
        manager.load_input(build_input_context(upstream_output=out))


def _pipeline(io_manager):
    @op
    def make():
        return np.arange(1_000_000)

    @op
    def total(xs):
        return int(xs.sum())

    @job(resource_defs={"io_manager": io_manager})
    def pipeline():
        total(make())

    return pipeline


def test_job_through_s3_io_manager(minio_server, prefix):
    io_manager = S3IOManager(s3=S3StoreResource(endpoint_url=minio_server.endpoint, prefix=prefix))
    result = _pipeline(io_manager).execute_in_process()
    assert result.success and result.output_for_node("total") == 999_999 * 1_000_000 // 2
    resource = S3StoreResource(endpoint_url=minio_server.endpoint, prefix=prefix)
    assert resource.get_store().list_paths(f"run/{result.run_id}") == ["make/result", "total/result"]
    resource.purge_run(result.run_id)
    assert objects(minio_server, prefix) == set()


def test_job_through_stock_s3_pickle_io_manager(minio_server, prefix):
    result = _pipeline(stock_s3_pickle_io_manager(prefix=prefix, endpoint_url=minio_server.endpoint)).execute_in_process()
    assert result.success and result.output_for_node("total") == 999_999 * 1_000_000 // 2
    assert objects(minio_server, prefix) == {
        f"{prefix}/storage/{result.run_id}/make/result",
        f"{prefix}/storage/{result.run_id}/total/result",
    }
