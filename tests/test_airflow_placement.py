"""``[asgard] placement`` in a real ``airflow dags test`` run against the local Cassandra node
(asgard_airflow/placement.py): the 8 MiB value of tests/airflow_dags/asgard_big_small.py, read by a
task on the same host, gets a producer-local copy (its reference row says so and why), the reader
reads it through that copy, and the ring still holds it whole."""
from __future__ import annotations

import numpy as np
import pytest

from asgard.resources.stores.base import ObjectKey
from asgard.resources.stores.registry import open_store

from .airflow_support import REPO, dags_test, make_home, purge, rendered_fields, xcom_rows

KEYSPACE = "asgard_airflow_test"


@pytest.mark.parametrize("setting", ["auto", "producer-local"])
def test_a_copy_where_the_reader_runs_and_the_reader_uses_it(cassandra_node, tmp_path, monkeypatch, setting):
    """``auto`` leaves a value with one reader in the ring (a copy costs the put about what two
    reads through it save); ``producer-local`` keeps the copy, and the reader reads through it."""
    asgard_home = tmp_path / "host"
    monkeypatch.setenv("ASGARD_HOME", str(asgard_home))  # this test's host root, in its processes and here
    home = make_home(tmp_path / "airflow_home", AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "tests" / "airflow_dags"),
                     AIRFLOW__ASGARD__KEYSPACE=KEYSPACE, AIRFLOW__ASGARD__PLACEMENT=setting,
                     ASGARD_HOME=str(asgard_home))
    try:
        code, text, run_id = dags_test(home, "asgard_big_small")
        assert code == 0 and "ASGARD-CHECK big ok" in text, text[-5000:]
        ref = xcom_rows(home, "asgard_big_small", run_id)[("produce_big", -1, "return_value")]
        # each edge's decisions and reasons, in the Rendered Template of the task that pushed and of the one that pulled
        rendered = rendered_fields(home, "asgard_big_small", run_id)
        pushed, pulled = rendered["produce_big"]["asgard_edges"], rendered["check"]["asgard_edges"]
        assert f"| push `return_value` to `check` | {ref['bytes']:,} | codec none; placement {ref['placement']} | " \
               f"codec: [asgard] codec = none; placement: {ref['placement_reason']} |" in pushed, pushed
        assert "asgard_edges" not in rendered["produce_small"]  # kept in Airflow's table: nothing decided
        assert f"| pull `produce_big.return_value` | {ref['bytes']:,} | " in pulled, pulled
        if setting == "auto":
            # loopback: one host holds the whole ring, so its chunks are read at the store's consistency
            assert "ring; chunk reads quorum" in pulled and "every member runs on this host" in pulled, pulled
        else:
            assert "local copy" in pulled and "a copy on this host" in pulled, pulled
        if setting == "auto":
            assert ref["placement"] == "ring", ref
            assert "runs its 1 downstream task(s) on this host, but a copy costs the put about what 2 reads" \
                in ref["placement_reason"], ref
            assert "(its local copy on this host)" not in text, text[-5000:]
            return
        assert ref["placement"] == "producer-local", ref
        assert "(its local copy on this host)" in text, text[-5000:]
        # the ring is the source of truth: a store that never reads local copies finds it whole
        ring = open_store("cassandra", keyspace=KEYSPACE, local_reads=False)
        value, got = ring.get(ObjectKey(ref["scope"], ref["path"]))
        assert got.source == "ring" and np.array_equal(value, np.arange(1024 * 1024, dtype=np.float64))
        assert open_store("cassandra", keyspace=KEYSPACE).local_copies.path(ObjectKey(ref["scope"], ref["path"])).is_file()
    finally:
        purge(home)


@pytest.mark.fast  # no server: definitions only
def test_on_celery_only_a_reader_on_the_producers_own_queue_shares_its_host(monkeypatch):
    """The CeleryExecutor's placement of tasks, read from a DAG's definition (no worker runs)."""
    import pendulum
    from airflow.sdk import DAG
    from airflow.providers.standard.operators.empty import EmptyOperator

    from asgard_airflow.placement import placement_for, readers_on_this_host

    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    with DAG("asgard_placement_queues", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
        produce = EmptyOperator(task_id="produce", queue="asgard-h1")
        pinned = EmptyOperator(task_id="pinned", queue="asgard-h1")
        produce >> pinned
        shared = EmptyOperator(task_id="shared")
        apart = EmptyOperator(task_id="apart", queue="asgard-h2")
        shared >> apart
        alone = EmptyOperator(task_id="alone", queue="asgard-h1")
        alone >> [EmptyOperator(task_id="near", queue="asgard-h1"), EmptyOperator(task_id="far", queue="asgard-h3")]
    assert readers_on_this_host(produce) == (True, "the CeleryExecutor routes produce and its 1 reader(s) to queue "
                                                   "'asgard-h1', one host's")
    assert readers_on_this_host(shared)[0] is False and "'default' is shared" in readers_on_this_host(shared)[1]
    assert readers_on_this_host(alone) == (False, "the CeleryExecutor routes alone to queue 'asgard-h1' but far to "
                                                  "'asgard-h3'")
    assert readers_on_this_host(apart) == (None, "no task downstream of it")
    assert placement_for("ring", produce) is None  # the store's own setting


@pytest.mark.fast  # no server: definitions only
def test_a_values_reads_come_from_its_dags_topology():
    """What a per-value codec choice weighs (``asgard_airflow.topology.readers_of``): an element of a
    scattered list is read once, a value ``.partial()``-ed into a mapped task once per instance (the
    analyzer's degree for a list not yet pushed), a value two tasks take twice."""
    import pendulum
    from airflow.sdk import DAG, task

    from asgard.tuner.topology import DEFAULT_DYNAMIC_DEGREE
    from asgard_airflow.topology import readers_of

    with DAG("asgard_readers", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
        @task(multiple_outputs=False)
        def split():
            return [1, 2, 3]

        @task
        def table():
            return {"a": 1}

        @task
        def work(part, lookup):
            return part

        @task
        def report(lookup):
            return lookup

        @task
        def audit(lookup):
            return lookup

        looked = table()
        work.partial(lookup=looked).expand(part=split())
        report(looked)
        audit(looked)
    tasks = dag.task_dict
    assert readers_of(tasks["split"], "return_value") == 1
    assert readers_of(tasks["table"], "return_value") == DEFAULT_DYNAMIC_DEGREE + 2
    assert readers_of(tasks["audit"], "return_value") == 1  # nothing downstream: the one read a check makes
    assert readers_of(object(), "return_value") == 1  # no DAG around it
