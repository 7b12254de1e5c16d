"""``asgard bench xcom``: a real ``airflow dags test`` run pushes and pulls through each backend's
XCom class (ours on Cassandra, common-io's XComObjectStorageBackend on MinIO, Airflow's database),
checks every value read back, and leaves nothing behind in the stores."""
from __future__ import annotations

import json
import subprocess
import sys

from asgard.resources.minio import MinioServer


def test_bench_xcom_measures_the_three_backends_and_leaves_no_object(tmp_path):
    out = subprocess.run([sys.executable, "-m", "asgard.cli", "bench", "xcom", "--json", "--repeat", "2",
                          "--small-count", "3", "--sizes", f"{1 << 20},10240"],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads(out.stdout)
    rows = {(r["backend"], r["object_bytes"]): r for r in report["rows"]}
    assert set(rows) == {(b, s) for b in ("cassandra", "object_storage", "database") for s in (1 << 20, 10240)}
    for row in rows.values():
        assert row["repeats"] == 2 and row["push_ms"] > 0 and row["pull_ms"] > 0 and row["backend_ms"] > 0
        assert row["values_per_repeat"] == (3 if row["object_bytes"] == 10240 else 1)
    # Airflow's database: the whole value for its own backend, a reference (ours) or a path (stock) otherwise
    for size in (1 << 20, 10240):
        assert rows[("database", size)]["db_row_bytes"] >= size
        assert rows[("cassandra", size)]["db_row_bytes"] < 2048
        assert rows[("object_storage", size)]["db_row_bytes"] < 512
    assert {r["peer"] for r in report["ratios"].values()} == {"object_storage", "database"}
    assert all(len(r["per_repeat"]) == 2 and r["min"] > 0 for r in report["ratios"].values())

    # nothing left: the stock backend's objects under the bench's prefix, and our run's scope
    client = MinioServer().client()
    listed = client.list_objects_v2(Bucket="asgard-xcom-bench", Prefix="xcom/")
    assert listed.get("KeyCount", 0) == 0, listed.get("Contents")
    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(keyspace="asgard_bench_xcom")
    try:
        assert not [p for p in store.list_paths("airflow-runs") if p.startswith("asgard_bench_xcom/")]
    finally:
        store.close()
