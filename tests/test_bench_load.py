"""`asgard bench load`: parallel step processes through the IO manager's store, all verified."""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_load_verifies_every_object_written_by_parallel_processes(cassandra_node):
    out = subprocess.run([sys.executable, "-m", "asgard.cli", "bench", "load", "--processes", "4",
                          "--objects", "60", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert (report["objects"], report["read_back"]) == (240, 240)
    assert (report["lost"], report["corrupted"], report["failed"]) == (0, 0, 0)
    counted = {op: sum(r["count"] for r in report["rows"] if r["op"] == op) for op in ("put", "get")}
    assert counted == {"put": 240, "get": 240}
    assert all(0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"] for r in report["rows"])
    # the run's outputs were purged at the end
    from asgard.resources.stores.cql import CassandraObjectStore

    rows = CassandraObjectStore().session.execute(
        "SELECT scope FROM asgard.objects_index PER PARTITION LIMIT 1")
    assert not [r.scope for r in rows if r.scope.startswith("run/bench-load-")]
