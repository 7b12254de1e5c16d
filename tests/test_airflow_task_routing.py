"""Which mapped tasks the deployment's cluster policy sends to their upstream instance's host
(asgard_airflow.task_routing), read from the apps' DAGs as a worker parses them and as the
scheduler holds them (serialized), and what the XCom backend's placement makes of it; the
routing itself runs on the emulated hosts (tests/test_celery_hosts.py, the Airflow day)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.fast  # no server: definitions only


def _dags():
    from airflow.serialization.serialized_objects import DagSerialization

    from asgard.pipelines.airflow_apps import make_app_dag

    for app in ("etl_columnar", "log_analytics", "word_count", "video_analytics"):
        dag = make_app_dag(app)
        yield app, "parsed", dag
        yield app, "serialized", DagSerialization.from_dict(DagSerialization.to_dict(dag))


def test_a_mapped_task_follows_the_mapped_upstream_it_alone_reads():
    from asgard_airflow.task_routing import followed_upstream

    expected = {"etl_columnar": {"join_customers": "filter_orders", "aggregate": "join_customers"},
                "log_analytics": {"traffic_by_path": "parse_logs"},
                "word_count": {},  # each reducer reads every map task's bucket
                "video_analytics": {"classify": "extract_frame"}}
    for app, form, dag in _dags():
        found = {t.task_id: up for t in dag.tasks if (up := followed_upstream(t))}
        assert found == expected[app], (app, form, found)


def test_the_placement_keeps_a_copy_for_a_follower_only_where_routing_is_on(monkeypatch):
    from asgard.pipelines.airflow_apps import make_app_dag
    from asgard_airflow.placement import readers_on_this_host
    from asgard_airflow.task_routing import follower_of, host_queues

    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    dag = make_app_dag("etl_columnar")
    filter_orders, generate = dag.get_task("filter_orders"), dag.get_task("generate")
    monkeypatch.delenv("AIRFLOW__ASGARD__HOST_QUEUES", raising=False)
    assert host_queues() == {} and follower_of(filter_orders) is None
    assert readers_on_this_host(filter_orders)[0] is False  # the shared queue: any host
    monkeypatch.setenv("AIRFLOW__ASGARD__HOST_QUEUES", "10.0.0.1=h1, 10.0.0.2=h2,bad")
    assert host_queues() == {"10.0.0.1": "h1", "10.0.0.2": "h2"}
    assert follower_of(filter_orders) == "join_customers"
    same, why = readers_on_this_host(filter_orders)
    assert same is True and "routes each instance of join_customers to the host that ran its upstream" in why
    # generate's value is scattered to every filter and join instance: no follower, any host
    assert follower_of(generate) is None and readers_on_this_host(generate)[0] is False


def test_a_task_with_its_own_queue_is_not_routed():
    from airflow.sdk import DAG, task

    from asgard_airflow.task_routing import followed_upstream

    with DAG("queued", schedule=None) as dag:
        @task
        def parts():
            return [1, 2]

        @task
        def first(x):
            return x

        @task(queue="gpu")
        def second(x):
            return x

        second.expand(x=first.expand(x=parts()))
    assert followed_upstream(dag.get_task("second")) is None
