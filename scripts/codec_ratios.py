"""Each codec's ratio and CPU speed on the day's own data, chunk by chunk as a put compresses it:
the ETL's orders and joined tables (Arrow, pickled as the IO manager does), log analytics' landed
log file (CSV text) and its parsed table, word count's corpus split (text) and random floats. CPU seconds (process time), the best of ``--repeats``.

    .venv/bin/python scripts/codec_ratios.py --repeats 3
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from asgard.pipelines.data import read_source, stdlib_corpus
from asgard.resources.stores.base import iter_chunks
from asgard.resources.stores.serde import CODECS, get_codec, get_serializer

MiB = 1 << 20


def samples() -> dict[str, list[memoryview]]:
    from asgard_bench.chunks import day_data

    serializer = get_serializer("pickle5")
    etl = day_data(0.25, 1, ("etl orders", "etl joined"))  # a 256 MiB partition, as at the ETL's default scale
    logs = day_data(0.5, 4, ("log file", "log table"))  # a 128 MiB partition, as on the day (scale 0.5, fanout 4)
    texts = [read_source(rel) for rel in stdlib_corpus(4)]  # 16 MiB of word count's corpus
    return {"etl orders": serializer.dumps(etl["etl orders"]), "etl joined": serializer.dumps(etl["etl joined"]),
            "log file (csv)": serializer.dumps(logs["log file"]), "log table": serializer.dumps(logs["log table"]),
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
