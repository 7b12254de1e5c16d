"""Cold reads as `asgard bench io` makes them (put, wait for the node to go idle, one get),
for Cassandra store variants, interleaved per round; medians of write/read MB/s and server CPU.

    PYTHONPATH=. python scripts/ab_cold_read.py --variant k1='{}' --variant k2='{"chunk_size":2097152}' \
        --variant k1b='{}' --variant k2b='{"chunk_size":2097152}' --sizes-mib 16,64 --rounds 12
"""
from __future__ import annotations

import argparse
import json
import statistics

from asgard_bench.io import ServerCpu, _throughput, open_peer
from asgard.resources.network import Deployment


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", action="append", required=True, help="name=JSON store kwargs for cassandra")
    ap.add_argument("--sizes-mib", default="16,64")
    ap.add_argument("--rounds", type=int, default=12)
    args = ap.parse_args()
    deployment = Deployment("loopback")
    cpu = ServerCpu.for_backend("cassandra", deployment=deployment)
    base = deployment.store_kwargs("cassandra")
    stores = []
    for spec in args.variant:
        name, kw = spec.split("=", 1)
        stores.append((name, open_peer("cassandra", **{**base, **json.loads(kw)})))
    results: dict = {}
    for size in [int(s) for s in args.sizes_mib.split(",")]:
        for _, store in stores:  # warm
            _throughput(store, size, 1, cpu)
        for r in range(args.rounds):
            for name, store in stores[r % len(stores):] + stores[:r % len(stores)]:
                results.setdefault((size, name), []).append(_throughput(store, size, 1, cpu))
    print(f"{'MiB':>4} {'variant':>8} {'write MB/s':>10} {'read MB/s':>10} {'srv w s/GB':>10} {'srv r s/GB':>10}")
    for (size, name), rows in results.items():
        def med(field):
            return statistics.median(r[field] for r in rows)
        print(f"{size:>4} {name:>8} {med('write_mb_s'):>10.1f} {med('read_mb_s'):>10.1f} "
              f"{med('server_cpu_write_s_per_gb'):>10.2f} {med('server_cpu_read_s_per_gb'):>10.2f}")


if __name__ == "__main__":
    main()
