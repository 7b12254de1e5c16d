"""Tasks choosing for their own values (``params={"asgard": {...}}``, asgard_airflow/task_settings.py):
``chosen`` stores its 8 MiB value with zstd in the ring whatever ``[asgard]`` says; ``plain`` takes
the settings; ``pinned`` is producer-local with a reader on another host's queue, which cannot serve
under the CeleryExecutor (tests/test_airflow_task_settings.py runs it with and without)."""
from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

N = 1024 * 1024  # float64: 8 MiB


@dag(dag_id="asgard_task_settings", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False)
def asgard_task_settings():
    @task(params={"asgard": {"codec": "zstd", "placement": "ring"}})
    def chosen():
        import numpy as np

        return np.arange(N, dtype=np.float64)

    @task
    def plain():
        import numpy as np

        return np.ones(N, dtype=np.float64)

    @task(queue="asgard-h1", params={"asgard": {"placement": "producer-local"}})
    def pinned():
        import numpy as np

        return np.zeros(N, dtype=np.float64)

    @task
    def check(a, b):
        import numpy as np

        assert np.array_equal(a, np.arange(N, dtype=np.float64)) and np.array_equal(b, np.ones(N))
        print("ASGARD-CHECK task settings ok")

    @task(queue="asgard-h2")
    def far(c):
        assert not c.any()
        print("ASGARD-CHECK pinned ok")

    check(chosen(), plain())
    far(pinned())


asgard_task_settings()
