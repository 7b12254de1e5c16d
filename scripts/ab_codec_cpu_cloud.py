"""Where a stored byte's CPU goes under a network profile (issue 37, the codec lever): one ETL orders
partition (128 MiB serialized) put and read back with codec none and lz4, in blocks of ``--block``
puts and gets, the codecs alternating block by block, with ``--hogs`` spinning processes beside
(the day's other run). Per block: the put and get seconds, and the CPU seconds of this client, the
Cassandra node and its Toxiproxy (from /proc), counted until 3 s after the block (its flush).

    .venv/bin/python scripts/ab_codec_cpu_cloud.py --rounds 4 --block 3 --hogs 1 [--profile cloud]

It brings the profile's Cassandra up in its namespace and takes it down after.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid

from asgard.pipelines.etl_columnar import orders_partition
from asgard.resources.network.deployment import Deployment
from asgard.resources.process import process_cpu_seconds
from asgard.resources.stores import ObjectKey
from asgard.resources.stores.cql import CassandraObjectStore

MiB = 1 << 20
CODECS = ("none", "lz4")


def servers(deployment: Deployment) -> dict[str, int]:
    """The pids of the profile's own Cassandra node and the Toxiproxy in front of it (a plain
    loopback has no proxy)."""
    found = {"cassandra": deployment.server("cassandra").pid()}
    proxy = deployment.proxy("cassandra")
    if proxy is not None:
        found["proxy"] = proxy.pid()
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--block", type=int, default=3)
    ap.add_argument("--hogs", type=int, default=1)
    ap.add_argument("--profile", default="cloud")
    args = ap.parse_args()

    deployment = Deployment(args.profile, cassandra_heap="2G")
    deployment.up(("cassandra",))
    store = CassandraObjectStore(**deployment.store_kwargs("cassandra"), keyspace="asgard_cpu_ab",
                                 replication_factor=1)
    serialized = store.serialize(orders_partition(0.5, 4, 0, 0))
    size = sum(f.nbytes for f in serialized.frames)
    procs, me = servers(deployment), os.getpid()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    seen = {c: {"put": [], "get": [], "client": [], **{k: [] for k in procs}} for c in CODECS}
    scope = f"run/cpu-ab-{uuid.uuid4().hex[:8]}"
    try:
        for codec in CODECS:  # warm-up
            store.put_serialized(ObjectKey(scope, f"warm-{codec}"), serialized, codec=codec)
        for r in range(args.rounds):
            for codec in CODECS if r % 2 == 0 else CODECS[::-1]:
                before = {k: process_cpu_seconds(pid) for k, pid in procs.items()}
                mine = process_cpu_seconds(me)
                for b in range(args.block):
                    key = ObjectKey(scope, f"{codec}-{r}-{b}")
                    seen[codec]["put"].append(store.put_serialized(key, serialized, codec=codec).seconds)
                    t0 = time.perf_counter()
                    store.get(key)
                    seen[codec]["get"].append(time.perf_counter() - t0)
                time.sleep(3)  # the flush and compaction the block started
                seen[codec]["client"].append(process_cpu_seconds(me) - mine)
                for k, pid in procs.items():
                    seen[codec][k].append(process_cpu_seconds(pid) - before[k])
                print(codec, r, {k: round(v[-1], 3) for k, v in seen[codec].items()}, flush=True)
    finally:
        for hog in hogs:
            hog.kill()
        store.session.execute("DROP KEYSPACE IF EXISTS asgard_cpu_ab", timeout=120)  # a purge leaves 6 GB of tombstones
        deployment.down()
    print(f"object {size / MiB:.0f} MiB; blocks of {args.block} puts and gets; {args.hogs} spinning process(es)")
    for codec, d in seen.items():
        med = {k: statistics.median(v) for k, v in d.items()}
        cpu = {k: med[k] for k in ("client", *procs)}
        print(f"{codec:<5} put s {med['put']:.3f} get s {med['get']:.3f}  CPU s a block: "
              + " ".join(f"{k} {v:.2f}" for k, v in cpu.items()) + f" total {sum(cpu.values()):.2f}")


if __name__ == "__main__":
    main()
