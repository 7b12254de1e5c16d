"""Each codec's ratio and CPU speed on the day's own data, chunk by chunk as a put compresses it:
the ETL's orders and joined tables (Arrow, pickled as the IO manager does), log analytics' landed
log file (CSV text) and its parsed table, word count's corpus split (text) and random floats. CPU seconds (process time), the best of ``--repeats``.

    .venv/bin/python scripts/codec_ratios.py --repeats 3
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from asgard.pipelines import etl_columnar, log_analytics
from asgard.pipelines.data import read_source, stdlib_corpus
from asgard.resources.stores.base import iter_chunks
from asgard.resources.stores.serde import CODECS, get_codec, get_serializer

MiB = 1 << 20


def samples() -> dict[str, list[memoryview]]:
    serializer = get_serializer("pickle5")
    orders = etl_columnar.orders_partition(0.25, 1, 0, 0)  # a 256 MiB partition, as at the ETL's default scale
    customers = etl_columnar.customers_table(0.25, 0)
    joined = etl_columnar._joined(etl_columnar._filtered(orders), customers)
    texts = [read_source(rel) for rel in stdlib_corpus(4)]  # 16 MiB of word count's corpus
    log_file = log_analytics.log_file(0.5, 4, 0, 0)  # a 128 MiB partition, as on the day (scale 0.5, fanout 4)
    return {"etl orders": serializer.dumps(orders), "etl joined": serializer.dumps(joined),
            "log file (csv)": serializer.dumps(log_file), "log table": serializer.dumps(log_analytics._parsed(log_file)),
            "word count text": serializer.dumps({"texts": texts}), "random floats": serializer.dumps(
                np.random.default_rng(0).random(8 * MiB))}


def measure(frames: list[memoryview], codec_name: str, repeats: int) -> tuple[float, float, float]:
    codec = get_codec(codec_name)
    chunks = list(iter_chunks(frames, MiB))
    size = sum(c.nbytes for c in chunks)
    packs, unpacks = [], []
    for _ in range(repeats):
        t0 = time.process_time()
        packed = [codec.compress(c) for c in chunks]
        t1 = time.process_time()
        for p, c in zip(packed, chunks):
            codec.decompress(p, c.nbytes)
        packs.append(t1 - t0)
        unpacks.append(time.process_time() - t1)
    stored = sum(memoryview(p).nbytes for p in packed)
    return size / stored, size / MiB / max(min(packs), 1e-9), size / MiB / max(min(unpacks), 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'data':<16} {'MiB':>5}  {'codec':<10} {'ratio':>6} {'compress MiB/s':>15} {'decompress MiB/s':>17}")
    for label, frames in samples().items():
        size = sum(memoryview(f).nbytes for f in frames) / MiB
        for name in sorted(set(CODECS) - {"none"}):
            ratio, pack, unpack = measure(frames, name, args.repeats)
            print(f"{label:<16} {size:>5.0f}  {name:<10} {ratio:>6.2f} {pack:>15.0f} {unpack:>17.0f}")


if __name__ == "__main__":
    main()
