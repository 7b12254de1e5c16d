"""CassandraIOManager and CassandraObjectStore against the real local Cassandra."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest
from dagster import (
    AssetKey, ReexecutionOptions, build_input_context, build_output_context, execute_job,
    reconstructable,
)

from asgard_dagster import CassandraIOManager, CassandraResource
from asgard.resources.stores import ChecksumMismatchError, ObjectKey, ObjectMissingError, ObjectTooLargeError
from tests.conftest import TEST_KEYSPACE

MiB = 1024 * 1024
#: the IO manager's connection: the local node, the tests' keyspace
TEST_CASSANDRA = CassandraResource(keyspace=TEST_KEYSPACE)


@pytest.fixture
def io_manager(cassandra_node):
    return CassandraIOManager(cassandra=TEST_CASSANDRA)


def rows_of_scope(store, scope):
    """``(path, version, grp, chunk, has_manifest)`` of every row in the partitions the scope's index
    names, read straight from the table (heads are ``version = ''``, ``grp = 0``)."""
    out = []
    for path, version, grp in store.partitions(scope):
        rows = store.session.execute(
            f"SELECT chunk, manifest FROM {store.qualified_table} WHERE scope = %s AND path = %s "
            "AND version = %s AND grp = %s", (scope, path, version, grp))
        out.extend((path, version, grp, r.chunk, r.manifest is not None) for r in rows)
    return sorted(out)


def index_of_scope(store, scope):
    rows = store.session.execute(
        f"SELECT path, version, groups, committed FROM {store.qualified_index} WHERE scope = %s", (scope,))
    return sorted((r.path, r.version, r.groups, r.committed) for r in rows)


def round_trip(io_manager, run_id, value, step="producer", name="result", mapping_key=None):
    out_ctx = build_output_context(step_key=step, name=name, run_id=run_id, mapping_key=mapping_key)
    io_manager.handle_output(out_ctx, value)
    in_ctx = build_input_context(upstream_output=out_ctx)
    return io_manager.load_input(in_ctx), out_ctx


@pytest.mark.parametrize("value", [
    b"\x00raw bytes\xff" * 1000,
    None,
    {"nested": [1, 2.5, ("t", {"set"})], "deep": {"a": {"b": [None, True]}}},
])
def test_round_trip_small_values(io_manager, run_id, value):
    back, _ = round_trip(io_manager, run_id, value)
    assert back == value


def test_round_trip_200_mib_numpy_array(io_manager, run_id):
    arr = np.random.default_rng(1).random(200 * MiB // 8)
    back, out_ctx = round_trip(io_manager, run_id, arr)
    assert back.dtype == arr.dtype and np.array_equal(back, arr)
    meta = out_ctx.get_logged_metadata()
    assert meta["bytes"].value >= arr.nbytes
    assert meta["chunks"].value == -(-meta["bytes"].value // io_manager.store().chunk_size)
    assert meta["dagster/uri"].value == (
        f"cassandra://127.0.0.1:9042/{TEST_KEYSPACE}.objects/run/{run_id}/producer/result")
    assert meta["write_seconds"].value > 0 and meta["write_mb_s"].value > 0
    # what the UI shows before it folds the rest: where, how big in MiB, how fast
    assert list(meta)[:3] == ["dagster/uri", "size_mib", "write_mb_s"]
    assert meta["size_mib"].value == pytest.approx(meta["bytes"].value / MiB, rel=5e-3)


@pytest.mark.parametrize("mib", [3, 40])
def test_a_step_can_modify_its_large_array_input_in_place(io_manager, mib):
    """An output of several chunks is assembled into a buffer the reader owns (left
    uninitialized, then written by the chunks, not zeroed first; above 32 MiB memory mapped
    rather than numpy's): the array a downstream asset receives is writable and exact, as a
    freshly computed one would be (`x *= 2` in place)."""
    from dagster import asset, materialize

    n = mib * io_manager.store().chunk_size // 8 + 1001  # float64: over `mib` chunks, not inline

    @asset
    def samples() -> np.ndarray:
        return np.arange(n, dtype=np.float64)

    @asset
    def doubled(samples: np.ndarray) -> float:
        assert samples.flags.writeable
        samples *= 2  # in place, as numpy code does with its inputs
        return float(samples[-1])

    result = materialize([samples, doubled], resources={"io_manager": io_manager})
    assert result.success
    assert result.output_for_node("doubled") == 2.0 * (n - 1)
    manifest = io_manager.store().read_manifest(ObjectKey.for_asset(["samples"]))
    assert manifest is not None and not manifest.inline and manifest.chunks == mib + 1


def test_round_trip_dataframe(io_manager, run_id):
    df = pd.DataFrame({"a": np.arange(100_000), "b": np.random.default_rng(2).random(100_000),
                       "c": pd.Categorical(["x", "y"] * 50_000)})
    back, _ = round_trip(io_manager, run_id, df)
    pd.testing.assert_frame_equal(back, df)


def test_exact_key_layout_for_op_outputs_and_mapping_keys(cassandra_node, run_id):
    io_manager = CassandraIOManager(cassandra=TEST_CASSANDRA, chunk_size_bytes=MiB // 2)
    store = io_manager.store()
    per = store.chunks_per_partition
    n = per + 3  # one full chunk group and part of a second
    value = np.arange(n * store.chunk_size // 8 - 100, dtype=np.float64)  # n chunks with the pickle header
    round_trip(io_manager, run_id, value, step="split", name="chunks", mapping_key="part_7")
    round_trip(io_manager, run_id, "small", step="report", name="result")
    scope = f"run/{run_id}"
    big = store.read_manifest(ObjectKey(scope, "split/chunks/part_7"))
    small = store.read_manifest(ObjectKey(scope, "report/result"))
    assert big.chunks == n and not big.inline and small.inline and small.chunks == 1
    assert rows_of_scope(store, scope) == sorted(
        [("report/result", "", 0, 0, True), ("split/chunks/part_7", "", 0, 0, True)]
        + [("split/chunks/part_7", big.version, i // per, i, False) for i in range(n)]
    )
    # the small output is its head row alone: manifest and data in one row
    row = store.session.execute(
        f"SELECT manifest, data FROM {store.qualified_table} WHERE scope = %s AND path = %s AND version = '' "
        "AND grp = 0 AND chunk = 0", (scope, "report/result")).one()
    assert row.manifest and len(row.data) == small.size
    assert index_of_scope(store, scope) == sorted([
        ("report/result", small.version, 0, True), ("split/chunks/part_7", big.version, store.groups(n), True)])
    assert store.list_paths(scope) == ["report/result", "split/chunks/part_7"]


def test_exact_key_layout_for_assets_and_partitions(io_manager):
    store = io_manager.store()
    for partition in ("2026-11-01", "2026-11-02"):
        ctx = build_output_context(asset_key=AssetKey(["warehouse", "daily_counts"]), partition_key=partition)
        io_manager.handle_output(ctx, {"day": partition})
    ctx = build_output_context(asset_key=AssetKey("plain"))
    io_manager.handle_output(ctx, [1, 2, 3])
    assert store.list_paths("asset/warehouse/daily_counts") == ["2026-11-01", "2026-11-02"]
    assert store.list_paths("asset/plain") == ["__unpartitioned__"]
    assert [p[:3] for p in rows_of_scope(store, "asset/warehouse/daily_counts")] == [
        ("2026-11-01", "", 0), ("2026-11-02", "", 0)]
    in_ctx = build_input_context(asset_key=AssetKey(["warehouse", "daily_counts"]), partition_key="2026-11-02")
    assert io_manager.load_input(in_ctx) == {"day": "2026-11-02"}
    assert io_manager.load_input(build_input_context(asset_key=AssetKey("plain"))) == [1, 2, 3]


def test_outputs_of_one_run_spread_over_partitions_each_within_a_chunk_group(cassandra_node, run_id):
    io_manager = CassandraIOManager(cassandra=TEST_CASSANDRA, chunk_size_bytes=256 * 1024)
    store = io_manager.store()
    group_bytes = store.chunks_per_partition * store.chunk_size
    for i in range(6):  # six outputs of 2.5 chunk groups each
        round_trip(io_manager, run_id, np.full(5 * group_bytes // 16, i, dtype=np.float64), step=f"map_{i}")
    scope = f"run/{run_id}"
    partitions = store.partitions(scope)
    assert len(partitions) == 6 * (1 + 3)  # a head and three chunk groups per output
    tokens, largest = set(), 0
    for path, version, grp in partitions:
        rows = list(store.session.execute(
            f"SELECT token(scope, path, version, grp) AS t, data FROM {store.qualified_table} "
            "WHERE scope = %s AND path = %s AND version = %s AND grp = %s", (scope, path, version, grp)))
        tokens.add(rows[0].t)
        largest = max(largest, sum(len(r.data or b"") for r in rows))
    assert len(tokens) == len(partitions)  # every partition its own place on the ring
    assert largest == group_bytes  # no partition holds more than one chunk group


def test_a_put_reads_nothing_and_a_small_one_is_one_request(io_manager, run_id, monkeypatch):
    """Count the requests sent, through the driver (its request-init hook) and on the store's
    direct connection (cql.direct): a small put is ONE request (an unlogged batch of its head
    row and index row), a small get one SELECT, a large put no SELECT at all. A session with a
    request-init listener sees all of them; without one they go direct."""
    from cassandra.protocol import BatchMessage, ExecuteMessage
    from cassandra.query import BatchStatement

    from asgard.resources.stores.cql.direct_connection import DirectConnection

    store = io_manager.store()
    sent, direct = [], []

    def listener(future):
        if isinstance(future.query, BatchStatement):
            sent.append("BATCH")
        else:
            sent.append(future.query.prepared_statement.query_string.split()[0])

    send = DirectConnection._send

    def on_direct(conn, messages, *streams):
        names = {stmt.query_id: stmt.query_string.split()[0] for stmt in store.statements.prepared.values()}
        messages_sent = [m for m in messages if isinstance(m, (BatchMessage, ExecuteMessage))]  # not the login
        for message in messages_sent:
            sent.append("BATCH" if isinstance(message, BatchMessage) else names.get(message.query_id, message))
        direct.extend(messages_sent)
        return send(conn, messages, *streams)

    monkeypatch.setattr(DirectConnection, "_send", on_direct)
    direct_connections_may_open()
    session = store.session
    store.put(ObjectKey.for_run(run_id, "warm", "up"), 1)  # prepares the statements once
    store.put(ObjectKey.for_run(run_id, "warm", "big"), b"w" * (3 * store.chunk_size))
    store.get(ObjectKey.for_run(run_id, "warm", "big"))
    warn = store.batch_warn_bytes()  # read once per session, before counting
    sent.clear()
    direct.clear()
    session.add_request_init_listener(listener)
    try:
        store.put(ObjectKey.for_run(run_id, "s", "tiny"), b"t" * 3_000)  # under any warn threshold
        assert sent == ["BATCH"], sent
        sent.clear()
        store.put(ObjectKey.for_run(run_id, "s", "small"), b"x" * 10_000)
        # one batch under the node's batch_size_warn_threshold (50 KiB on the local node as this
        # version renders it; a node started with Cassandra's 5 KiB default would warn each time)
        assert sent == (["BATCH"] if warn >= 12_000 else ["INSERT", "INSERT"]), (warn, sent)
        sent.clear()
        # over batch_bytes: head and index row as two requests sent together (no batch refused)
        store.put(ObjectKey.for_run(run_id, "s", "medium"), b"m" * (store.batch_bytes + 1))
        assert sent == ["INSERT", "INSERT"], sent
        sent.clear()
        assert store.get(ObjectKey.for_run(run_id, "s", "small"))[0] == b"x" * 10_000
        assert sent == ["SELECT"], sent
        sent.clear()
        store.put(ObjectKey.for_run(run_id, "s", "big"), b"y" * (3 * store.chunk_size))
        # index row + 4 chunks (3 chunks of data and the pickle header's spill), then head + index
        assert sent == ["INSERT"] * 7, sent
        # a session with a request-init listener sees every request: none went direct
        assert direct == []
    finally:
        session.remove_request_init_listener(listener)
    # without one, the same go on the store's direct connection: the small puts' rows (as one
    # batch or two requests at once), a get's head read and chunks, a large put's head and index
    sent.clear()
    store.put(ObjectKey.for_run(run_id, "s", "tiny2"), b"t" * 3_000)
    assert sent == ["BATCH"], sent
    sent.clear()
    store.put(ObjectKey.for_run(run_id, "s", "medium2"), b"m" * (store.batch_bytes + 1))
    assert sent == ["INSERT", "INSERT"], sent
    sent.clear()
    assert store.get(ObjectKey.for_run(run_id, "s", "tiny2"))[0] == b"t" * 3_000
    assert sent == ["SELECT"], sent
    sent.clear()
    assert store.get(ObjectKey.for_run(run_id, "s", "big"))[0] == b"y" * (3 * store.chunk_size)
    assert sent == ["SELECT"] * 5, sent  # the head, then four chunks
    assert len(direct) == 1 + 2 + 1 + 5


def direct_connections_may_open() -> None:
    """End the wait after a direct connection failed (a test before may have broken one)."""
    from asgard.resources.stores.cql import session as cassandra_session

    for slot in cassandra_session.direct_slots.values():
        slot.retry_at = 0.0


def test_a_direct_connection_that_breaks_falls_back_and_reopens(io_manager, run_id, monkeypatch):
    """The direct connection (cql.direct) dies under the store, as a restarting node's would:
    the put in flight goes the session's way and is stored, the next requests keep to the
    session for DIRECT_RETRY_SECONDS, then a new direct connection opens."""
    import socket

    from asgard.resources.stores.cql import session as cassandra_session

    direct_connections_may_open()
    store = io_manager.store()
    key = ObjectKey.for_run(run_id, "direct", "object")
    store.put(key, b"a" * 10_000)
    assert store.get(key)[0] == b"a" * 10_000
    (slot,) = [slot for (_, host, _), slot in cassandra_session.direct_slots.items()
               if host == "127.0.0.1" and slot.conn is not None]
    broken = slot.conn
    broken._sock.shutdown(socket.SHUT_RDWR)
    store.put(key, b"b" * 10_000)
    assert slot.conn is None and slot.retry_at > time.monotonic()
    assert store.get(key)[0] == b"b" * 10_000  # through the session meanwhile
    assert slot.conn is None
    monkeypatch.setattr(slot, "retry_at", time.monotonic())  # the wait is over
    store.put(key, b"c" * 10_000)
    assert slot.conn is not None and slot.conn is not broken
    assert store.get(key)[0] == b"c" * 10_000


def test_rewrite_replaces_atomically_and_purge_drops_every_version(io_manager, run_id):
    store = io_manager.store()
    key = ObjectKey(f"run/{run_id}", "step/result")
    round_trip(io_manager, run_id, np.zeros(2 * MiB // 8), step="step")
    first = store.read_manifest(key)
    back, _ = round_trip(io_manager, run_id, np.ones(3 * MiB // 8), step="step")
    second = store.read_manifest(key)
    assert back.sum() == 3 * MiB // 8 and first.version < second.version
    # nothing was read before the second write: the first version waits for its TTL or the purge
    assert {v for _, v, _, _, _ in rows_of_scope(store, key.scope)} == {"", first.version, second.version}
    back, _ = round_trip(io_manager, run_id, "now small", step="step")
    assert back == "now small" and store.read_manifest(key).inline
    store.purge_scope(key.scope)
    for version in ("", first.version, second.version):
        assert list(store.session.execute(
            f"SELECT chunk FROM {store.qualified_table} WHERE scope = %s AND path = %s AND version = %s AND grp = 0",
            (key.scope, key.path, version))) == []
    assert index_of_scope(store, key.scope) == []


def test_concurrent_reader_sees_old_or_new_never_a_mix(io_manager, run_id):
    import threading

    store = io_manager.store()
    key = ObjectKey(f"run/{run_id}", "hot/result")
    values = [np.full(3 * MiB // 8, i, dtype=np.float64) for i in range(6)]
    store.put(key, values[0])
    seen, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            value, _ = store.get(key)
            seen.append(set(np.unique(value).tolist()))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for value in values[1:]:
            store.put(key, value)
    finally:
        stop.set()
        thread.join()
    assert seen and all(len(s) == 1 for s in seen), [s for s in seen if len(s) != 1][:3]
    assert store.get(key)[0][0] == 5


def test_table_of_the_previous_layout_gives_a_typed_error(cassandra_node):
    from asgard.resources.stores import SchemaLayoutError
    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(keyspace=TEST_KEYSPACE, table="old_layout")
    session = store.session
    session.execute(f"CREATE TABLE IF NOT EXISTS {TEST_KEYSPACE}.old_layout (scope text, path text, version text, "
                    "chunk int, data blob, PRIMARY KEY ((scope), path, version, chunk))")
    session.execute(f"INSERT INTO {TEST_KEYSPACE}.old_layout (scope, path, version, chunk, data) "
                    "VALUES ('run/r', 'a/result', '', 0, 0x00)")
    for action in (lambda: store.put(ObjectKey.for_run("r", "a", "result"), 1),
                   lambda: store.get(ObjectKey.for_run("r", "a", "result"))):
        with pytest.raises(SchemaLayoutError, match=rf"{TEST_KEYSPACE}.old_layout exists with another layout.*"
                                                    rf"DROP TABLE {TEST_KEYSPACE}.old_layout"):
            action()
    # nothing stored was touched
    assert session.execute(f"SELECT count(*) FROM {TEST_KEYSPACE}.old_layout").one()[0] == 1


def test_ttl_expiry_gives_the_expired_error(cassandra_node, run_id):
    io_manager = CassandraIOManager(cassandra=TEST_CASSANDRA, ttl_seconds=2)
    out_ctx = build_output_context(step_key="short_lived", name="result", run_id=run_id)
    io_manager.handle_output(out_ctx, list(range(1000)))
    assert io_manager.load_input(build_input_context(upstream_output=out_ctx)) == list(range(1000))
    time.sleep(3.5)
    with pytest.raises(ObjectMissingError, match=r"expired after its TTL of 2s.*Re-execute the step that produces it "
                                                 r"\(step 'short_lived' output 'result'"):
        io_manager.load_input(build_input_context(upstream_output=out_ctx))


def test_purge_run_removes_one_run_and_nothing_of_another(io_manager, run_id):
    other = run_id[::-1]
    for rid in (run_id, other):
        for step in ("a", "b"):
            round_trip(io_manager, rid, np.arange(io_manager.store().chunk_size // 4), step=step)  # 3 chunks + head
    store = io_manager.store()
    assert len(rows_of_scope(store, f"run/{run_id}")) == 8
    partitions = store.partitions(f"run/{run_id}")
    io_manager.purge_run(run_id)
    assert rows_of_scope(store, f"run/{run_id}") == [] and index_of_scope(store, f"run/{run_id}") == []
    for path, version, grp in partitions:  # the partitions themselves, not only the index
        assert list(store.session.execute(
            f"SELECT chunk FROM {store.qualified_table} WHERE scope = %s AND path = %s AND version = %s AND grp = %s",
            (f"run/{run_id}", path, version, grp))) == []
    assert len(rows_of_scope(store, f"run/{other}")) == 8
    back, _ = round_trip(io_manager, other, "still here", step="c")
    assert back == "still here"


def test_chunk_corrupted_in_place_is_detected(io_manager, run_id):
    store = io_manager.store()
    round_trip(io_manager, run_id, np.arange(4 * store.chunk_size // 8), step="victim")
    key = ObjectKey(f"run/{run_id}", "victim/result")
    manifest = store.read_manifest(key)
    assert not manifest.inline
    store.session.execute(
        f"UPDATE {store.qualified_table} SET data = %s WHERE scope = %s AND path = %s AND version = %s "
        "AND grp = %s AND chunk = 1",
        (b"\x00" * manifest.chunk_sizes[1], key.scope, key.path, manifest.version, 1 // store.chunks_per_partition),
    )
    with pytest.raises(ChecksumMismatchError, match="Chunk 1 of .*victim/result is corrupt"):
        store.get(key)


@pytest.mark.parametrize("value", [{"small": list(range(100))}, b"\x07" * (600 * 1024)])
def test_inline_data_corrupted_in_place_is_detected(io_manager, run_id, value):
    """Small inline data is decoded by the driver; large (600 KiB, one row) is received into a
    buffer of its own: damage is found either way."""
    store = io_manager.store()
    round_trip(io_manager, run_id, value, step="victim")
    key = ObjectKey(f"run/{run_id}", "victim/result")
    assert store.read_manifest(key).inline
    received = store._read_manifest(key)[1]
    assert isinstance(received, memoryview) and not received.readonly if len(value) > 1000 else isinstance(received, bytes)
    row = store.session.execute(
        f"SELECT data FROM {store.qualified_table} WHERE scope = %s AND path = %s AND version = '' AND grp = 0 "
        "AND chunk = 0", (key.scope, key.path)).one()
    damaged = bytearray(row.data)
    damaged[-3] ^= 0xFF
    store.session.execute(
        f"UPDATE {store.qualified_table} SET data = %s WHERE scope = %s AND path = %s AND version = '' AND grp = 0 "
        "AND chunk = 0", (bytes(damaged), key.scope, key.path))
    with pytest.raises(ChecksumMismatchError, match="Chunk 0 of .*victim/result is corrupt"):
        store.get(key)


def test_object_over_maximum_is_refused_and_previous_kept(cassandra_node, run_id):
    io_manager = CassandraIOManager(cassandra=TEST_CASSANDRA, max_object_bytes=MiB)
    round_trip(io_manager, run_id, b"ok", step="capped")
    with pytest.raises(ObjectTooLargeError, match="over the configured maximum of 1,048,576 bytes"):
        io_manager.handle_output(build_output_context(step_key="capped", name="result", run_id=run_id), b"x" * (2 * MiB))
    assert io_manager.store().get(ObjectKey(f"run/{run_id}", "capped/result"))[0] == b"ok"


def test_fan_out_fan_in_job_on_multiprocess_executor(cassandra_node, dagster_instance):
    from tests.jobs import fan_out_fan_in_test_job

    run_config = {"ops": {"make_chunks": {"config": {"chunks": 3, "chunk_mib": 1}}}}
    with execute_job(reconstructable(fan_out_fan_in_test_job), instance=dagster_instance,
                     run_config=run_config) as result:
        assert result.success
        stats = result.output_for_node("summarize_chunks")
        step_keys = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}
        run_id = result.run_id
    assert stats["chunks"] == 3 and stats["values"] == 3 * MiB // 8
    assert stats["mean_abs_mean"] < 1e-9 and abs(stats["mean_std"] - 1) < 1e-9
    assert {f"normalize[chunk_{i}]" for i in range(3)} <= step_keys
    engine = [e for e in dagster_instance.all_logs(run_id) if e.dagster_event and
              e.dagster_event.event_type_value == "ENGINE_EVENT" and "multiprocess" in e.message.lower()]
    assert engine, "the job did not run on the multiprocess executor"
    store = CassandraIOManager(cassandra=TEST_CASSANDRA).store()
    paths = store.list_paths(f"run/{run_id}")
    assert paths == sorted([f"make_chunks/result/chunk_{i}" for i in range(3)]
                           + [f"normalize[chunk_{i}]/result" for i in range(3)] + ["summarize_chunks/result"])
    # through the real run too: the 1 MiB arrays (plus pickle headers) and the summary are each one
    # inline head row, and the run's seven outputs are seven partitions of their own on the ring
    scope = f"run/{run_id}"
    assert all(store.read_manifest(ObjectKey(scope, p)).inline for p in paths)
    assert store.partitions(scope) == sorted((p, "", 0) for p in paths)
    tokens = {store.session.execute(
        f"SELECT token(scope, path, version, grp) AS t FROM {store.qualified_table} WHERE scope = %s AND path = %s "
        "AND version = '' AND grp = 0", (scope, p)).one().t for p in paths}
    assert len(tokens) == len(paths)


def test_reexecute_from_failure_reads_parent_outputs(cassandra_node, dagster_instance, tmp_path, monkeypatch):
    from tests.jobs import flaky_job

    flag = tmp_path / "fail-once"
    flag.write_text("1")
    monkeypatch.setenv("ASGARD_TEST_FAIL_FLAG", str(flag))
    with execute_job(reconstructable(flaky_job), instance=dagster_instance) as first:
        assert not first.success
        parent = first.run_id
    flag.unlink()
    options = ReexecutionOptions.from_failure(parent, dagster_instance)
    with execute_job(reconstructable(flaky_job), instance=dagster_instance,
                     reexecution_options=options) as second:
        assert second.success
        assert second.output_for_node("consume") == 499500
        executed = {e.step_key for e in second.all_events if e.event_type_value == "STEP_SUCCESS"}
    assert executed == {"consume"}  # `produce` was not re-run: its output came from the parent run


def test_purge_sensor_purges_a_succeeded_run_and_its_parent(cassandra_node, dagster_instance):
    from dagster import build_run_status_sensor_context, job, op

    from asgard_dagster import make_purge_on_success_sensor

    io_manager = CassandraIOManager(cassandra=TEST_CASSANDRA)

    @op
    def emit() -> list:
        return [1, 2, 3]

    @op
    def take(xs: list) -> int:
        return sum(xs)

    @job(resource_defs={"io_manager": io_manager})
    def tiny():
        take(emit())

    keep = tiny.execute_in_process(instance=dagster_instance)
    result = tiny.execute_in_process(instance=dagster_instance)
    store = io_manager.store()
    assert store.list_paths(f"run/{result.run_id}") == ["emit/result", "take/result"]
    sensor = make_purge_on_success_sensor(io_manager)
    context = build_run_status_sensor_context(
        sensor_name=sensor.name, dagster_instance=dagster_instance, dagster_run=result.dagster_run,
        dagster_event=result.get_run_success_event(),
    )
    sensor(context)
    assert store.list_paths(f"run/{result.run_id}") == []
    assert store.list_paths(f"run/{keep.run_id}") == ["emit/result", "take/result"]


@pytest.mark.parametrize("field,value,message", [
    ("keyspace", "my-outputs", "not a valid CQL identifier"),
    ("table", "objects; DROP TABLE x", "not a valid CQL identifier"),
    ("keyspace", "k" * 49, "choose a shorter name"),
    ("table", "t" * 43, "choose a shorter name"),
])
def test_bad_keyspace_or_table_names_fail_the_step_with_a_typed_error(cassandra_node, field, value, message):
    from dagster import job, op

    from asgard.resources.stores import StoreConfigError

    @op
    def emit() -> int:
        return 1

    @job(resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(**{field: value}))})
    def named():
        emit()

    with pytest.raises(StoreConfigError, match=message):
        named.execute_in_process()


def test_an_unset_envvar_is_named_before_anything_connects(cassandra_node):
    from dagster import DagsterInvalidConfigError, EnvVar, job, op

    @op
    def emit() -> int:
        return 1

    @job(resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(
        password=EnvVar("ASGARD_TEST_NEVER_SET"), username=EnvVar("ASGARD_TEST_NEVER_SET")))})
    def needs_secret():
        emit()

    with pytest.raises(DagsterInvalidConfigError, match="ASGARD_TEST_NEVER_SET.*not set"):
        needs_secret.execute_in_process()
