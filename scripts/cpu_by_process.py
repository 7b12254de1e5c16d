"""CPU seconds by process during ETL runs (scale 0.5) under the cloud profile: the Cassandra node, MinIO, and
the rest (the machine's total from /proc/stat; step processes end within a run, so they are in the total only).
Each spec is a backend, optionally with the IO manager's config as JSON; one untimed run, then two measured.
Usage: .venv/bin/python scripts/cpu_by_process.py cassandra s3_stock 'cassandra:{"codec":"lz4","placement":"producer-local"}'
Needs `asgard stores up --network cloud`."""
import os, sys, time, tempfile, json
import psutil
import dagster as dg
from asgard.pipelines.jobs import run_app

def groups():
    g = {}
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            name = p.info["name"] or ""
            if "java" in name or "CassandraDaemon" in cmd: k = "cassandra"
            elif "minio" in name: k = "minio"
            elif "toxiproxy" in name: k = "toxiproxy"
            elif "redis" in name: k = "redis"
            elif "python" in name: k = "python"
            else: k = "other"
            t = p.cpu_times()
            g[p.pid] = (k, t.user + t.system)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return g

def total():
    t = psutil.cpu_times()
    return t.user + t.system + t.nice + t.irq + t.softirq

if __name__ == "__main__":
    specs = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp, dg.DagsterInstance.local_temp(tempdir=tmp) as inst:
        for spec in specs:
            backend, cfg = spec.split(":", 1) if ":" in spec else (spec, "{}")
            cfg = json.loads(cfg)
            run_app("etl_columnar", backend, scale=0.5, instance=inst, network="cloud", io_manager_config=cfg or None)
            for rep in range(2):
                g0, c0, w0 = groups(), total(), time.perf_counter()
                r = run_app("etl_columnar", backend, scale=0.5, instance=inst, network="cloud", io_manager_config=cfg or None)
                g1, c1, w1 = groups(), total(), time.perf_counter()
                by = {}
                for pid, (k, t) in g1.items():
                    by[k] = by.get(k, 0) + t - (g0[pid][1] if pid in g0 else 0)
                print(json.dumps({"spec": spec, "e2e": round(r.seconds, 1), "wall": round(w1 - w0, 1),
                                  "cpu_total": round(c1 - c0, 1), **{k: round(v, 1) for k, v in sorted(by.items())}}), flush=True)
