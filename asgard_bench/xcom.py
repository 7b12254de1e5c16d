"""``asgard bench xcom``: an XCom push and pull through Airflow's own XCom API, on three backends in
one Airflow task, interleaved:

* ``cassandra``: :class:`asgard_airflow.CassandraXComBackend` on the local node;
* ``object_storage``: the common-io provider's stock ``XComObjectStorageBackend`` (AIP-58) on our
  MinIO (``s3://`` through the amazon provider's s3fs, an ``aws`` connection with MinIO's endpoint);
* ``database``: Airflow's own ``BaseXCom``, the value in the metadata database's xcom row.

Each backend's ``set`` and ``get_one`` classmethods are called from inside a running task of
``airflow dags test`` (Airflow 3's real task runner): ``set`` serializes through the class and
sends the row to the execution API, which writes it to the metadata database (SQLite);
``get_one`` asks the API for the row and deserializes through the class. So a figure is what a
task's ``return value`` and a downstream task's argument cost, Airflow's own part included.

Both store backends get threshold 0 (every value goes to the store; the stock default ``-1``
would keep everything in the database, and ours keeps values up to 64 KiB there). Values are
strings of random base64 (what a JSON-only XCom can carry; incompressible). Each repeat runs
every backend once per size, the order rotated per repeat; the figures are medians over repeats,
and each repeat's own ratio is printed (its spread is the run's noise floor).

    asgard bench xcom                       # 64 MiB and 10 KiB, 5 repeats
    asgard bench xcom --json --repeat 3
"""
from __future__ import annotations

import base64
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

MiB = 1024 * 1024
KiB = 1024

#: the backends as the bench names them, and the class each one is
PEERS = {
    "cassandra": "asgard_airflow.CassandraXComBackend",
    "object_storage": "airflow.providers.common.io.xcom.backend.XComObjectStorageBackend",
    "database": "airflow.sdk.bases.xcom.BaseXCom",
}
DAG_ID = "asgard_bench_xcom"
BUCKET = "asgard-xcom-bench"
KEYSPACE = "asgard_bench_xcom"
CONN_ID = "asgard_bench_minio"
# Airflow's safe mode parses only files that say "airflow" and "dag"
DAG_FILE = f"""# an airflow DAG: asgard bench xcom
from asgard_bench.xcom import make_bench_dag
dag = make_bench_dag({DAG_ID!r})
"""


class XComBenchError(RuntimeError):
    """The bench's Airflow run failed, or a value read back was not the one written."""


