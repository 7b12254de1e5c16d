"""Does a put pay for its codec on top of its write, or beside it? The evidence for codec auto's
cost model (issue 37): a put compresses chunk by chunk while earlier chunks are in flight.

    python scripts/ab_codec_pipeline.py --rounds 5

One partition of the ETL's orders table (pipelines/etl_columnar.py, scale 0.5, fanout 4: 128 MiB),
serialized as the IO manager does, put to the local Cassandra node with codec none, lz4 and zstd in
an order rotating across rounds. Beside each codec's put: its compression of the same chunks alone,
in this process (what codec auto's model adds to the write). The model's sum (compress + the stored
bytes at the raw put's MB/s) and the pipelined max of the two are printed against the put measured.
"""
from __future__ import annotations

import argparse
import statistics

import psutil
import time
import uuid

from asgard.pipelines.etl_columnar import orders_partition
from asgard.resources.stores import ObjectKey
from asgard.resources.stores.base import iter_chunks
from asgard.resources.process import process_cpu_seconds
from asgard.resources.stores.cql import CassandraObjectStore
from asgard.resources.stores.serde import get_codec

MiB = 1024 * 1024
CODECS = ("none", "lz4", "zstd")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keyspace", default="asgard_ab")
    args = ap.parse_args()
    store = CassandraObjectStore(keyspace=args.keyspace, replication_factor=1)
    table = orders_partition(0.5, 4, 0, 0)
    serialized = store.serialize(table)
    size = sum(f.nbytes for f in serialized.frames)
    chunks = [bytes(c) for c in iter_chunks(serialized.frames, store.chunk_size)]
    compress_s, ratio = {}, {}
    for name in CODECS:
        codec = get_codec(name)
        t0 = time.perf_counter()
        stored = sum(len(codec.compress(c)) for c in chunks)
        compress_s[name], ratio[name] = time.perf_counter() - t0, size / stored
    scope = f"run/ab-codec-pipeline-{uuid.uuid4().hex[:8]}"
    [server] = [p.pid for p in psutil.process_iter(["cmdline"]) if "org.apache.cassandra.service.CassandraDaemon"
                in (p.info["cmdline"] or [])]
    puts: dict[str, list[float]] = {name: [] for name in CODECS}
    put_cpu: dict[str, list[float]] = {name: [] for name in CODECS}
    get_cpu: dict[str, list[float]] = {name: [] for name in CODECS}
    try:
        for name in CODECS:  # warm-up
            store.put_serialized(ObjectKey(scope, f"warm-{name}"), serialized, codec=name)
        for r in range(args.rounds):
            for name in CODECS[r % 3:] + CODECS[: r % 3]:
                key = ObjectKey(scope, f"{name}-{r}")
                c0 = process_cpu_seconds(server)
                puts[name].append(store.put_serialized(key, serialized, codec=name).seconds)
                c1 = process_cpu_seconds(server)
                store.get(key)
                put_cpu[name].append(c1 - c0)
                get_cpu[name].append(process_cpu_seconds(server) - c1)
    finally:
        store.purge_scope(scope)
    raw = statistics.median(puts["none"])
    print(f"orders partition: {size / MiB:.0f} MiB serialized, {len(chunks)} chunks; {args.rounds} rounds, order rotating")
    print(f"{'codec':<6}{'ratio':>7}{'compress s':>12}{'put s (median)':>16}{'model sum s':>13}{'pipelined max s':>17}"
          "  server CPU s put/get  put rounds")
    for name in CODECS:
        write = raw / ratio[name]  # the stored bytes at the raw put's rate
        model = (compress_s[name] if name != "none" else 0.0) + write
        pipelined = max(compress_s[name] if name != "none" else 0.0, write)
        print(f"{name:<6}{ratio[name]:>7.2f}{compress_s[name]:>12.3f}{statistics.median(puts[name]):>16.3f}"
              f"{model:>13.3f}{pipelined:>17.3f}  {statistics.median(put_cpu[name]):.3f}/"
              f"{statistics.median(get_cpu[name]):.3f}  {[round(t, 3) for t in puts[name]]}")


if __name__ == "__main__":
    main()
