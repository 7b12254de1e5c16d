"""Interleaved A/B of a lone node's restart, one source tree per variant (issue 10).

Every round restarts one scratch instance (default 127.0.0.24, its own directory, data kept
across rounds) once per variant, in a rotating order, each time in a fresh Python process
importing that variant's tree: its stop() stops the instance the previous variant started, its
start() starts it with its own flags. Per restart: stop, start (to CQL-ready), their sum, the
server JVM's CPU seconds at ready (steadier than wall time on a shared machine) and the
seconds from launch to "Starting listening for CQL clients" in system.log. List one tree twice
for the A/A noise floor. Example (the tree before the change from git, the worktree after):

    git archive a51ff86 resources asgard_bench asgard_dagster | tar -x -C /tmp/before
    ASGARD_HOME=... python scripts/ab_restart.py --tree before=/tmp/before --tree after=. \\
        --tree after_b=. --rounds 4
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def one(index: int, heap: str, workdir: Path) -> dict:
    from asgard.resources.cassandra import CassandraNode
    from asgard.resources.process import process_cpu_seconds

    node = CassandraNode(index=index, heap=heap, workdir=workdir)
    log = workdir / "logs" / "system.log"
    pos = log.stat().st_size if log.exists() else 0
    t0 = time.monotonic()
    node.stop()
    t1, launched = time.monotonic(), time.time()
    node.start()
    t2 = time.monotonic()
    record = {"stop": t1 - t0, "start": t2 - t1, "restart": t2 - t0, "cpu": process_cpu_seconds(node.pid()),
              "load1": os.getloadavg()[0]}
    with open(log, errors="replace") as f:
        f.seek(pos)
        for line in f:
            if "Starting listening for CQL clients" in line:
                stamp = re.search(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line).group(1)
                record["cql"] = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() - launched
                break
    return {k: round(v, 2) for k, v in record.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", required=True, help="name=path of a source tree")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--index", type=int, default=24)
    parser.add_argument("--heap", default="1G")
    parser.add_argument("--workdir", default="/tmp/asgard-ab-restart")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    workdir = Path(args.workdir)
    if args.one:
        print(json.dumps(one(args.index, args.heap, workdir)))
        return
    trees = dict(t.split("=", 1) for t in args.tree)

    def run(name: str) -> dict:
        root = str(Path(trees[name]).resolve())
        proc = subprocess.run([sys.executable, __file__, "--one", "--tree", f"{name}={root}", "--index", str(args.index),
                               "--heap", args.heap, "--workdir", str(workdir)],
                              env=dict(os.environ, PYTHONPATH=root), cwd=root, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{name}: {proc.stderr[-3000:]}")
        record = {"variant": name, **json.loads(proc.stdout.strip().splitlines()[-1])}
        print(json.dumps(record), flush=True)
        return record

    names = list(trees)
    shutil.rmtree(workdir, ignore_errors=True)
    rows = []
    try:
        run(names[-1])  # the cold start: data for the rounds to keep
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            rows += [run(name) for name in order]
    finally:
        sys.path.insert(0, str(Path(trees[names[-1]]).resolve()))
        from asgard.resources.cassandra import CassandraNode

        CassandraNode(index=args.index, heap=args.heap, workdir=workdir).stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nmedian [min-max] over {args.rounds} rounds; {args.heap} heap; 127.0.0.{args.index}")
    print(f"{'variant':<10} {'stop s':>17} {'start s':>17} {'restart s':>17} {'CPU s at ready':>17} {'launch->CQL s':>17}")
    for name in names:
        rs = [r for r in rows if r["variant"] == name]

        def cell(key: str) -> str:
            values = [r[key] for r in rs if key in r]
            return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]" if values else "-"

        print(f"{name:<10} {cell('stop'):>17} {cell('start'):>17} {cell('restart'):>17} {cell('cpu'):>17} {cell('cql'):>17}")


if __name__ == "__main__":
    main()
