"""A task that pushes a large XCom and fails on its first try, then succeeds with a small value:
Airflow purges the first try's XComs through the backend before the retry runs."""
from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import dag, get_current_context, task


@dag(dag_id="asgard_retry", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False)
def asgard_retry():
    @task(retries=1, retry_delay=timedelta(seconds=0))
    def flaky():
        ti = get_current_context()["ti"]
        if ti.try_number == 1:
            ti.xcom_push(key="big", value=b"\x05" * (512 * 1024))
            raise RuntimeError("ASGARD-FIRST-TRY fails on purpose after pushing 'big'")
        return "second try"

    flaky()


asgard_retry()
