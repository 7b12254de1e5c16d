"""The store's data path, as a step's inputs reach it: an inline input and a large array received
into buffers of their own (a step may change them in place), chunks received straight into the
output buffer, a direct chunk read failing half way, and the reply parser. Split from
test_cassandra_io_manager.py, whose helpers it uses."""
from __future__ import annotations

import numpy as np
import pytest

from asgard_dagster import CassandraIOManager, CassandraResource
from asgard.resources.stores import ChecksumMismatchError, ObjectKey
from tests.conftest import TEST_KEYSPACE
from tests.test_cassandra_io_manager import direct_connections_may_open, round_trip


@pytest.fixture
def io_manager(cassandra_node):
    return CassandraIOManager(cassandra=CassandraResource(keyspace=TEST_KEYSPACE))


def test_a_step_can_modify_a_large_inline_input_in_place(io_manager):
    """An output of one row (under a chunk, over 64 KiB) is received into a buffer of its own,
    handed to the downstream asset without a copy: writable and exact, in a real run."""
    from dagster import asset, materialize

    n = 600 * 1024 // 8

    @asset
    def readings() -> np.ndarray:
        return np.arange(n, dtype=np.float64)

    @asset
    def scaled(readings: np.ndarray) -> float:
        assert readings.flags.writeable
        readings *= 3
        return float(readings[-1])

    result = materialize([readings, scaled], resources={"io_manager": io_manager})
    assert result.success and result.output_for_node("scaled") == 3.0 * (n - 1)
    assert io_manager.store().read_manifest(ObjectKey.for_asset(["readings"])).inline


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "pool"])
def test_chunks_are_received_straight_into_the_output_buffer(io_manager, run_id, monkeypatch, direct):
    """A multi-chunk output's chunks go from the socket into the reader's buffer (no copy through
    the driver's bytes), both the ones larger than the connection's receive buffer and the short
    last one; the checksums are still checked there, and a chunk of an unexpected length is
    decoded the usual way and refused. On the store's direct connection (cql.direct) and on the
    driver's pool alike."""
    from asgard.resources.stores.base import IN_PLACE
    from asgard.resources.stores.cql.direct_connection import DirectConnection

    pipelines = []
    pipeline = DirectConnection.pipeline

    def counting_pipeline(conn, *args, **kwargs):
        pipelines.append(conn)
        return pipeline(conn, *args, **kwargs)

    monkeypatch.setattr(DirectConnection, "pipeline", counting_pipeline)
    direct_connections_may_open()
    store = io_manager.store()
    monkeypatch.setattr(store, "direct_requests", direct)  # the store is cached: set back after
    arr = np.random.default_rng(7).random((5 * store.chunk_size // 2) // 8)  # 2.5 chunks of 1 MiB
    round_trip(io_manager, run_id, arr, step="big")
    key = ObjectKey(f"run/{run_id}", "big/result")
    manifest = store.read_manifest(key)
    assert manifest.chunks == 3 and manifest.codec == "none"
    seen = []
    received = store._read_chunks_into

    def counting(*args):
        for index, data in received(*args):
            seen.append((index, data is IN_PLACE))
            yield index, data

    store._read_chunks_into = counting
    back, _ = store.get(key)
    assert np.array_equal(back, arr) and back.flags.writeable
    assert sorted(seen) == [(0, True), (1, True), (2, True)]

    def damage(chunk, data):
        store.session.execute(
            f"UPDATE {store.qualified_table} SET data = %s WHERE scope = %s AND path = %s AND version = %s "
            "AND grp = %s AND chunk = %s", (data, key.scope, key.path, manifest.version, chunk, chunk))

    damage(2, b"\x01" * manifest.chunk_sizes[2])  # same length: received in place, then checked
    seen.clear()
    with pytest.raises(ChecksumMismatchError, match="Chunk 2 of .*big/result is corrupt"):
        store.get(key)
    assert (2, True) in seen
    damage(2, b"\x01" * (manifest.chunk_sizes[2] + 100))  # another length: never written into the buffer
    seen.clear()
    with pytest.raises(ChecksumMismatchError, match="Chunk 2 of .*big/result is corrupt"):
        store.get(key)
    assert (2, False) in seen
    assert bool(pipelines) == direct


def test_a_direct_chunk_read_that_fails_half_way_reads_the_rest_through_the_pool(io_manager, run_id, monkeypatch):
    """The direct connection fails after the first chunk of a read (as when the node closes it):
    the chunks it did not bring are read through the driver's pool, and the object is whole."""
    from asgard.resources.stores.cql.direct_connection import DirectConnection, DirectConnectionError

    store = io_manager.store()
    arr = np.random.default_rng(11).random((7 * store.chunk_size // 2) // 8)  # 3.5 chunks
    key = ObjectKey.for_run(run_id, "half", "way")
    store.put(key, arr)
    pipeline = DirectConnection.pipeline

    direct = []

    def failing_pipeline(conn, *args, **kwargs):
        answers = pipeline(conn, *args, **kwargs)
        first = next(answers)
        direct.append(first[0])
        yield first
        raise DirectConnectionError("closed by the node")

    monkeypatch.setattr(DirectConnection, "pipeline", failing_pipeline)
    direct_connections_may_open()
    seen = []
    received = store._read_chunks_into

    def counting(*args):
        for index, data in received(*args):
            seen.append(index)
            yield index, data

    store._read_chunks_into = counting
    back, _ = store.get(key)
    assert np.array_equal(back, arr) and sorted(seen) == [0, 1, 2, 3]
    assert len(direct) == 1 and seen[0] == direct[0]  # one chunk came direct, the rest through the pool
    monkeypatch.setattr(DirectConnection, "pipeline", pipeline)
    direct_connections_may_open()  # the failed connection's wait is over
    seen.clear()
    back, _ = store.get(key)  # a new direct connection, all chunks on it
    assert np.array_equal(back, arr) and sorted(seen) == [0, 1, 2, 3]


def _rows_body(cells, keyspace=b"asgard", table=b"objects"):
    """A protocol v4 RESULT ROWS body as a node sends it: global table spec, blob columns."""
    import struct

    def string(b):
        return struct.pack(">H", len(b)) + b

    body = struct.pack(">iii", 2, 0x0001, len(cells)) + string(keyspace) + string(table)
    for i in range(len(cells)):
        body += string(f"c{i}".encode()) + struct.pack(">H", 0x0003)
    body += struct.pack(">i", 1)
    for cell in cells:
        body += struct.pack(">i", -1) if cell is None else struct.pack(">i", len(cell)) + cell
    return body


@pytest.mark.parametrize("cells", [[b"hello"], [b"manifest", b"data" * 100], [None, b"x"]])
def test_reply_parser_finds_the_last_blob_and_never_guesses(cells):
    """The receive path hands a blob to the output buffer only when the reply is one row whose
    last column is that blob; a truncated prefix, another shape, or noise gives None, never an
    exception in the driver's event loop."""
    from hypothesis import given, settings
    from hypothesis import strategies as hst

    from asgard.resources.stores.cql.direct_connection import last_blob_prefix as _last_blob_prefix

    body = _rows_body(cells)
    prefix = len(body) - len(cells[-1])
    assert _last_blob_prefix(body, 0, len(body)) == (prefix, len(cells[-1]))
    shifted = b"\xff" * 7 + body  # at an offset in a receive buffer
    assert _last_blob_prefix(shifted, 7, len(shifted)) == (prefix, len(cells[-1]))
    for cut in range(prefix):  # the prefix not all received yet
        assert _last_blob_prefix(body, 0, cut) is None
    two_rows = bytearray(body)
    rows_at = prefix - 4 - sum(4 + len(c or b"") for c in cells[:-1]) - 4  # the row count
    assert two_rows[rows_at:rows_at + 4] == b"\x00\x00\x00\x01"
    two_rows[rows_at:rows_at + 4] = b"\x00\x00\x00\x02"
    assert _last_blob_prefix(bytes(two_rows), 0, len(two_rows)) is None
    assert _last_blob_prefix(_rows_body([b"a", b"b"]).replace(b"\x00\x03", b"\x00\x0d", 1), 0, 100) is None  # text

    @settings(max_examples=300, deadline=None)
    @given(hst.binary(max_size=200))
    def noise(data):
        found = _last_blob_prefix(data, 0, len(data))
        assert found is None or (found[0] <= len(data) and found[1] >= 0)

    noise()
