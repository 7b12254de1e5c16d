"""A tiny `asgard bench io` run over every store, so the benchmark keeps working."""
from __future__ import annotations

import json

from click.testing import CliRunner

from asgard_dagster.cli import main


def test_bench_io_json_rows_for_every_backend(all_servers):
    args = ["bench", "io", "--json", "--sizes-mib", "1", "--repeat", "1", "--small-ops", "20", "--memory-mib", "8"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    backends = {"cassandra", "redis", "s3", "local"}
    throughput = [r for r in rows if r["write_mb_s"] is not None]
    assert {r["backend"] for r in throughput} == backends
    assert all(r["object_bytes"] == 1024 * 1024 and r["write_mb_s"] > 0 and r["read_mb_s"] > 0 for r in throughput)
    ops = [r for r in rows if r["ops_s"] is not None]
    assert {r["backend"] for r in ops} == backends and all(r["ops_s"] > 0 for r in ops)
    memory = [r for r in rows if "write_extra_memory_x" in r]
    assert {r["backend"] for r in memory} == backends
    assert all(r["write_extra_memory_x"] >= 0 and r["read_extra_memory_x"] >= 0 for r in memory)
    assert set(rows[0]) >= {"backend", "object_bytes", "write_mb_s", "read_mb_s", "ops_s"}
