"""A tiny `asgard bench io` run over every store, so the benchmark keeps working."""
from __future__ import annotations

import json

from click.testing import CliRunner

from asgard.cli import main


def test_bench_io_json_rows_for_every_backend(all_servers):
    args = ["bench", "io", "--json", "--sizes-mib", "1", "--repeat", "2", "--small-ops", "20", "--memory-mib", "8",
            "--warmup-seconds", "0", "--jit-wait-seconds", "0"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    backends = {"cassandra", "redis", "s3", "s3_stock", "local"}
    throughput = [r for r in rows if r["write_mb_s"] is not None]
    assert {r["backend"] for r in throughput} == backends
    assert all(r["object_bytes"] == 1024 * 1024 and r["write_mb_s"] > 0 and r["read_mb_s"] > 0 for r in throughput)
    ops = [r for r in rows if r["ops_s"] is not None]
    assert {r["backend"] for r in ops} == backends and all(r["ops_s"] > 0 for r in ops)
    memory = [r for r in rows if "write_extra_memory_x" in r]
    assert {r["backend"] for r in memory} == backends
    assert all(r["write_extra_memory_x"] >= 0 and r["read_extra_memory_x"] >= 0 for r in memory)
    assert all(set(r) >= {"backend", "object_bytes", "write_mb_s", "read_mb_s", "ops_s"} for r in rows)
    # the storage server's CPU per GB beside each throughput row (no server behind local files)
    for r in throughput:
        if r["backend"] == "local":
            assert r["server_cpu_write_s_per_gb"] is None and r["server_cpu_read_s_per_gb"] is None
        else:
            # 1 MiB once is below /proc's 10 ms tick for Redis and MinIO: present, not negative
            assert r["server_cpu_write_s_per_gb"] >= 0 and r["server_cpu_read_s_per_gb"] >= 0, r
    # a fresh process's first put, and the server's CPU per 10 KiB op, per backend
    assert all(r["first_put_ms"] > 0 for r in ops)
    assert all((r["server_cpu_ms_per_op"] is None) == (r["backend"] == "local") for r in ops), ops
    assert all(r["server_cpu_ms_per_op"] >= 0 for r in ops if r["backend"] != "local")
    # the client's fast paths stepping aside in the bench's process, by path and reason
    [cassandra_ops] = [r for r in ops if r["backend"] == "cassandra"]
    fallbacks = cassandra_ops["fallbacks"]
    assert isinstance(fallbacks, dict), cassandra_ops
    assert all(k.split(": ", 1)[0] in ("early", "direct", "fast_read") and n >= 1 for k, n in fallbacks.items())
    # and which sender of the chain took its small puts and head reads: on the bench's open
    # session, the direct connection took most of them
    took = cassandra_ops["senders"]
    assert set(took) <= {f"{kind}: {name}" for kind in ("put", "read") for name in ("early", "first", "direct", "session")}
    assert took.get("put: direct", 0) > took.get("put: session", 0), took
    # the 10 KiB ops measured once per repeat, interleaved; the best is the row's
    assert all(len(r["ops_s_runs"]) == 2 and r["ops_s"] == max(r["ops_s_runs"]) for r in ops), ops
    # the warm-up's one pass (no time to warm on, no wait for the JIT): its CPU per op, and the
    # share of the node's CPU its JIT compiler threads took, read by their names in /proc
    assert len(cassandra_ops["warmup_cpu_ms_per_op"]) == len(cassandra_ops["warmup_jit_share"]) == 1
    assert 0 <= cassandra_ops["warmup_jit_share"][0] <= 1, cassandra_ops
    # one run's six 16 MiB outputs on the local node: no partition beyond one chunk group
    [spread] = [r["spread"] for r in rows if "spread" in r]
    assert list(spread["instance_bytes"]) == ["127.0.0.1"] and spread["instance_bytes"]["127.0.0.1"] >= 96 * 1024 * 1024
    assert spread["largest_partition_bytes"] <= 1.25 * spread["chunk_group_bytes"]  # histogram buckets round up


def test_bench_io_s3_against_stock_s3_peer(minio_server):
    import uuid

    import numpy as np

    from asgard_bench.io import StockS3Peer, open_peer, run_io_bench
    from asgard.resources.stores import ObjectKey

    client = minio_server.client()

    def stock_objects(prefix: str) -> set[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket="asgard", Prefix=prefix)
        return {o["Key"] for page in pages for o in page.get("Contents", [])}

    # the peer drives dagster-aws's S3PickleIOManager: one pickled object per op output, at
    # <prefix>/storage/<run_id>/<step_key>/<output>, gone after purge_scope
    peer = open_peer("s3_stock")
    assert isinstance(peer, StockS3Peer) and peer.prefix == "dagster-stock"
    peer.ping()
    run_id = f"test-stock-{uuid.uuid4().hex[:8]}"
    key = ObjectKey.for_run(run_id, "make", "result")
    data = np.arange(1000, dtype=np.int64)
    peer.put(key, data)
    run_prefix = f"dagster-stock/storage/{run_id}/"
    assert stock_objects(run_prefix) == {f"{run_prefix}make/result"} == {peer.object_name(key)}
    back, _ = peer.get(key)
    assert np.array_equal(back, data)
    peer.purge_scope(key.scope)
    assert stock_objects(run_prefix) == set()

    before = stock_objects("dagster-stock/storage/bench-")
    rows = run_io_bench(["s3", "s3_stock"], sizes_mib=[1], small_ops=20, repeat=1, memory_mib=8, progress=False,
                        warmup_seconds=0)
    backends = {"s3", "s3_stock"}
    throughput = [r for r in rows if r["write_mb_s"] is not None]
    assert {r["backend"] for r in throughput} == backends and len(throughput) == 2
    assert all(r["object_bytes"] == 1024 * 1024 and r["write_mb_s"] > 0 and r["read_mb_s"] > 0 for r in throughput)
    ops = [r for r in rows if r["ops_s"] is not None]
    assert {r["backend"] for r in ops} == backends and all(r["ops_s"] > 0 for r in ops)
    memory = [r for r in rows if "write_extra_memory_x" in r]
    assert {r["backend"] for r in memory} == backends
    assert all(r["object_bytes"] == 8 * 1024 * 1024 for r in memory)
    assert all(r["write_extra_memory_x"] >= 0 and r["read_extra_memory_x"] >= 0 for r in memory)
    assert stock_objects("dagster-stock/storage/bench-") == before  # the bench leaves nothing behind


def test_server_cpu_finds_a_jvms_compiler_threads_and_nothing_in_redis(cassandra_node, redis_server):
    """The bench waits for Cassandra's JIT by the CPU of HotSpot's compiler threads, found by the
    names the JVM gives them (``C1 CompilerThread0``, ``C2 CompilerThread0``, 15 characters in
    /proc): a JDK that renamed them would leave the bench nothing to wait for."""
    from asgard_bench.io import ServerCpu

    node = ServerCpu.for_backend("cassandra", [cassandra_node])
    jit = node.jit_seconds()
    assert jit is not None and jit > 0  # a serving JVM has compiled its hot paths: C2 ran
    assert 0 < jit < node.seconds()
    assert ServerCpu.for_backend("redis").jit_seconds() is None  # C: no JIT, nothing to wait for
