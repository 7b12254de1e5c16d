"""``asgard bench apps --engine airflow``: the seed apps as Airflow DAGs (:mod:`asgard.pipelines.airflow_apps`),
each run with ``airflow dags test`` in an AIRFLOW_HOME of the bench's own, the XCom backend on
each store in turn (``AIRFLOW__ASGARD__BACKEND``), measured from Airflow's metadata database:

* E2E latency: the DAG run's start to end;
* per task: its start to end (each task an invocation, billed as a function would be);
* bytes written: the stored references' ``bytes`` plus the inline values' JSON;
* the store's server CPU seconds and S3 requests, cost and Perf/$ as for Dagster (:func:`price_row`).

``--engine dagster,airflow`` runs both and writes ``summary.md`` with the two Perf/$ side by side.

    asgard bench apps --engine airflow --small --backends cassandra,redis -r 1
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from .apps import BenchConfig, app_sizes, price_row, server_for, summarize, write_outputs
from .cost import Prices, s3_requests

from asgard.resources.stores.registry import BACKENDS as STORE_BACKENDS

#: the stores the XCom backend can use: our stores (the one backend table)
AIRFLOW_BACKENDS = STORE_BACKENDS
KEYSPACE = "asgard_bench_airflow"
DAG_FILE = """import os
from asgard.pipelines.airflow_apps import APPS, make_app_dag
for _app in APPS:
    _dag = make_app_dag(_app, reducers=int(os.environ.get("ASGARD_BENCH_REDUCERS", "4")))
    globals()[_dag.dag_id] = _dag
