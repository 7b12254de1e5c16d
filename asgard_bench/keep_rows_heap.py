"""``asgard bench keep-rows-heap``: the heap that reads in flight hold under the patch
``local-read-keep-rows``, on wide and tombstone-heavy partitions, and the patch's bound (issue 38,
part 7).

The patch hands a coordinator's own replica's rows over as read instead of serializing them. Kept
rows cost the heap their objects beyond their data, where a serialized response costs a few bytes
a row. Three single nodes of the project's patched build run side by side (127.0.0.24-26, same
heap and config), and differ by one property each:

* ``bounded``: the patch as shipped (a read goes on serialized past 1 MiB of kept row overhead);
* ``unbounded``: the same with no bound (``asgard.local_read_keep_rows_max_overhead_bytes`` at its
  maximum), i.e. the patch before the bound;
* ``serialized``: ``asgard.local_read_keep_rows=false``, a local read serialized as upstream.

Each node holds the same three partitions, flushed to an sstable: ``wide`` (many small rows, read
whole with pages of 5,000 rows), ``tombstones`` (rows deleted one by one, a few live ones left:
one read scans them all) and ``blobs`` (the store's shape: 1 MiB cells, one read each). For each
shape and round, the nodes in rotating order take ``--in-flight`` concurrent reads in a loop while
the live heap is sampled (``jcmd <pid> GC.class_histogram``: a full collection, then the live
objects' bytes); the live heap with no load, taken just before, is subtracted. That difference is
the heap the reads in flight hold. Reads per second and the server's CPU per read come from the
same windows.

Example::

    report = run_keep_rows_heap(rounds=3)
    report["shapes"]["tombstones"]["held_mib"]   # {"bounded": 3.1, "unbounded": 61.0, "serialized": 2.8}
"""
from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from .slow_replica import coordinator_session

VARIANTS = {
    "bounded": (24, {}),
    "unbounded": (25, {"asgard.local_read_keep_rows_max_overhead_bytes": str(2 ** 63 - 1)}),
    "serialized": (26, {"asgard.local_read_keep_rows": "false"}),
}
KEYSPACE = "asgard_keep_rows_heap"
MiB = 1024 * 1024


def jcmd_binary() -> str:
    java = shutil.which("java")
    beside = Path(os.path.realpath(java)).parent / "jcmd" if java else None
    found = shutil.which("jcmd") or (str(beside) if beside and beside.exists() else None)
    if not found:
        raise RuntimeError("jcmd (the JDK's) is not on PATH nor beside java: install a JDK 17, see scripts/setup.sh")
    return found


def live_heap_bytes(pid: int) -> int:
    """Bytes of live objects on ``pid``'s heap: ``GC.class_histogram`` collects first, then counts."""
    out = subprocess.run([jcmd_binary(), str(pid), "GC.class_histogram"], capture_output=True, text=True,
                         timeout=120).stdout
    match = re.search(r"^Total\s+\d+\s+(\d+)", out, re.M)
    if not match:
        raise RuntimeError(f"jcmd {pid} GC.class_histogram printed no total: {out[-300:]!r}")
    return int(match.group(1))


