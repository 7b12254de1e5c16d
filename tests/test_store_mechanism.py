"""The shared store mechanism (chunking, serializer, manifest) on the local-file backend,
and the typed errors every backend raises."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from asgard.resources.stores import (
    ObjectKey, ObjectMissingError, ObjectTooLargeError, SerializationError, StoreConfigError,
)
from asgard.resources.stores.base import iter_chunks
from asgard.resources.stores.local import LocalObjectStore
from asgard.resources.stores.serde import PickleSerializer


def test_iter_chunks_cuts_across_frame_seams():
    frames = [memoryview(b"abc"), memoryview(b"defghij"), memoryview(b""), memoryview(b"k")]
    chunks = [bytes(c) for c in iter_chunks(frames, 4)]
    assert chunks == [b"abcd", b"efgh", b"ijk"]


def test_iter_chunks_views_large_frames_without_copy():
    arr = np.arange(1024, dtype=np.uint8)
    chunks = list(iter_chunks([memoryview(arr)], 256))
    assert len(chunks) == 4 and all(c.obj is arr or c.nbytes == 256 for c in chunks)
    assert b"".join(bytes(c) for c in chunks) == arr.tobytes()


def test_pickle5_keeps_numpy_buffers_out_of_band():
    arr = np.arange(100_000, dtype=np.float64)
    frames = PickleSerializer().dumps({"a": arr})
    assert len(frames) == 2 and frames[1].nbytes == arr.nbytes
    assert np.array_equal(PickleSerializer().loads(frames)["a"], arr)


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd", "blosc-lz4"])
def test_local_round_trip_with_codecs(tmp_path, codec):
    store = LocalObjectStore(tmp_path, codec=codec, chunk_size=64 * 1024)
    value = {"df": pd.DataFrame({"x": np.arange(50_000), "y": ["s"] * 50_000}), "n": None, "t": (1, [2, {3}])}
    key = ObjectKey.for_run("r1", "step", "out")
    result = store.put(key, value)
    assert result.manifest.chunks > 1
    if codec != "none":
        assert result.manifest.stored_bytes < result.manifest.size
    back, _ = store.get(key)
    pd.testing.assert_frame_equal(back["df"], value["df"])
    assert back["n"] is None and back["t"] == (1, [2, {3}])


def test_too_large_and_unpicklable_keep_previous_value(tmp_path):
    store = LocalObjectStore(tmp_path, max_object_bytes=10_000)
    key = ObjectKey.for_run("r1", "step", "out")
    store.put(key, b"first")
    with pytest.raises(ObjectTooLargeError, match="over the configured maximum"):
        store.put(key, b"x" * 20_000)
    import threading

    with pytest.raises(SerializationError, match="Cannot pickle a value of type builtins.dict: TypeError: cannot pickle '_thread.lock'"):
        store.put(key, {"lock": threading.Lock()})
    assert store.get(key)[0] == b"first"
    # "first" is small, so it lives inline in the manifest record; the refused puts left no data file
    assert store.read_manifest(key).inline
    assert list((tmp_path / "run/r1/step/out").glob("*.data")) == []


def test_inline_threshold_and_superseded_versions(tmp_path):
    store = LocalObjectStore(tmp_path, chunk_size=4096)
    key = ObjectKey.for_run("r1", "step", "out")
    small = store.put(key, b"s" * 1000)
    assert small.manifest.inline and small.manifest.chunks == 1
    big = store.put(key, b"b" * 20_000)
    assert not big.manifest.inline and big.manifest.chunks == 5
    assert [p.name for p in (tmp_path / "run/r1/step/out").glob("*.data")] == [f"{big.manifest.version}.data"]
    again = store.put(key, b"t" * 10)
    assert again.manifest.inline and store.get(key)[0] == b"t" * 10
    assert list((tmp_path / "run/r1/step/out").glob("*.data")) == []
    wide = LocalObjectStore(tmp_path / "wide", chunk_size=4096, inline_bytes=3 * 4096)  # inline beyond one chunk
    value = np.arange(1200, dtype=np.float64)  # 9,600 bytes: over two chunks
    put = wide.put(key, value)
    assert put.manifest.inline and put.manifest.chunks == 1 and np.array_equal(wide.get(key)[0], value)
    never = LocalObjectStore(tmp_path / "never", chunk_size=4096, inline_bytes=0)
    assert not never.put(key, b"x").manifest.inline and never.get(key)[0] == b"x"


def test_damaged_manifest_record_is_a_typed_error(tmp_path):
    from asgard.resources.stores import CorruptManifestError

    store = LocalObjectStore(tmp_path)
    key = ObjectKey.for_run("r1", "step", "out")
    store.put(key, {"a": 1})
    path = tmp_path / "run/r1/step/out/manifest"
    record = path.read_bytes()
    for damaged in (b"", b"{json}", record[:6], record[:4] + (10**6).to_bytes(4, "big") + record[8:],
                    record[:8] + b"not json" + record[16:]):
        path.write_bytes(damaged)
        with pytest.raises(CorruptManifestError, match="manifest of .*run/r1/step/out is unreadable"):
            store.get(key)


def test_missing_object_error_names_the_uri(tmp_path):
    store = LocalObjectStore(tmp_path)
    with pytest.raises(ObjectMissingError, match="never written, was purged, or expired"):
        store.get(ObjectKey.for_run("r1", "nope", "result"))


def test_bad_configuration_is_a_typed_error(tmp_path):
    with pytest.raises(StoreConfigError, match="chunk_size"):
        LocalObjectStore(tmp_path, chunk_size=10)
    with pytest.raises(StoreConfigError, match="Unknown codec"):
        LocalObjectStore(tmp_path, codec="brotli")
    with pytest.raises(StoreConfigError, match="escapes the store root"):
        LocalObjectStore(tmp_path).put(ObjectKey("run/x", "../../../etc"), 1)


def test_arrays_come_back_writable_inline_or_chunked(tmp_path):
    store = LocalObjectStore(tmp_path, chunk_size=4096)
    for n in (10, 100_000):  # inline, and chunked
        key = ObjectKey.for_run("r1", "step", str(n))
        store.put(key, np.arange(n, dtype=np.float64))
        back, _ = store.get(key)
        back += 1  # a consumer updating its input in place
        assert back[0] == 1.0
