"""CPU seconds of the cloud profile's Cassandra node by thread group (compaction, memtable flushes, the native
transport, reads, ...), over two ETL runs at scale 0.5 after one untimed, from /proc/PID/task/*/stat.
Usage: .venv/bin/python scripts/jvm_thread_cpu.py ['{"codec": "lz4"}']   (the IO manager's config, optional)
Needs `asgard stores up --network cloud`."""
import os, re, sys, time, tempfile, json, collections
import psutil
import dagster as dg
from asgard.pipelines.jobs import run_app

def jvm():
    for p in psutil.process_iter(["name", "cmdline"]):
        if "CassandraDaemon" in " ".join(p.info["cmdline"] or []) and "net/cloud" in " ".join(p.info["cmdline"] or []):
            return p.pid
    raise SystemExit("no Cassandra node of the cloud profile runs: `asgard stores up --network cloud`")

def threads(pid):
    out = collections.Counter()
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
            name = stat[stat.index("(") + 1: stat.rindex(")")]
            f = stat[stat.rindex(")") + 2:].split()
            group = re.sub(r"[-:]?\d+$", "", name)
            out[group] += (int(f[11]) + int(f[12])) / tick
        except (OSError, ValueError):
            pass
    return out

if __name__ == "__main__":
    pid = jvm()
    cfg = json.loads(sys.argv[1]) if len(sys.argv) > 1 else None
    with tempfile.TemporaryDirectory() as tmp, dg.DagsterInstance.local_temp(tempdir=tmp) as inst:
        run_app("etl_columnar", "cassandra", scale=0.5, instance=inst, network="cloud", io_manager_config=cfg)
        t0 = threads(pid)
        for _ in range(2):
            r = run_app("etl_columnar", "cassandra", scale=0.5, instance=inst, network="cloud", io_manager_config=cfg)
        time.sleep(5)
        t1 = threads(pid)
    d = {k: round(t1[k] - t0.get(k, 0), 2) for k in t1}
    tot = sum(d.values())
    print("total", round(tot, 1))
    for k, v in sorted(d.items(), key=lambda x: -x[1])[:18]:
        print(f"{k:<40} {v:6.2f}")
