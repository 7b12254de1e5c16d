"""``asgard bench load``: many step processes writing and reading at once, nothing lost or torn.

``processes`` worker processes (spawned, as Dagster's multiprocess executor spawns steps) each
open the backend's IO manager as a run would (config resolved, :meth:`StoreIOManager.store`)
and write ``objects`` outputs of mixed sizes under the IO manager's key layout for op outputs
(scope ``run/<run_id>``, path ``<step>/<output>``). After a barrier each worker reads back every
output of the next worker and checks its SHA-256 against the content, which is regenerated from
its seed, so no checksum travels with the data. Reported: p50/p99/max latency per operation and
size, aggregate MB/s, and the lost (missing), corrupted (wrong bytes) and failed (any other
error) counts. The run's outputs are purged at the end.

Dagster's ``build_output_context``/``build_input_context`` are not used per object: they cost
40-85 ms each here (an ephemeral instance), far more than the store, and a step never pays them.
"""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import time
import uuid
from typing import Any

import numpy as np

KiB = 1024
#: (bytes, share of objects): mostly small outputs with a tail of large ones
DEFAULT_MIX = ((1 * KiB, 0.60), (16 * KiB, 0.25), (256 * KiB, 0.12), (2048 * KiB, 0.03))


def io_manager_for(backend: str):
    """The backend's IO manager with its defaults (the local servers), used outside a run: its
    fields are plain values, so it needs no initializing (nor a nested resource's context)."""
    from asgard.resources.stores.registry import BACKENDS, StoreConfigError
    from asgard_dagster import CassandraIOManager, LocalIOManager, RedisIOManager, S3IOManager

    if backend not in BACKENDS:  # our stores only: the load bench measures the store mechanism
        raise StoreConfigError(f"unknown backend {backend!r} for the load bench; choose from {', '.join(BACKENDS)}")
    managers = {"cassandra": CassandraIOManager, "redis": RedisIOManager, "s3": S3IOManager, "local": LocalIOManager}
    return managers[backend]()


def _sizes(worker: int, objects: int, mix) -> list[int]:
    rng = np.random.default_rng([worker, 7])
    sizes, shares = zip(*mix)
    return [int(s) for s in rng.choice(sizes, size=objects, p=np.array(shares) / sum(shares))]


def _payload(worker: int, index: int, size: int) -> bytes:
    return np.random.default_rng([worker, index]).bytes(size)


def _worker(backend: str, run_id: str, worker: int, workers: int, objects: int, mix, barrier, results) -> None:
    from asgard.resources.stores import ObjectKey, ObjectMissingError

    store = io_manager_for(backend).store()
    times: dict[tuple[str, int], list[float]] = {}
    lost = corrupted = failed = 0
    errors: list[str] = []
    sizes = _sizes(worker, objects, mix)
    moved = 0
    t_start = time.perf_counter()
    for i, size in enumerate(sizes):
        data = _payload(worker, i, size)
        t0 = time.perf_counter()
        try:
            store.put(ObjectKey.for_run(run_id, f"step_{worker}", f"out_{i}"), data)
        except Exception as exc:  # counted and reported: the bench must finish to say how many
            failed += 1
            errors.append(f"put {worker}/{i}: {type(exc).__name__}: {exc}"[:300])
            continue
        times.setdefault(("put", size), []).append(time.perf_counter() - t0)
        moved += size
    barrier.wait()
    source = (worker + 1) % workers
    for i, size in enumerate(_sizes(source, objects, mix)):
        t0 = time.perf_counter()
        try:
            value, _ = store.get(ObjectKey.for_run(run_id, f"step_{source}", f"out_{i}"))
        except ObjectMissingError:
            lost += 1
            continue
        except Exception as exc:
            failed += 1
            errors.append(f"get {source}/{i}: {type(exc).__name__}: {exc}"[:300])
            continue
        times.setdefault(("get", size), []).append(time.perf_counter() - t0)
        moved += size
        if hashlib.sha256(value).digest() != hashlib.sha256(_payload(source, i, size)).digest():
            corrupted += 1
    results.put({"worker": worker, "times": times, "lost": lost, "corrupted": corrupted, "failed": failed,
                 "errors": errors[:5], "bytes": moved, "seconds": time.perf_counter() - t_start})


def run_load_bench(backend: str = "cassandra", processes: int = 16, objects: int = 1000, mix=DEFAULT_MIX,
                   timeout_s: float = 3600) -> dict[str, Any]:
    """Rows per (operation, size) with count and p50/p99/max ms, and the totals."""
    run_id = f"bench-load-{uuid.uuid4()}"
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(backend, run_id, w, processes, objects, mix, barrier, results))
               for w in range(processes)]
    t0 = time.perf_counter()
    for p in workers:
        p.start()
    reports = []
    try:
        for _ in workers:
            reports.append(results.get(timeout=timeout_s))
    finally:
        for p in workers:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    wall = time.perf_counter() - t0
    io_manager_for(backend).purge_run(run_id)
    merged: dict[tuple[str, int], list[float]] = {}
    for r in reports:
        for k, v in r["times"].items():
            merged.setdefault(k, []).extend(v)
    rows = []
    for (op, size), secs in sorted(merged.items()):
        ms = np.array(secs) * 1000
        rows.append({"op": op, "object_bytes": size, "count": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 3),
                     "p99_ms": round(float(np.percentile(ms, 99)), 3), "max_ms": round(float(ms.max()), 3)})
    written = processes * objects
    return {
        "backend": backend, "processes": processes, "objects_per_process": objects, "objects": written,
        "read_back": sum(len(v) for (op, _), v in merged.items() if op == "get"),
        "lost": sum(r["lost"] for r in reports), "corrupted": sum(r["corrupted"] for r in reports),
        "failed": sum(r["failed"] for r in reports), "errors": [e for r in reports for e in r["errors"]][:10],
        "wall_seconds": round(wall, 2), "mb_s": round(sum(r["bytes"] for r in reports) / 2**20 / wall, 1),
        "rows": rows,
    }


def print_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"asgard bench load: {report['backend']}, {report['processes']} processes x "
                        f"{report['objects_per_process']} objects, wall {report['wall_seconds']} s, "
                        f"{report['mb_s']} MB/s moved")
    for col in ("op", "object", "count", "p50 ms", "p99 ms", "max ms"):
        table.add_column(col, justify="right")
    for r in report["rows"]:
        size = r["object_bytes"]
        label = f"{size // KiB} KiB" if size < 1024 * KiB else f"{size / 2**20:g} MiB"
        table.add_row(r["op"], label, str(r["count"]), f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", f"{r['max_ms']:.1f}")
    console = Console(width=120)
    console.print(table)
    console.print(f"written {report['objects']}, read back and verified {report['read_back']}: "
                  f"lost {report['lost']}, corrupted {report['corrupted']}, failed {report['failed']}")
    for e in report["errors"]:
        console.print(f"  {e}")
