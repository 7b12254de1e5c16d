"""Outputs bigger than memory: ``Stream`` through real runs on the real Cassandra (and the
store's stream reader and writer on every backend)."""
from __future__ import annotations

import hashlib
import os

import pytest
from dagster import execute_job, reconstructable

from asgard_dagster import Stream
from asgard.resources.stores import ChecksumMismatchError, ObjectKey, ObjectMissingError
from asgard.resources.stores.registry import open_store
from tests.stream_job import _pieces, stream_job

pytestmark = pytest.mark.timeout(900)
MiB = 1 << 20
#: the issue's bound on each step process's peak RSS while 4 GiB pass between them
RSS_LIMIT = 256 * MiB


def test_four_gib_pass_between_two_step_processes_in_bounded_memory(cassandra_node, dagster_instance, tmp_path):
    gib = float(os.environ.get("ASGARD_STREAM_TEST_GIB", "4"))
    total = int(gib * (1 << 30))
    expected = hashlib.sha256()
    for piece in _pieces(total, ""):
        expected.update(piece)
    hwm = tmp_path / "producer_hwm"
    config = {"ops": {"emit_stream": {"config": {"gib": gib, "hwm_file": str(hwm)}}}}
    with execute_job(reconstructable(stream_job), instance=dagster_instance, run_config=config) as result:
        assert result.success
        digest = result.output_for_node("digest_stream")
        out = [e for e in result.all_events if e.event_type_value == "HANDLED_OUTPUT" and e.step_key == "emit_stream"]
        run_id = result.run_id
    assert digest["bytes"] == total and digest["sha256"] == expected.hexdigest()
    producer_peak = int(hwm.read_text())
    print(f"{gib} GiB: producer peak RSS {producer_peak / MiB:.0f} MiB, consumer {digest['peak_rss'] / MiB:.0f} MiB")
    assert producer_peak < RSS_LIMIT and digest["peak_rss"] < RSS_LIMIT
    assert out  # the output went through the IO manager, not around it
    from asgard_dagster import CassandraIOManager, CassandraResource
    from tests.conftest import TEST_KEYSPACE

    io_manager = CassandraIOManager(cassandra=CassandraResource(keyspace=TEST_KEYSPACE))
    manifest = io_manager.store().read_manifest(ObjectKey.for_run(run_id, "emit_stream", "result"))
    assert manifest.size == total and manifest.serializer == "stream"
    io_manager.purge_run(run_id)


@pytest.mark.parametrize("backend", ["cassandra", "redis", "s3", "local"])
def test_stream_round_trip_on_every_backend(backend, all_servers, tmp_path, run_id):
    kwargs = {"keyspace": "asgard_test"} if backend == "cassandra" else {}
    if backend == "local":
        kwargs = {"root": str(tmp_path)}
    store = open_store(backend, chunk_size=64 * 1024, concurrency=3, **kwargs)
    key = ObjectKey.for_run(run_id, "step", "out")
    pieces = [os.urandom(n) for n in (1, 70_000, 0, 200_000, 65_536, 3)]  # seams everywhere
    whole = b"".join(pieces)
    result = store.put_stream(key, Stream(iter(pieces)))
    assert result.manifest.size == len(whole) and result.manifest.chunks == -(-len(whole) // (64 * 1024))
    stream, _ = store.open_stream(key)
    assert b"".join(bytes(p) for p in stream) == whole
    stream, _ = store.open_stream(key)
    assert stream.read(5) == whole[:5] and stream.read() == whole[5:]
    assert store.get(key)[0] == whole  # a consumer that did not ask for a stream gets the bytes
    # a value written by put reads as a stream of its serialized bytes, chunk by chunk
    store.put(ObjectKey.for_run(run_id, "step", "value"), list(range(50_000)))
    stream, _ = store.open_stream(ObjectKey.for_run(run_id, "step", "value"))
    import pickle

    assert pickle.loads(stream.read()) == list(range(50_000))
    store.purge_scope(f"run/{run_id}")
    with pytest.raises(ObjectMissingError):
        store.open_stream(key)


def test_stream_from_a_path_and_a_damaged_chunk_is_refused(cassandra_node, tmp_path, run_id):
    store = open_store("cassandra", keyspace="asgard_test", chunk_size=64 * 1024)
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(300_000))
    key = ObjectKey.for_run(run_id, "step", "file")
    store.put_stream(key, Stream(src))
    out = tmp_path / "copy.bin"
    assert store.open_stream(key)[0].copy_to(out) == 300_000 and out.read_bytes() == src.read_bytes()
    manifest = store.read_manifest(key)
    store.session.execute(
        f"UPDATE {store.qualified_table} SET data = %s WHERE scope = %s AND path = %s AND version = %s "
        "AND grp = %s AND chunk = %s", (b"\0" * 65536, key.scope, key.path, manifest.version, 2, 2))
    stream, _ = store.open_stream(key)
    first = bytes(next(iter(stream)))
    assert first == src.read_bytes()[:65536]  # chunks before the damage are given out
    with pytest.raises(ChecksumMismatchError):
        for _ in stream:
            pass
    store.purge_scope(f"run/{run_id}")


def test_a_bytes_value_is_not_a_stream():
    with pytest.raises(TypeError, match="not a stream"):
        Stream(b"abc")
