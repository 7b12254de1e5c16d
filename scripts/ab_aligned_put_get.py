"""A put and a get of one ETL orders partition (128 MiB serialized) in pickle5's earlier layout
(buffers back to back) and in the aligned one (pickle5-a64), codecs none and lz4, interleaved, on
the suite's loopback node (`asgard stores up`): whether the pad frames cost a put or a get anything.
Usage: .venv/bin/python scripts/ab_aligned_put_get.py [rounds]"""
import statistics
import sys
import time
import uuid

from asgard.pipelines.etl_columnar import orders_partition
from asgard.resources.stores import ObjectKey
from asgard.resources.stores.cql import CassandraObjectStore
from asgard.resources.stores.results import Serialized
from asgard.resources.stores.serde import AlignedPickleSerializer, PickleSerializer

LAYOUTS = {"pickle5": PickleSerializer(), "pickle5-a64": AlignedPickleSerializer()}
CODECS = ("none", "lz4")


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    store = CassandraObjectStore(keyspace="asgard_aligned_ab")
    table = orders_partition(0.5, 4, 0, 0)
    serialized = {name: Serialized(s.dumps(table), name, "pyarrow.lib.Table") for name, s in LAYOUTS.items()}
    scope = f"run/aligned-ab-{uuid.uuid4().hex[:8]}"
    seen = {(layout, codec): {"put": [], "get": []} for layout in LAYOUTS for codec in CODECS}
    cells = list(seen)
    try:
        for r in range(-1, rounds):  # round -1: warm-up, not counted
            for layout, codec in cells if r % 2 == 0 else cells[::-1]:
                key = ObjectKey(scope, f"{layout}-{codec}-{r}")
                put_s = store.put_serialized(key, serialized[layout], codec=codec).seconds
                t0 = time.perf_counter()
                value, _ = store.get(key)
                get_s = time.perf_counter() - t0
                assert value.num_rows == table.num_rows
                if r >= 0:
                    seen[(layout, codec)]["put"].append(put_s)
                    seen[(layout, codec)]["get"].append(get_s)
    finally:
        store.session.execute("DROP KEYSPACE IF EXISTS asgard_aligned_ab", timeout=120)
    size = sum(f.nbytes for f in serialized["pickle5"].frames)
    print(f"object {size / 2**20:.0f} MiB, {rounds} rounds interleaved; medians [min, max]")
    for (layout, codec), d in seen.items():
        print(f"{layout:<12} {codec:<5} " + "  ".join(
            f"{k} {statistics.median(v):.3f} s [{min(v):.3f}, {max(v):.3f}]" for k, v in d.items()))


if __name__ == "__main__":
    main()