def load_data(node, wide_rows: int, tombstones: int, blobs: int) -> None:
    """The three partitions on ``node``, flushed to an sstable."""
    from cassandra.concurrent import execute_concurrent_with_args

    cluster, session = coordinator_session(node.address)
    try:
        session.execute(f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        session.execute(f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.rows (p text, c int, v blob, PRIMARY KEY (p, c))")
        insert = session.prepare(f"INSERT INTO {KEYSPACE}.rows (p, c, v) VALUES (?, ?, ?)")
        delete = session.prepare(f"DELETE FROM {KEYSPACE}.rows WHERE p = ? AND c = ?")
        small = os.urandom(64)
        execute_concurrent_with_args(session, insert, [("wide", c, small) for c in range(wide_rows)], concurrency=64)
        execute_concurrent_with_args(session, insert, [("tombstones", c, small) for c in range(0, tombstones, 1000)],
                                     concurrency=64)
        execute_concurrent_with_args(session, delete, [("tombstones", c) for c in range(tombstones) if c % 1000],
                                     concurrency=64)
        for c in range(blobs):
            session.execute(insert, ("blobs", c, os.urandom(MiB)))
    finally:
        cluster.shutdown()
    node.nodetool("flush", KEYSPACE)


def _reads(shape: str, blobs: int):
    """The statements (and arguments) whose reads of ``shape`` the readers take in turn."""
    if shape == "blobs":
        return [(f"SELECT v FROM {KEYSPACE}.rows WHERE p = 'blobs' AND c = %s", (c,)) for c in range(blobs)]
    return [(f"SELECT c, v FROM {KEYSPACE}.rows WHERE p = '{shape}'", None)]


def measure(node, shape: str, blobs: int, in_flight: int, samples: int) -> dict[str, float]:
    """The live heap the reads in flight hold on ``node`` (bytes, median of ``samples``), reads/s and
    server CPU s per read, while ``in_flight`` threads read ``shape`` in a loop."""
    from cassandra.query import SimpleStatement

    from asgard.resources.process import process_cpu_seconds

    cluster, session = coordinator_session(node.address)
    reads = [(SimpleStatement(q, fetch_size=5000), args) for q, args in _reads(shape, blobs)]
    stop, count, errors = threading.Event(), [0], []

    def reader(i: int) -> None:
        while not stop.is_set():
            statement, args = reads[(count[0] + i) % len(reads)]
            try:
                for _row in session.execute(statement, args):
                    pass
                count[0] += 1
            except Exception as exc:  # noqa: BLE001 -- counted and shown; the bench goes on
                errors.append(repr(exc)[:200])

    try:
        for statement, args in reads[:2]:
            list(session.execute(statement, args))  # warm: the statement, the sstable's pages
        pid = node.pid()
        idle = live_heap_bytes(pid)
        threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(in_flight)]
        c0, n0, t0 = process_cpu_seconds(pid), count[0], time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(1.0)
        loaded = []
        for _ in range(samples):
            loaded.append(live_heap_bytes(pid))
            time.sleep(0.3)
        stop.set()
        for t in threads:
            t.join(60)
        dt, c1, n1 = time.perf_counter() - t0, process_cpu_seconds(pid), count[0]
    finally:
        stop.set()
        cluster.shutdown()
    done = max(1, n1 - n0)
    return {"held_bytes": max(0, statistics.median(loaded) - idle), "idle_bytes": idle, "reads_per_s": done / dt,
            "cpu_ms_per_read": 1000 * (c1 - c0) / done, "errors": len(errors)}


def run_keep_rows_heap(rounds: int = 3, wide_rows: int = 100_000, tombstones: int = 50_000, blobs: int = 8,
                       in_flight: int = 8, samples: int = 5, heap: str = "1G", progress=None) -> dict[str, Any]:
    from asgard.resources.cassandra import CassandraNode
    from asgard.resources.paths import run_dir

    say = progress or (lambda _line: None)
    nodes: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    shapes = ("wide", "tombstones", "blobs")
    try:
        for name, (index, props) in VARIANTS.items():
            node = CassandraNode(index=index, heap=heap, workdir=run_dir("bench", f"keep-rows-heap{index}"),
                                 system_properties=props or None, patches=True)
            if node.is_running():
                node.stop()
            node.wipe()
            say(f"starting {name} ({node.address})")
            node.start()
            load_data(node, wide_rows, tombstones, blobs)
            nodes[name] = node
        for r in range(rounds):
            for shape in shapes:
                order = list(VARIANTS)[r % 3:] + list(VARIANTS)[:r % 3]
                for name in order:
                    row = measure(nodes[name], shape, blobs, in_flight, samples)
                    row.update(round=r, shape=shape, variant=name)
                    rows.append(row)
                    say(f"round {r} {shape:<10} {name:<10} held {row['held_bytes'] / MiB:7.1f} MiB  "
                        f"{row['reads_per_s']:8.1f} reads/s  {row['cpu_ms_per_read']:.2f} ms CPU/read")
        logs = {name: (node.workdir / "logs" / "system.log").read_text(errors="replace") for name, node in nodes.items()}
    finally:
        for node in nodes.values():
            node.stop()
    past_bound = {name: "passed" in log and "bytes of kept row overhead" in log for name, log in logs.items()}
    return summarize(rows, past_bound, dict(rounds=rounds, wide_rows=wide_rows, tombstones=tombstones, blobs=blobs,
                                            in_flight=in_flight, samples=samples, heap=heap))


def summarize(rows: list[dict[str, Any]], past_bound: dict[str, bool], options: dict[str, Any]) -> dict[str, Any]:
    shapes: dict[str, Any] = {}
    for shape in dict.fromkeys(r["shape"] for r in rows):
        of = {v: [r for r in rows if r["shape"] == shape and r["variant"] == v] for v in VARIANTS}
        shapes[shape] = {
            "held_mib": {v: statistics.median(r["held_bytes"] for r in rs) / MiB for v, rs in of.items()},
            "held_mib_rounds": {v: [r["held_bytes"] / MiB for r in rs] for v, rs in of.items()},
            "reads_per_s": {v: statistics.median(r["reads_per_s"] for r in rs) for v, rs in of.items()},
            "cpu_ms_per_read": {v: statistics.median(r["cpu_ms_per_read"] for r in rs) for v, rs in of.items()},
            "errors": sum(r["errors"] for r in rows if r["shape"] == shape),
        }
    return {"options": options, "rows": rows, "shapes": shapes, "past_bound_logged": past_bound}


def print_report(rep: dict[str, Any]) -> None:
    o = rep["options"]
    print(f"heap held by {o['in_flight']} reads in flight (live heap under load minus idle, median of "
          f"{o['samples']} samples a round, {o['rounds']} rounds); wide: {o['wide_rows']} rows of 64 B, "
          f"tombstones: {o['tombstones']} deleted rows, blobs: {o['blobs']} x 1 MiB; heap {o['heap']}")
    print(f"{'shape':<11}{'variant':<11}{'held MiB':>9}{'reads/s':>9}{'CPU ms/read':>12}  held MiB per round")
    for shape, s in rep["shapes"].items():
        for v in VARIANTS:
            print(f"{shape:<11}{v:<11}{s['held_mib'][v]:>9.1f}{s['reads_per_s'][v]:>9.1f}{s['cpu_ms_per_read'][v]:>12.2f}  "
                  + " ".join(f"{x:.1f}" for x in s["held_mib_rounds"][v]))
        if s["errors"]:
            print(f"{shape:<11}reads that failed: {s['errors']}")
    print("logged a read past the bound: " + ", ".join(f"{v} {'yes' if b else 'no'}" for v, b in rep["past_bound_logged"].items()))
