"""Latency of one get after an idle gap, per store, interleaved (medians of 8 per gap):
what a step that reads its input once pays for threads and CPUs that went idle.

    PYTHONPATH=. python scripts/idle_gap.py 1 cassandra,s3,redis      # 1 MiB objects
"""
import numpy as np, time, uuid, sys, statistics
from asgard_bench.io import open_peer
from asgard.resources.network import Deployment
from asgard.resources.stores import ObjectKey
d = Deployment("loopback")
size = int(float(sys.argv[1])*1024*1024)
stores = {b: open_peer(b, **d.store_kwargs(b)) for b in sys.argv[2].split(",")}
data = np.random.default_rng(1).integers(0, 255, size, dtype=np.uint8)
keys = {}
for b, st in stores.items():
    keys[b] = ObjectKey.for_run("cold-"+uuid.uuid4().hex[:6], "op", "x"); st.put(keys[b], data)
    for _ in range(30): st.get(keys[b])
for gap in (0, 0.002, 0.02, 0.2, 0.5):
    res = {b: [] for b in stores}
    for r in range(8):
        for b, st in stores.items():
            time.sleep(gap)
            t = time.perf_counter(); st.get(keys[b]); res[b].append((time.perf_counter()-t)*1e3)
    print(f"gap {gap:>5}s " + "  ".join(f"{b} {statistics.median(v):.2f} ms" for b, v in res.items()))
for b, st in stores.items(): st.purge_scope(keys[b].scope)
