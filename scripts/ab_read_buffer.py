"""How the read buffer of a large object is allocated, A/B/C in one process (resources/stores/base.py
output_buffer): numpy's (huge pages by madvise), anonymous memory faulted in by mmap (MAP_POPULATE),
and anonymous memory faulted in by the copies. Each round puts a fresh object, waits for the server
to go idle, then times its first get with each variant in turn (order alternating).

    PYTHONPATH=. python scripts/ab_read_buffer.py cassandra 64 8          # first get after a put
    PYTHONPATH=. python scripts/ab_read_buffer.py cassandra 64 8 hot      # the same object again and again
"""
import time, uuid, mmap, statistics as st, numpy as np, sys, resource
import asgard.resources.stores.base as base
from asgard_bench.io import open_peer, ServerCpu, _settle
from asgard.resources.network import Deployment
from asgard.resources.stores import ObjectKey
def v_numpy(size): return memoryview(np.empty(size, dtype=np.uint8))
def v_populate(size):
    if size < (1 << 20): return v_numpy(size)
    return memoryview(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE))
def v_lazy(size):
    if size < (1 << 20): return v_numpy(size)
    return memoryview(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))
variants = {"numpy": v_numpy, "populate": v_populate, "lazy": v_lazy}
d = Deployment("loopback")
b = sys.argv[1]; mib = int(sys.argv[2])
s = open_peer(b, **d.store_kwargs(b)); cpu = ServerCpu.for_backend(b, [d.server("cassandra")] if b == "cassandra" else None, d)
data = np.random.default_rng(64).integers(0, 255, mib << 20, dtype=np.uint8)
res = {k: [] for k in variants}
for rep in range(int(sys.argv[3])):
    order = list(variants) if rep % 2 == 0 else list(variants)[::-1]
    for name in order:
        hot = len(sys.argv) > 4
        if not hot or rep == 0 and name == order[0]:
            key = ObjectKey.for_run(f"ob-{uuid.uuid4().hex[:6]}", "io", "x")
            s.put(key, data); _settle(cpu); time.sleep(0.5)
        base.output_buffer = variants[name]
        p0 = time.process_time(); t = time.perf_counter(); back, _ = s.get(key); dt = time.perf_counter() - t; p1 = time.process_time()
        assert back.nbytes == data.nbytes and np.array_equal(back[:100], data[:100])
        back[0] = 1  # writable
        res[name].append((mib / dt, p1 - p0))
        del back
        if not hot: s.purge_scope(key.scope)
for name, v in res.items():
    print(f"{b} {mib}MiB {'hot' if len(sys.argv) > 4 else 'first get after put'}: {name:9s} MB/s median {st.median(x[0] for x in v):6.0f} (min {min(x[0] for x in v):4.0f}) client CPU median {st.median(x[1] for x in v):.3f}s max {max(x[1] for x in v):.3f}")