"""


#: `airflow dags test`'s line when its run ends: the run's id
DAG_RUN_FINISHED = re.compile(r"DagRun Finished: dag_id=[^,]+, logical_date=[^,]+, run_id=([^,]+),")


class AirflowBenchError(ValueError):
    """A bench configuration the Airflow engine cannot run."""


def make_airflow_home(tmp: Path, reducers: int) -> dict:
    home = tmp / "airflow"
    (home / "dags").mkdir(parents=True, exist_ok=True)
    (home / "dags" / "asgard_bench_apps.py").write_text(DAG_FILE)
    root = str(Path(__file__).resolve().parent.parent)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")},
           "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__XCOM_BACKEND": "asgard_airflow.CassandraXComBackend",
           "AIRFLOW__ASGARD__KEYSPACE": KEYSPACE, "AIRFLOW__ASGARD__TTL_SECONDS": "86400",
           "ASGARD_BENCH_REDUCERS": str(reducers),
           "PYTHONPATH": os.pathsep.join([root] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    _airflow(env, "db", "migrate")
    return {"env": env, "db": home / "airflow.db"}


def _airflow(env: dict, *args: str, timeout: float = 1800) -> str:
    airflow = Path(sys.executable).with_name("airflow")
    out = subprocess.run([str(airflow), *args], env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"airflow {' '.join(args)} failed ({out.returncode}):\n{(out.stdout + out.stderr)[-3000:]}")
    return out.stdout + out.stderr


def _seconds(a: str | None, b: str | None) -> float | None:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() if a and b else None


def measure(db: Path, dag_id: str, run_id: str) -> dict[str, Any]:
    """E2E, the tasks' seconds and the bytes each XCom wrote, from Airflow's metadata database."""
    with sqlite3.connect(db) as con:
        start, end, state = con.execute("SELECT start_date, end_date, state FROM dag_run WHERE dag_id = ? AND "
                                        "run_id = ?", (dag_id, run_id)).fetchone()
        tasks = con.execute("SELECT task_id, map_index, start_date, end_date FROM task_instance WHERE dag_id = ? "
                            "AND run_id = ?", (dag_id, run_id)).fetchall()
        xcoms = con.execute("SELECT task_id, map_index, key, value FROM xcom WHERE dag_id = ? AND run_id = ?",
                            (dag_id, run_id)).fetchall()
    writes = []
    for task_id, map_index, key, value in xcoms:
        parsed = json.loads(value) if isinstance(value, str) else value
        stored = isinstance(parsed, dict) and parsed.get("__asgard_xcom__")
        size = parsed["bytes"] if stored else len(json.dumps(parsed, separators=(",", ":")).encode())
        writes.append({"step": f"{task_id}[{map_index}]", "output": key, "bytes": int(size), "stored": bool(stored),
                       # what our backend decided for the value (codec, placement and replicas "auto" per value)
                       "codec": parsed.get("codec") if stored else None,
                       "placement": parsed.get("placement") if stored else None,
                       "replicas": parsed.get("replicas") if stored else None,
                       "write_s": parsed.get("write_s") if stored else None})
    steps = [{"step": f"{t}[{m}]" if m >= 0 else t, "seconds": _seconds(a, b) or 0.0} for t, m, a, b in tasks]
    return {"status": state, "e2e_s": _seconds(start, end) or float("nan"), "steps": steps, "writes": writes,
            "start": start, "end": end}


def run_one(home: dict, rep: int, app: str, backend: str, sizes: dict, prices: Prices) -> dict:
    """Run ``app``'s DAG once with its XComs on ``backend``: one row, as the Dagster bench's."""
    from asgard.pipelines.airflow_apps import dag_id_for

    server = server_for(backend)
    cpu0 = server.cpu_seconds() if server is not None else 0.0
    counts = getattr(server, "request_counts", None)
    requests0 = counts() if counts else {}
    env = {**home["env"], "AIRFLOW__ASGARD__BACKEND": backend}
    conf = {k: sizes[k] for k in ("fanout", "scale") if k in sizes}
    airflow = Path(sys.executable).with_name("airflow")
    t0 = time.perf_counter()
    out = subprocess.run([str(airflow), "dags", "test", dag_id_for(app), "-c", json.dumps(conf)], env=env,
                         capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    cpu1 = server.cpu_seconds() if server is not None else 0.0
    puts, gets = s3_requests(requests0, counts()) if counts else (0, 0)
    text = out.stdout + out.stderr
    found = DAG_RUN_FINISHED.search(text)
    run_id = found.group(1) if found else ""
    error = "" if out.returncode == 0 and found else text[-500:]
    m = measure(home["db"], dag_id_for(app), run_id) if run_id else {
        "status": "error", "e2e_s": float("nan"), "steps": [], "writes": []}
    try:  # ephemeral data: drop the run's stored values (outside the timed window)
        if run_id:
            subprocess.run([sys.executable, "-m", "asgard.cli", "airflow", "purge", "--dag-id",
                            dag_id_for(app),
                            "--run-id", run_id], env=env, capture_output=True, timeout=300)
    except subprocess.TimeoutExpired:
        pass
    steps, writes = m["steps"], m["writes"]
    row = {"rep": rep, "app": app, "backend": backend, "engine": "airflow", "phase": "default",
           "fanout": sizes.get("fanout", ""), "scale": sizes.get("scale", ""), "run_id": run_id,
           "success": not error and m["status"] == "success", "error": error, "e2e_s": m["e2e_s"], "wall_s": wall,
           "invocations": len(steps), "step_s_total": sum(s["seconds"] for s in steps),
           "compute_s_total": sum(s["seconds"] for s in steps), "write_s_total": 0.0, "read_s_total": 0.0,
           "n_writes": len(writes), "n_reads": 0, "bytes_written": sum(w["bytes"] for w in writes),
           "bytes_read": 0, "stored_writes": sum(w["stored"] for w in writes), "io_timing": "none",
           "network": "loopback", "steps_parallel_mean": None, "steps_parallel_max": None,
           "server_cpu_s": cpu1 - cpu0 if server is not None else 0.0}
    return price_row(row, prices, puts, gets)


def run_bench_airflow(cfg: BenchConfig, out: Path, on_start: Callable[[int, int, str], None] | None = None,
                      on_run: Callable[[dict], None] | None = None) -> dict:
    """The bench's plan on Airflow: every (repetition, app, backend), summarized as the Dagster one."""
    wrong = [b for b in cfg.backends if b not in AIRFLOW_BACKENDS]
    if wrong:
        raise AirflowBenchError(f"--engine airflow runs the XCom backend's stores {', '.join(AIRFLOW_BACKENDS)}; "
                                f"drop {wrong} from --backends (the stock and tuned cells are Dagster's)")
    if cfg.network != "loopback":
        raise AirflowBenchError("--engine airflow measures on the loopback profile only: drop --network")
    prices = Prices.load(cfg.prices)
    plan = cfg.plan()
    sizes = {app: app_sizes(app, cfg.fanout, cfg.scale, cfg.small) for app in cfg.apps}
    reducers = int(sizes.get("word_count", {}).get("reducers", 4))
    for b in {b for _, _, _, b in plan}:
        if server_for(b) is not None:
            server_for(b).start()
    rows, t_start = [], time.time()
    with tempfile.TemporaryDirectory(prefix="asgard-bench-airflow-") as tmp:
        home = make_airflow_home(Path(tmp), reducers)
        for i, (rep, _phase, app, backend) in enumerate(plan):
            if on_start:
                on_start(i, len(plan), f"airflow rep {rep + 1}/{cfg.repetitions} {app} on {backend}")
            row = run_one(home, rep, app, backend, sizes[app], prices)
            rows.append(row)
            if on_run:
                on_run(row)
    meta = {"engine": "airflow", "apps": cfg.apps, "backends": cfg.backends, "repetitions": cfg.repetitions,
            "sizes": sizes, "max_concurrent": 1, "function_memory_mb": prices.memory_mb,
            "prices": str(Path(cfg.prices) if cfg.prices else Path(__file__).with_name("prices.yaml")),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
            "seconds": round(time.time() - t_start, 1), "out": str(out)}
    summary = summarize(rows, prices, meta)
    write_outputs(out, rows, [], [], summary)
    md = out / "summary.md"  # the shared report speaks of Dagster's executor: say which engine ran
    md.write_text(md.read_text().replace("# asgard bench apps\n", "# asgard bench apps (engine: Airflow, "
                                         "`airflow dags test`: one task at a time; step times are the tasks')\n", 1))
    return summary


