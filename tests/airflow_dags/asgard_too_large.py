"""A return over the store's max_object_bytes (the test sets 1 MiB): the task fails before
anything is written."""
from __future__ import annotations

import pendulum
from airflow.sdk import dag, task


@dag(dag_id="asgard_too_large", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False)
def asgard_too_large():
    @task
    def produce() -> bytes:
        return b"\x01" * (2 * 1024 * 1024)

    produce()


asgard_too_large()
