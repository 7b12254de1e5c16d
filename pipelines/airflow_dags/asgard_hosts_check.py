"""Drop this file into the dags folder of a CeleryExecutor whose workers take the queues asgard-h1..h3
(`asgard hosts up` starts them): one DAG run's tasks across the hosts (tests/test_celery_hosts.py):
``produce_<h>`` runs on host ``h`` (its ``queue``), ``transform_<h>`` on the next host, reading what
``produce_<h>`` pushed there, and ``gather`` on the shared ``default`` queue reads all three. Every
value goes through the XCom backend to the ring; every task checks the bytes it read and prints
the namespace it ran in."""
from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

HOSTS = [f"asgard-h{n}" for n in (1, 2, 3)]
ELEMENTS = 400_000  # int64: 3.2 MiB, over the XCom threshold: stored in the ring


def _piece(n: int):
    import numpy as np

    return np.full(ELEMENTS, n, dtype=np.int64)


def _where() -> str:
    from asgard.resources.network.namespace import current_netns

    where = current_netns() or "root namespace"
    print(f"ASGARD-HOST {where}")
    _imported_after_fork()
    return where


def _imported_after_fork() -> None:
    """Print the installed modules this task's process imported since its worker forked it (the
    worker's preload, asgard.pipelines.airflow_task_preload, records what it had at the fork)."""
    import json
    import sys

    preload = sys.modules.get("asgard.pipelines.airflow_task_preload")
    if preload is None:
        print("ASGARD-PRELOAD none")
        return
    print(f"ASGARD-PRELOAD imported after the fork: {json.dumps(preload.imported_since_fork())}")


@dag(dag_id="asgard_hosts_check", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False)
def asgard_hosts_check():
    parts = []
    for n in (1, 2, 3):
        @task(task_id=f"produce_{n}", queue=HOSTS[n - 1])
        def produce(n: int = n):
            _where()
            return _piece(n)

        @task(task_id=f"transform_{n}", queue=HOSTS[n % len(HOSTS)])
        def transform(arr, n: int = n):
            import numpy as np

            if not np.array_equal(arr, _piece(n)):
                raise AssertionError(f"produce_{n}'s value read back on {_where()} differs from the one pushed")
            _where()
            return arr * 2

        parts.append(transform(produce()))

    @task
    def gather(first, second, third):
        total = int(sum(int(p.sum()) for p in (first, second, third)))
        expected = sum(2 * n * ELEMENTS for n in (1, 2, 3))
        if total != expected:
            raise AssertionError(f"gathered {total}, expected {expected}")
        _where()
        return total

    gather(*parts)


asgard_hosts_check()
