"""Interleaved A/B (and A/A) of store variants in one process, for the data path work of issue 13.

    python scripts/ab_store.py small --variant two='{"batch_bytes":0}' --variant batch='{}' \
        --variant batch2='{}' --peer redis --rounds 8 --count 300
    python scripts/ab_store.py read --sizes-mib 1,64 --variant base='{}' --variant base2='{}' --peer s3

Every round runs each variant (order rotated per round) on the same machine state; the report
gives per variant the median over rounds of ops/s (or read MB/s) and of the server's CPU per op
(or per GB), and the median of the per-round ratio against ``--peer``. Listing one variant
twice under two names gives the noise floor (A/A) of the same run.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

import numpy as np

from asgard_bench.io import ServerCpu, open_peer
from asgard.resources.network import Deployment
from asgard.resources.stores import ObjectKey

MiB = 1024 * 1024


def parse_variants(items):
    out = []
    for item in items:
        name, _, spec = item.partition("=")
        out.append((name, json.loads(spec or "{}")))
    return out


def small_block(store, cpu, count, payload):
    scope = f"ab-{uuid.uuid4().hex[:8]}"
    keys = [ObjectKey.for_run(scope, "small", str(i)) for i in range(count)]
    c0, t0, p0 = cpu.seconds(), time.perf_counter(), time.process_time()
    for key in keys:
        store.put(key, payload)
    for key in keys:
        store.get(key)
    t1, c1, p1 = time.perf_counter(), cpu.seconds(), time.process_time()
    store.purge_scope(f"run/{scope}")
    return (2 * count / (t1 - t0), ((c1 - c0) * 1000 / (2 * count)) if c0 is not None else None,
            (p1 - p0) * 1000 / (2 * count))


def read_block(store, cpu, key, size_mib, reads):
    rates, c0, p0 = [], cpu.seconds(), time.process_time()
    for _ in range(reads):
        t0 = time.perf_counter()
        store.get(key)
        rates.append(size_mib / (time.perf_counter() - t0))
    c1, p1 = cpu.seconds(), time.process_time()
    gb = reads * size_mib / 1024
    return statistics.median(rates), ((c1 - c0) / gb) if c0 is not None else None, (p1 - p0) / gb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["small", "read"])
    ap.add_argument("--variant", action="append", required=True, help="name=JSON store kwargs for cassandra")
    ap.add_argument("--peer", default="redis")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--sizes-mib", default="1,64")
    ap.add_argument("--reads", type=int, default=0, help="reads per block (default: 64 MiB / size, at least 3)")
    ap.add_argument("--node-index", type=int, default=1)
    ap.add_argument("--node-dir", default="", help="workdir of a Cassandra instance of one's own at 127.0.0.<index>")
    args = ap.parse_args()

    deployment = Deployment("loopback")
    if args.node_dir:  # an instance of one's own (not the shared local node)
        from pathlib import Path

        from asgard.resources.cassandra import CassandraNode

        node = CassandraNode(index=args.node_index, workdir=Path(args.node_dir))
        base = node.client_options()
    else:
        base = deployment.store_kwargs("cassandra")
        node = deployment.server("cassandra")
    import asgard.resources.stores.cql as cassandra_store

    variants = []
    for n, kw in parse_variants(args.variant):
        # "_fast_read": the client's frame reader (a session of its own: part of the session key)
        cassandra_store.options.set_options(fast_read=bool(int(kw.pop("_fast_read", 1))))
        in_place = kw.pop("_in_place", None)  # chunks received into the output buffer (1) or copied (0)
        store = open_peer("cassandra", **{**base, **kw})
        if in_place is not None:
            store.in_place_read = bool(in_place)
        store.ping()  # connects now, with this reader
        variants.append((n, store, ServerCpu([node])))
    peer = (args.peer, open_peer(args.peer, **deployment.store_kwargs(args.peer)), ServerCpu.for_backend(args.peer))
    everyone = variants + [peer]
    results: dict = {}
    if args.mode == "small":
        payload = np.random.default_rng(0).bytes(10 * 1024)
        for _, store, cpu in everyone:  # warm-up: connections, prepares, JIT
            small_block(store, cpu, max(50, args.count // 4), payload)
        for r in range(args.rounds):
            order = everyone[r % len(everyone):] + everyone[:r % len(everyone)]
            per = {name: small_block(store, cpu, args.count, payload) for name, store, cpu in order}
            for name, v in per.items():
                results.setdefault(("10KiB", name), []).append((*v, v[0] / per[peer[0]][0]))
    else:
        for size in [int(s) for s in args.sizes_mib.split(",")]:
            data = np.random.default_rng(size).integers(0, 255, size * MiB, dtype=np.uint8)
            reads = args.reads or max(3, 64 // size)
            keys = {}
            for name, store, cpu in everyone:
                keys[name] = ObjectKey.for_run(f"ab-{uuid.uuid4().hex[:8]}", "io", f"{size}mib")
                store.put(keys[name], data)
                read_block(store, cpu, keys[name], size, 1)  # warm
            for r in range(args.rounds):
                order = everyone[r % len(everyone):] + everyone[:r % len(everyone)]
                per = {name: read_block(store, cpu, keys[name], size, reads) for name, store, cpu in order}
                for name, v in per.items():
                    results.setdefault((f"{size}MiB", name), []).append((*v, v[0] / per[peer[0]][0]))
            for name, store, _ in everyone:
                store.purge_scope(keys[name].scope)
    unit = "ops/s" if args.mode == "small" else "read MB/s"
    cpu_unit = "ms/op" if args.mode == "small" else "s/GB"
    print(f"{'object':>7} {'variant':>12} {unit:>10} {'srv CPU ' + cpu_unit:>14} {'cli CPU ' + cpu_unit:>14} "
          f"{'vs ' + peer[0]:>9}  per-round ratios")
    for (size, name), rows in results.items():
        rate = statistics.median(r[0] for r in rows)
        cpus = [r[1] for r in rows if r[1] is not None]
        ratios = [r[3] for r in rows]
        print(f"{size:>7} {name:>12} {rate:>10.1f} {statistics.median(cpus) if cpus else float('nan'):>14.3f} "
              f"{statistics.median(r[2] for r in rows):>14.3f} "
              f"{statistics.median(ratios):>8.3f}x  " + " ".join(f"{x:.2f}" for x in ratios))


if __name__ == "__main__":
    main()
