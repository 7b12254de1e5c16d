"""A first put from a process of its own, started with others at once: each creates the store's
keyspace and tables (through its own contact point) before writing."""
from __future__ import annotations


def first_put(contact_point: str, keyspace: str, start, index: int) -> str:
    """Wait for ``start`` (a barrier), then put and read back one object; "ok" or the error."""
    import numpy as np

    from asgard.resources.stores import ObjectKey
    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(contact_points=[contact_point], keyspace=keyspace, replication_factor=3,
                                 consistency="QUORUM")
    data = np.full(300_000, index, dtype=np.int64)
    key = ObjectKey.for_run(f"race-{index}", "first", "result")
    start.wait(60)
    try:
        store.put(key, data)
        got = store.get(key)[0]
        return "ok" if np.array_equal(got, data) else "read back other bytes"
    except Exception as exc:  # noqa: BLE001 -- the parent asserts on it
        return f"{type(exc).__name__}: {exc}"[:500]
