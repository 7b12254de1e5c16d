"""produce -> meddle -> consume: ``meddle`` damages the stored value the way the run's conf says,
and ``consume`` must fail with the backend's typed error (tests/test_airflow_xcom.py).

conf ``{"mode": ...}``: ``chunk`` writes garbage over the first chunk (checksums catch it),
``unsigned`` stores another value without the signing key (the signature check catches it),
``delete`` deletes the object (a missing value), ``expire`` waits out the store's TTL (the test
sets 2 s), ``none`` leaves it alone.
"""
from __future__ import annotations

import pendulum
from airflow.sdk import dag, get_current_context, task

SIZE = 3 * 1024 * 1024


@dag(dag_id="asgard_tamper", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False,
     params={"mode": "none"})
def asgard_tamper():
    @task
    def produce() -> bytes:
        return b"\x07" * SIZE

    @task
    def meddle():
        from asgard_airflow.xcom import configured_store, object_key

        context = get_current_context()
        mode = context["params"]["mode"]
        run = context["dag_run"]
        folder = object_key(run.dag_id, run.run_id, "produce", -1, "return_value")
        store = configured_store(signed=False)  # an intruder: no signing key
        if mode == "expire":  # the TTL from now: on a slow machine the value may be gone already (2 s TTL)
            import time

            time.sleep(store.ttl_seconds + 1.5)
            print(f"ASGARD-MEDDLE mode={mode}")
            return
        # every push is its own object: the one produce pushed is the folder's only one
        (path,) = [p for p in store.list_paths(folder.scope) if p.startswith(folder.path + "/")]
        key = type(folder)(folder.scope, path)
        manifest = store.read_manifest(key) if mode != "unsigned" else None
        if mode == "chunk":  # same length, other bytes: only the checksum can tell
            store._write_chunks(key, manifest.version, iter([(0, b"\x00" * manifest.chunk_sizes[0])]), 1)
        elif mode == "unsigned":
            store.put(key, b"\x66" * SIZE)
        elif mode == "delete":
            store.delete(key)
        print(f"ASGARD-MEDDLE mode={mode} key={key}")

    @task
    def consume(value: bytes) -> int:
        assert value == b"\x07" * SIZE, "consume got something other than the produced value"
        print("ASGARD-CHECK consume ok")
        return len(value)

    value = produce()
    meddled = meddle()
    value >> meddled >> consume(value)


asgard_tamper()