def side_by_side(dagster: dict, airflow: dict) -> str:
    """The Perf/$ table with a Dagster and an Airflow column (medians over successful runs)."""
    by = {(c["app"], c["backend"]): c for c in airflow["cells"]}
    lines = ["# asgard bench apps: Dagster and Airflow", "",
             "The same apps and stores; Dagster runs steps in processes (multiprocess executor), Airflow's "
             "`dags test` runs tasks one after the other in one process. Perf/$ = 1 / (E2E s x cost $).", "",
             "| app | backend | Dagster E2E s | Airflow E2E s | Dagster Perf/$ | Airflow Perf/$ | Airflow / Dagster |",
             "|---|---|---|---|---|---|---|"]
    for c in sorted(dagster["cells"], key=lambda c: (c["app"], c["backend"])):
        a = by.get((c["app"], c["backend"]))
        dp, ap = c["perf_per_usd"]["median"], a["perf_per_usd"]["median"] if a else None
        de, ae = c["e2e_s"]["median"], a["e2e_s"]["median"] if a else None

        def f(x, nd=2):
            return "" if x is None else f"{x:.{nd}f}"

        lines.append(f"| {c['app']} | {c['backend']} | {f(de)} | {f(ae)} | {f(dp, 0)} | {f(ap, 0)} | "
                     f"{f(ap / dp) + 'x' if ap and dp else ''} |")
    return "\n".join(lines) + "\n"
