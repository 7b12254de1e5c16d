"""A large list returned to ``.expand()``: stored element by element, so that each mapped task
instance reads only its own element; ``whole`` takes the entire list (a list)."""
from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

PART = 1024 * 1024  # 4 x 1 MiB: over the tests' 64 KiB threshold


@dag(dag_id="asgard_expand", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False)
def asgard_expand():
    @task
    def make_list() -> list:
        return [bytes([i]) * PART for i in range(4)]

    @task
    def use(part: bytes) -> int:
        assert len(part) == PART and part == part[:1] * PART
        print(f"ASGARD-CHECK use got element {part[0]}")
        return part[0]

    @task
    def whole(parts) -> int:
        assert type(parts) is list, type(parts)  # a real list, as the task returned it
        assert len(parts + [b""]) == 5 and len(parts) == 4 and [p[0] for p in parts] == [0, 1, 2, 3]
        assert list(parts) == [bytes([i]) * PART for i in range(4)]
        print("ASGARD-CHECK whole ok")
        return len(parts)

    parts = make_list()
    use.expand(part=parts)
    whole(parts)


asgard_expand()
