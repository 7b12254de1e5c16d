"""What the client's own knobs change on the running local node (run it on the release's classes,
``ASGARD_CASSANDRA_PATCHES=0``, to see what a user's own cluster gets from them).

Each variant is a store of its own in this process, measured against the default in the same
rounds, interleaved (the order reversed every other round), with a second default store as the
A/A noise floor:

- 64 MiB reads: 16 chunks in flight instead of 8; 512 KiB and 256 KiB chunks instead of 1 MiB;
  our S3 beside them;
- 10 KiB put+get: a put's two rows as two requests in flight instead of one UNLOGGED batch
  (``batch_bytes=0``), with the node's CPU and context switches (all its threads, /proc) per op.

    PYTHONPATH=. .venv/bin/python scripts/ab_client_knobs.py --rounds 10
"""
from __future__ import annotations

import argparse
import statistics
import time
import uuid

import numpy as np

from asgard.resources.network import Deployment
from asgard.resources.process import context_switches
from asgard.resources.stores import ObjectKey
from asgard_bench.io import ServerCpu, _settle, open_peer

MiB = 1 << 20


def interleaved(variants: dict, rounds: int, measure) -> dict[str, list]:
    results: dict[str, list] = {name: [] for name in variants}
    for r in range(rounds):
        order = list(variants.items()) if r % 2 == 0 else list(reversed(variants.items()))
        for name, store in order:
            results[name].append(measure(name, store))
    return results


def print_ratios(results: dict[str, list], base: str, value=lambda x: x) -> None:
    for name in results:
        if name == base:
            continue
        ratios = [value(a) / value(b) for a, b in zip(results[name], results[base])]
        print(f"  {name:>12} / {base}: median {statistics.median(ratios):.3f} "
              f"(rounds {min(ratios):.2f}-{max(ratios):.2f})")


def reads(rounds: int, cpu: ServerCpu) -> None:
    variants = {"default": open_peer("cassandra"), "default_aa": open_peer("cassandra"),
                "in_flight_16": open_peer("cassandra", concurrency=16),
                "chunk_512k": open_peer("cassandra", chunk_size=512 * 1024),
                "chunk_256k": open_peer("cassandra", chunk_size=256 * 1024), "s3": open_peer("s3")}
    data = np.random.default_rng(1).integers(0, 255, 64 * MiB, dtype=np.uint8)
    keys = {}
    for name, store in variants.items():
        keys[name] = ObjectKey.for_run(f"ab-knobs-{uuid.uuid4().hex[:6]}", "io", "x")
        store.put(keys[name], data)
        _settle(cpu)  # the put's flush is not the reads' cost

    def measure(name, store):
        t0 = time.perf_counter()
        store.get(keys[name])
        return 64 / (time.perf_counter() - t0)

    results = interleaved(variants, rounds, measure)
    print("64 MiB read MB/s, median of rounds: " + ", ".join(
        f"{n} {statistics.median(v):.0f}" for n, v in results.items()))
    print_ratios(results, "default")
    for name, store in variants.items():
        store.purge_scope(f"run/{keys[name].scope}")


def small_ops(rounds: int, cpu: ServerCpu, pid: int, count: int = 1000) -> None:
    variants = {"batch": open_peer("cassandra"), "batch_aa": open_peer("cassandra"),
                "two_requests": open_peer("cassandra", batch_bytes=0)}
    payload = np.random.default_rng(0).bytes(10 * 1024)

    def measure(name, store):
        scope = f"ab-knobs-{uuid.uuid4().hex[:8]}"
        keys = [ObjectKey.for_run(scope, "small", str(i)) for i in range(count)]
        s0, c0, t0 = context_switches(pid), cpu.seconds(), time.perf_counter()
        for key in keys:
            store.put(key, payload)
        for key in keys:
            store.get(key)
        seconds, cpu_s, switches = time.perf_counter() - t0, cpu.seconds() - c0, context_switches(pid) - s0
        store.purge_scope(f"run/{scope}")
        return 2 * count / seconds, cpu_s * 1000 / (2 * count), switches / (2 * count)

    for store in variants.values():  # connections, prepared statements
        measure("warm", store)
    results = interleaved(variants, rounds, measure)
    print("10 KiB put+get, median of rounds: " + ", ".join(
        f"{n} {statistics.median(o for o, _, _ in v):.0f} ops/s ({statistics.median(c for _, c, _ in v):.3f} ms node "
        f"CPU, {statistics.median(x for _, _, x in v):.1f} node context switches per op)"
        for n, v in results.items()))
    print_ratios(results, "batch", value=lambda x: x[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    node = Deployment().server("cassandra")
    cpu = ServerCpu([node])
    reads(args.rounds, cpu)
    small_ops(args.rounds, cpu, node.pid())


if __name__ == "__main__":
    main()
