"""``asgard bench startup``: Cassandra cold start, warm start and restart, trimmed against stock.

Both variants run as a scratch instance (127.0.0.6, its own directory, wiped first) in the same
run: *stock* is Cassandra's own start path (16 allocated tokens, gossip settle wait, ring
delay); *asgard* is the project's (one precomputed token, no settle wait or ring delay, no
bootstrap). Cold = empty data directory; warm = existing data; restart = drain, stop, start.
"""
from __future__ import annotations

import shutil
import time

from asgard.resources.cassandra import CassandraNode
from asgard.resources.paths import run_dir

SCRATCH_INDEX = 6


def measure(fast_start: bool, heap: str = "1G") -> dict:
    workdir = run_dir("cassandra", "startup-bench")
    node = CassandraNode(index=SCRATCH_INDEX, heap=heap, fast_start=fast_start, workdir=workdir)
    node.stop()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    try:
        node.prepare()  # install and render before the clock starts: not part of start-up
        cold = node.start()
        t0 = time.monotonic()
        node.stop()
        stop = time.monotonic() - t0
        warm = node.start()
        restart = node.restart()
    finally:
        node.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return {"variant": "asgard" if fast_start else "stock", "cold_start_s": round(cold, 1),
            "stop_s": round(stop, 1), "warm_start_s": round(warm, 1), "restart_s": round(restart, 1)}


def run_startup_bench(repeat: int = 1) -> list[dict]:
    rows = []
    for _ in range(repeat):
        for fast in (False, True):  # interleaved
            rows.append(measure(fast))
    return rows
