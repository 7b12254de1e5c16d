"""A first put from a process of its own, started with others at one moment: each creates the
store's keyspace and tables (through its own contact point) before writing.

    python -m tests.schema_race <contact point> <keyspace> <index> <start at, epoch seconds>

prints "ok", or the error."""
from __future__ import annotations

import sys
import time


def first_put(contact_point: str, keyspace: str, index: int, start_at: float) -> str:
    """Wait until ``start_at``, then put and read back one object; "ok" or the error."""
    import numpy as np

    from asgard.resources.stores import ObjectKey
    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(contact_points=[contact_point], keyspace=keyspace, replication_factor=3,
                                 consistency="QUORUM")
    data = np.full(300_000, index, dtype=np.int64)
    key = ObjectKey.for_run(f"race-{index}", "first", "result")
    time.sleep(max(0.0, start_at - time.time()))
    try:
        store.put(key, data)
        got = store.get(key)[0]
        return "ok" if np.array_equal(got, data) else "read back other bytes"
    except Exception as exc:  # noqa: BLE001 -- the parent asserts on it
        return f"{type(exc).__name__}: {exc}"[:500]


if __name__ == "__main__":
    print(first_put(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])), flush=True)
