"""A large return (8 MiB numpy array) and a small one, read downstream; the check task fails the
run unless both arrive intact (tests/test_airflow_xcom.py reads its log and the xcom table)."""
from __future__ import annotations

import hashlib

import pendulum
from airflow.sdk import dag, task

N = 1024 * 1024  # float64: 8 MiB


@dag(dag_id="asgard_big_small", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False)
def asgard_big_small():
    @task
    def produce_big():
        import numpy as np

        return np.arange(N, dtype=np.float64)

    @task
    def produce_small():
        return {"rows": 3, "name": "small"}

    @task
    def check(big, small):
        import numpy as np

        assert isinstance(big, np.ndarray), type(big)
        assert big.shape == (N,) and np.array_equal(big, np.arange(N, dtype=np.float64))
        assert small == {"rows": 3, "name": "small"}, small
        digest = hashlib.sha256(big.tobytes()).hexdigest()
        print(f"ASGARD-CHECK big ok sha256={digest} small={small}")
        return digest

    check(produce_big(), produce_small())


asgard_big_small()