# --- inside the Airflow task -------------------------------------------------------------------
def _payload(size: int, seed: int) -> str:
    """``size`` characters of base64 over random bytes (``seed`` makes each value distinct)."""
    raw = os.urandom(size * 3 // 4 + 3)
    return (str(seed) + base64.b64encode(raw).decode())[:size]


def _load(path: str):
    module, _, name = path.rpartition(".")
    return getattr(__import__(module, fromlist=[name]), name)


def measure_in_task(spec: dict, ti) -> dict:
    """The measurements, in a running task ``ti``: per repeat, per size, each backend pushes
    and pulls (``small_count`` times for the small size), order rotated per repeat."""
    classes = {name: _load(PEERS[name]) for name in spec["peers"]}
    where = {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id, "map_index": ti.map_index}
    out: dict = {"samples": [], "keys": {}}
    names = list(classes)
    # repeat -1 is untimed: each backend's first set opens its client (a Cassandra session, an
    # s3fs filesystem), which a task pays once whatever it moves
    for rep in range(-1, spec["repeat"]):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for size in spec["sizes"]:
            count = spec["small_count"] if size <= spec["small_bytes"] else 1
            values = [_payload(size, rep * 100_000 + i) for i in range(count)]
            for name in order:
                cls = classes[name]
                push = pull = own = 0.0
                for i, value in enumerate(values):
                    key = f"{name}_{size}_{rep}_{i}".replace("-", "w")
                    t0 = time.perf_counter()
                    cls.set(key, value, **where)
                    t1 = time.perf_counter()
                    got = cls.get_one(key=key, **where)
                    t2 = time.perf_counter()
                    if got != value:
                        raise XComBenchError(f"{name}: {key} read back {type(got).__name__} of "
                                             f"{len(got) if hasattr(got, '__len__') else '?'} chars, wrote {len(value)}")
                    # the backend's own part of the same pair: the class's serialize_value (what
                    # set sends as the row) and deserialize_value of that row, without Airflow's
                    # execution API and metadata database in between
                    t3 = time.perf_counter()
                    row = json.loads(json.dumps(cls.serialize_value(value, key=key + "_own", **where)))
                    got = cls.deserialize_value(SimpleNamespace(value=row, key=key + "_own"))
                    t4 = time.perf_counter()
                    if got != value:
                        raise XComBenchError(f"{name}: {key}_own deserialized to a different value")
                    push, pull, own = push + (t1 - t0), pull + (t2 - t1), own + (t4 - t3)
                    out["keys"].setdefault(f"{name}:{size}", []).append(key)
                if rep < 0:
                    continue
                out["samples"].append({"peer": name, "bytes": size, "repeat": rep, "count": count,
                                       "push_s": push, "pull_s": pull, "backend_s": own})
    return out


def make_bench_dag(dag_id: str = DAG_ID):
    """One task that runs :func:`measure_in_task` with the spec in ``ASGARD_XCOM_BENCH`` (a JSON
    file) and writes the samples where the spec says."""
    from airflow.sdk import dag, get_current_context, task

    @task(task_id="measure")
    def measure() -> None:
        spec = json.loads(Path(os.environ["ASGARD_XCOM_BENCH"]).read_text())
        result = measure_in_task(spec, get_current_context()["ti"])
        Path(spec["out"]).write_text(json.dumps(result))

    @dag(dag_id=dag_id, schedule=None, catchup=False, tags=["asgard", "bench"])
    def bench():
        measure()

    return bench()


# --- the driver ----------------------------------------------------------------------------------
def stock_peer_settings(endpoint: str, user: str, password: str, conn_id: str, path: str, threshold: int) -> dict:
    """common-io's XComObjectStorageBackend settings: values over ``threshold`` bytes under
    ``s3://<conn_id>@<path>``, the connection an aws one with the S3 endpoint (MinIO here)."""
    conn = {"conn_type": "aws", "login": user, "password": password,
            "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    return {"AIRFLOW__COMMON_IO__XCOM_OBJECTSTORAGE_PATH": f"s3://{conn_id}@{path}",
            "AIRFLOW__COMMON_IO__XCOM_OBJECTSTORAGE_THRESHOLD": str(threshold),
            f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(conn)}


def _environment(home: Path, threshold: int) -> dict:
    from asgard.resources.minio import MinioServer
    from asgard.resources.minio.server import local_credentials

    minio = MinioServer()
    minio.ensure_bucket(BUCKET)
    user, password = local_credentials()
    root = str(Path(__file__).resolve().parent.parent)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")},
        "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # the backend Airflow itself uses for the run's other rows; the bench calls each class itself
        "AIRFLOW__CORE__XCOM_BACKEND": PEERS["cassandra"],
        "AIRFLOW__ASGARD__KEYSPACE": KEYSPACE, "AIRFLOW__ASGARD__THRESHOLD_BYTES": str(threshold),
        "AIRFLOW__ASGARD__TTL_SECONDS": "3600",
        **stock_peer_settings(minio.endpoint, user, password, CONN_ID, f"{BUCKET}/xcom", threshold),
        "PYTHONPATH": os.pathsep.join([root] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
    }


def _row_bytes(db: Path, keys: dict) -> dict:
    """Per ``backend:size``, the largest xcom row (bytes of its JSON) its values left in Airflow's database."""
    out = {}
    with sqlite3.connect(db) as con:
        for name, names in keys.items():
            sizes = [n for (n,) in con.execute(
                f"SELECT length(CAST(value AS BLOB)) FROM xcom WHERE key IN ({','.join('?' * len(names))})", names)]
            out[name] = max(sizes) if sizes else None
    return out


def run_xcom_bench(sizes: list[int], repeat: int = 5, small_bytes: int = 10 * KiB, small_count: int = 50,
                   peers: list[str] | None = None, threshold: int = 0, keep_home: bool = False) -> dict:
    """Run the bench DAG once with ``airflow dags test``; return ``{"rows": [...], "ratios": {...}}``."""
    peers = peers or list(PEERS)
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise ValueError(f"unknown peer(s) {unknown}: known are {', '.join(PEERS)}")
    tmp = Path(tempfile.mkdtemp(prefix="asgard-bench-xcom-"))
    home = tmp / "airflow"
    (home / "dags").mkdir(parents=True)
    (home / "dags" / "asgard_bench_xcom.py").write_text(DAG_FILE)
    spec = {"sizes": sizes, "repeat": repeat, "small_bytes": small_bytes, "small_count": small_count,
            "peers": peers, "out": str(tmp / "result.json")}
    (tmp / "spec.json").write_text(json.dumps(spec))
    from .apps_airflow import _airflow  # the apps bench's airflow CLI call (a failure says its output)

    env = {**_environment(home, threshold), "ASGARD_XCOM_BENCH": str(tmp / "spec.json")}
    _airflow(env, "db", "migrate", timeout=600)
    started = time.monotonic()
    _airflow(env, "dags", "test", DAG_ID)
    result = json.loads((tmp / "result.json").read_text())
    rows_in_db = _row_bytes(home / "airflow.db", result["keys"])
    _purge(env, result["keys"])
    report = summarize(result["samples"], peers, rows_in_db)
    report["seconds"] = round(time.monotonic() - started, 1)
    report["airflow_home"] = str(home) if keep_home else None
    if not keep_home:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return report


def _purge(env: dict, keys: dict) -> None:
    from asgard.resources.minio import MinioServer

    client = MinioServer().client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="xcom/"):
        for obj in page.get("Contents", []):
            client.delete_object(Bucket=BUCKET, Key=obj["Key"])
    if any(k.startswith("cassandra:") for k in keys):  # the bench DAG's runs, through `asgard airflow purge`
        out = subprocess.run([sys.executable, "-m", "asgard.cli", "airflow", "purge", "--dag-id", DAG_ID],
                             env=env, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise XComBenchError(f"asgard airflow purge failed:\n{(out.stdout + out.stderr)[-2000:]}")


def summarize(samples: list[dict], peers: list[str], rows_in_db: dict) -> dict:
    """Rows per (backend, size): median push, pull and push+pull seconds per value over the repeats,
    MB/s or pairs/s; and per size, each repeat's ratio cassandra / every other backend."""
    rows = []
    by = {}
    for s in samples:
        by.setdefault((s["peer"], s["bytes"]), []).append(s)
    for (peer, size), group in sorted(by.items(), key=lambda kv: (-kv[0][1], peers.index(kv[0][0]))):
        per = [(g["push_s"] / g["count"], g["pull_s"] / g["count"]) for g in group]
        both = [p + q for p, q in per]
        med = statistics.median(both)
        own = statistics.median(g["backend_s"] / g["count"] for g in group)
        rows.append({
            "backend": peer, "object_bytes": size, "repeats": len(group), "values_per_repeat": group[0]["count"],
            "push_ms": round(statistics.median(p for p, _ in per) * 1000, 3),
            "pull_ms": round(statistics.median(q for _, q in per) * 1000, 3),
            "push_pull_ms": round(med * 1000, 3), "backend_ms": round(own * 1000, 3),
            "mb_s": round(2 * size / med / 1e6, 1), "pairs_s": round(1 / med, 1),
            "spread": round((max(both) - min(both)) / med, 3),
            "db_row_bytes": rows_in_db.get(f"{peer}:{size}"),
        })
    ratios: dict = {}
    for size in sorted({s["bytes"] for s in samples}, reverse=True):
        for other in peers:
            if other == "cassandra" or "cassandra" not in peers:
                continue
            per_rep, own_rep = [], []
            reps = sorted({s["repeat"] for s in samples})
            for rep in reps:
                c = next(s for s in samples if s["peer"] == "cassandra" and s["bytes"] == size and s["repeat"] == rep)
                o = next(s for s in samples if s["peer"] == other and s["bytes"] == size and s["repeat"] == rep)
                per_rep.append(round((o["push_s"] + o["pull_s"]) / (c["push_s"] + c["pull_s"]), 2))
                own_rep.append(round(o["backend_s"] / c["backend_s"], 2))
            ratios[f"{size}:{other}"] = {"object_bytes": size, "peer": other, "per_repeat": per_rep,
                                         "median": statistics.median(per_rep), "min": min(per_rep),
                                         "backend_per_repeat": own_rep, "backend_median": statistics.median(own_rep),
                                         "backend_min": min(own_rep)}
    return {"rows": rows, "ratios": ratios}


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n // KiB} KiB" if n % KiB == 0 else f"{n} B"


def print_report(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="XCom push + pull through Airflow's XCom API (airflow dags test; medians over repeats)")
    for col in ("backend", "size", "push ms", "pull ms", "push+pull ms", "MB/s", "pairs/s", "spread", "backend's ms",
                "row in DB"):
        table.add_column(col, justify="left" if col == "backend" else "right")
    for r in report["rows"]:
        table.add_row(r["backend"], _size(r["object_bytes"]), f"{r['push_ms']:,.2f}", f"{r['pull_ms']:,.2f}",
                      f"{r['push_pull_ms']:,.2f}", f"{r['mb_s']:,.1f}", f"{r['pairs_s']:,.1f}",
                      f"{r['spread']:.0%}", f"{r['backend_ms']:,.2f}", "-" if r["db_row_bytes"] is None else f"{r['db_row_bytes']:,} B")
    console = Console(width=max(Console().width, 110))
    console.print(table)
    for r in report["ratios"].values():
        console.print(f"cassandra vs {r['peer']} at {_size(r['object_bytes'])}: through Airflow {r['median']:.2f}x "
                      f"median (each repeat: {', '.join(f'{x:.2f}x' for x in r['per_repeat'])}); the backend's "
                      f"part {r['backend_median']:.2f}x ({', '.join(f'{x:.2f}x' for x in r['backend_per_repeat'])})")
    console.print("push+pull: set + get_one through Airflow's execution API and metadata database; the backend's "
                  "part: the class's serialize_value + deserialize_value of the same value (spread: (max-min)/median "
                  "of the repeats, the noise floor)")
