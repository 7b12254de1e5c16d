"""Mapped tasks each returning a large bytes value, and a fan-in over all of them."""
from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

SIZE = 300 * 1024  # over the tests' 64 KiB threshold: each mapped output is stored


@dag(dag_id="asgard_mapped", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False)
def asgard_mapped():
    @task
    def make(i: int) -> bytes:
        return bytes([i]) * SIZE

    @task
    def fan_in(parts) -> int:
        parts = list(parts)
        assert len(parts) == 4, len(parts)
        for i, part in enumerate(sorted(parts, key=lambda p: p[0])):
            assert part == bytes([i]) * SIZE, (i, len(part))
        print(f"ASGARD-CHECK fan-in ok {len(parts)} parts")
        return len(parts)

    fan_in(make.expand(i=[0, 1, 2, 3]))


asgard_mapped()
