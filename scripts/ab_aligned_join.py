"""Acero's join of an ETL orders partition (133 MiB) read back in pickle5's earlier layout (its
buffers at any offset) against the aligned layout, interleaved; stderr to a file, as Dagster
captures a step's. Usage: .venv/bin/python scripts/ab_aligned_join.py [repeats]"""
import os
import statistics
import sys
import time

import numpy as np
import pyarrow as pa

from asgard.resources.stores.buffers import output_buffer
from asgard.resources.stores.serde import AlignedPickleSerializer, PickleSerializer

rows = 5_000_000
rng = np.random.default_rng(1)
orders = pa.table({"customer_id": rng.integers(0, 100_000, rows), "amount": rng.random(rows),
                   "day": rng.integers(0, 365, rows).astype(np.int32), "qty": rng.integers(0, 50, rows)})
customers = pa.table({"customer_id": np.arange(100_000), "region": rng.integers(0, 7, 100_000)})


def read_back(ser):
    """``orders`` as a get returns it: its frames copied into one read buffer, split by length."""
    frames = ser.dumps(orders)
    buf = output_buffer(sum(f.nbytes for f in frames))
    pos, views = 0, []
    for f in frames:
        buf[pos:pos + f.nbytes] = f
        views.append(buf[pos:pos + f.nbytes])
        pos += f.nbytes
    return ser.loads(views)



tables = {"misaligned": read_back(PickleSerializer()), "aligned": read_back(AlignedPickleSerializer())}
print("first buffer's address mod 64:", {k: t.column(0).chunks[0].buffers()[1].address % 64 for k, t in tables.items()},
      orders.nbytes // 2**20, "MiB")
err = open("/tmp/ab_aligned_join.err", "w")
os.dup2(err.fileno(), 2)
times = {k: [] for k in tables}
for rep in range(int(sys.argv[1]) if len(sys.argv) > 1 else 7):
    for k in (list(tables) if rep % 2 == 0 else list(reversed(tables))):
        t0 = time.perf_counter()
        tables[k].join(customers, keys="customer_id")
        times[k].append(time.perf_counter() - t0)
for k, v in times.items():
    print(k, "join median s", round(statistics.median(v), 3), "min", round(min(v), 3), "max", round(max(v), 3))
print("stderr lines (the misaligned joins' warnings):", sum(1 for _ in open("/tmp/ab_aligned_join.err")))
