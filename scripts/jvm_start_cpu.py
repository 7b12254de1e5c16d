"""CPU seconds a lone node spends starting, serving a few puts and gets, and idling, by the JVM
flags it runs with (``JVM_EXTRA_OPTS``), repeats interleaved: what scripts/test.sh's JIT setting
rests on. Usage: ``.venv/bin/python scripts/jvm_start_cpu.py [--repeats 3] [--json] [FLAGS ...]``
(each FLAGS one variant's JVM_EXTRA_OPTS; default: none against ``-XX:TieredStopAtLevel=1``)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

from asgard.resources.cassandra.node import CassandraNode
from asgard.resources.process import process_cpu_seconds
from asgard.resources.stores import ObjectKey
from asgard.resources.stores.cql import CassandraObjectStore

INDEX = 40  # 127.0.0.40: no instance of the suite or the CLI's
PUTS, SIZE, IDLE_S = 40, 4 << 20, 30


def measure(flags: str) -> dict[str, float]:
    os.environ["JVM_EXTRA_OPTS"] = flags
    with tempfile.TemporaryDirectory(prefix="asgard-jvm-cpu-") as workdir:
        node = CassandraNode(index=INDEX, workdir=workdir, heap="2G")
        t0 = time.monotonic()
        node.start()
        ready_s, at_ready = time.monotonic() - t0, process_cpu_seconds(node.pid())
        store = CassandraObjectStore(contact_points=[node.address], keyspace="jvm_start_cpu")
        try:
            t1 = time.monotonic()
            for i in range(PUTS):
                key = ObjectKey.for_run("cpu", "put", str(i))
                store.put(key, np.random.bytes(SIZE))
                store.get(key)
            work_s, after_work = time.monotonic() - t1, process_cpu_seconds(node.pid())
            time.sleep(IDLE_S)
            idle_cpu = process_cpu_seconds(node.pid()) - after_work
        finally:
            store.session.cluster.shutdown()
            node.stop()
    return {"ready_s": ready_s, "start_cpu_s": at_ready, "work_s": work_s, "work_cpu_s": after_work - at_ready,
            "idle_cpu_s": idle_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("flags", nargs="*", default=["", "-XX:TieredStopAtLevel=1"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows: dict[str, list[dict]] = {f: [] for f in args.flags}
    for _ in range(args.repeats):
        for flags in args.flags:  # interleaved: the machine's drift falls on every variant alike
            rows[flags].append(measure(flags))
    summary = {f or "(none)": {k: {"median": round(statistics.median(r[k] for r in runs), 2),
                                   "min": round(min(r[k] for r in runs), 2), "max": round(max(r[k] for r in runs), 2)}
                               for k in runs[0]} for f, runs in rows.items()}
    if args.json:
        print(json.dumps({"puts": PUTS, "size_bytes": SIZE, "idle_s": IDLE_S, "repeats": args.repeats,
                          "variants": summary}, indent=1))
        return
    print(f"{'JVM_EXTRA_OPTS':<28} {'ready s':>14} {'start CPU s':>16} {f'{PUTS} x 4 MiB CPU s':>18} "
          f"{f'idle {IDLE_S} s CPU s':>18}   (median [min-max] of {args.repeats})")
    for name, s in summary.items():
        cell = lambda k: f"{s[k]['median']:.2f} [{s[k]['min']:.1f}-{s[k]['max']:.1f}]"  # noqa: E731
        print(f"{name:<28} {cell('ready_s'):>14} {cell('start_cpu_s'):>16} {cell('work_cpu_s'):>18} "
              f"{cell('idle_cpu_s'):>18}")


if __name__ == "__main__":
    main()
