"""The shared store code's read path, before and after (issue 13): chunks copied into a zeroed
``bytearray`` with zlib's crc32, against an uninitialized numpy buffer with ISA-L's crc32. Both
variants read the same objects in one process, alternating per round, on each backend given;
reports read MB/s and client CPU per GB (process_time), medians over rounds, and the per-round
ratio new / old.

    PYTHONPATH=. python scripts/ab_client_read.py --backends cassandra,s3,redis --sizes-mib 1,64 --rounds 10
"""
from __future__ import annotations

import argparse
import statistics
import time
import uuid
import zlib

import numpy as np

import asgard.resources.stores.base as base
from asgard_bench.io import open_peer
from asgard.resources.network import Deployment
from asgard.resources.stores import ObjectKey

MiB = 1024 * 1024
VARIANTS = {
    "old": (lambda size: memoryview(bytearray(size)), zlib.crc32),
    "new": (base.output_buffer, base.crc32),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", default="cassandra,s3")
    ap.add_argument("--sizes-mib", default="1,64")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    deployment = Deployment("loopback")
    print(f"{'backend':>9} {'object':>7} {'variant':>7} {'read MB/s':>10} {'cli CPU s/GB':>13}")
    for backend in args.backends.split(","):
        store = open_peer(backend, **deployment.store_kwargs(backend))
        for size in [int(s) for s in args.sizes_mib.split(",")]:
            data = np.random.default_rng(size).integers(0, 255, size * MiB, dtype=np.uint8)
            key = ObjectKey.for_run(f"ab-{uuid.uuid4().hex[:8]}", "io", f"{size}mib")
            store.put(key, data)
            reads = max(4, 64 // size)
            rows = {v: [] for v in VARIANTS}
            for r in range(args.rounds + 1):  # round 0 warms up
                for name in (list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]):
                    base.output_buffer, base.crc32 = VARIANTS[name]
                    t0, p0 = time.perf_counter(), time.process_time()
                    for _ in range(reads):
                        store.get(key)
                    dt, cpu = time.perf_counter() - t0, time.process_time() - p0
                    if r:
                        rows[name].append((reads * size / dt, cpu / (reads * size / 1024)))
            base.output_buffer, base.crc32 = VARIANTS["new"]
            for name, got in rows.items():
                print(f"{backend:>9} {size:>5}Mi {name:>7} {statistics.median(g[0] for g in got):>10.1f} "
                      f"{statistics.median(g[1] for g in got):>13.3f}")
            rate = [n[0] / o[0] for n, o in zip(rows["new"], rows["old"])]
            cpu = [n[1] / o[1] for n, o in zip(rows["new"], rows["old"])]
            print(f"{backend:>9} {size:>5}Mi new/old: read MB/s {statistics.median(rate):.3f} (rounds {min(rate):.2f}-"
                  f"{max(rate):.2f}), client CPU per GB {statistics.median(cpu):.3f} (rounds {min(cpu):.2f}-{max(cpu):.2f})")
            store.purge_scope(key.scope)


if __name__ == "__main__":
    main()
