"""The Dagster side of tuning: the upcoming-runs sensor, the retune schedule and the retune job."""
from __future__ import annotations

import datetime as dt

from dagster import (
    DagsterRunStatus, RunRequest, ScheduleDefinition, SkipReason, build_schedule_context, build_sensor_context,
)

from asgard_dagster.retune import make_retune_job
from asgard_dagster.sensors import make_retune_schedule, make_upcoming_runs_sensor, upcoming_from_schedules
from pipelines.jobs import make_job


def test_sensor_requests_a_retune_when_the_queued_mix_changes(dagster_instance):
    forest, words = make_job("lightgbm_forest", "cassandra"), make_job("word_count", "cassandra")
    retune = make_retune_job([forest, words])
    sensor = make_upcoming_runs_sensor(retune, [forest, words])
    assert isinstance(sensor(build_sensor_context(instance=dagster_instance)), SkipReason)  # nothing queued
    dagster_instance.create_run_for_job(forest, status=DagsterRunStatus.NOT_STARTED)  # queued runs need a code-location origin
    context = build_sensor_context(instance=dagster_instance)
    request = sensor(context)
    assert isinstance(request, RunRequest)
    assert request.run_config["ops"]["plan_workload"]["config"]["upcoming_jobs"] == [forest.name]
    again = sensor(build_sensor_context(instance=dagster_instance, cursor=context.cursor))
    assert isinstance(again, SkipReason) and "unchanged" in again.skip_message
    dagster_instance.create_run_for_job(words, status=DagsterRunStatus.NOT_STARTED)  # queued runs need a code-location origin
    changed = sensor(build_sensor_context(instance=dagster_instance, cursor=context.cursor))
    assert changed.run_config["ops"]["plan_workload"]["config"]["upcoming_jobs"] == sorted([forest.name, words.name])


def test_schedule_counts_the_runs_of_the_next_window():
    forest, words = make_job("lightgbm_forest", "cassandra"), make_job("word_count", "cassandra")
    schedules = [ScheduleDefinition(job=forest, cron_schedule="*/10 * * * *"),
                 ScheduleDefinition(job=words, cron_schedule="0 3 * * *")]
    now = dt.datetime(2026, 11, 22, 2, 55, tzinfo=dt.timezone.utc)
    assert upcoming_from_schedules(schedules, now, dt.timedelta(minutes=30)) == {forest.name: 3, words.name: 1}
    assert upcoming_from_schedules(schedules, now, dt.timedelta(minutes=6)) == {forest.name: 1, words.name: 1}
    retune = make_retune_job([forest, words])
    schedule = make_retune_schedule(retune, schedules, cron="*/30 * * * *", window_minutes=30)
    result = schedule.evaluate_tick(build_schedule_context(scheduled_execution_time=now))
    (request,) = result.run_requests
    assert request.run_config["ops"]["plan_workload"]["config"]["upcoming_jobs"] == [forest.name, words.name]
    nightly_only = make_retune_schedule(retune, schedules[1:], cron="*/30 * * * *", window_minutes=30)
    quiet = nightly_only.evaluate_tick(build_schedule_context(scheduled_execution_time=now.replace(hour=4)))
    assert not quiet.run_requests and "no watched schedule fires" in quiet.skip_message


def test_retune_job_plans_recommends_and_decides(dagster_instance, cassandra_node):
    forest = make_job("lightgbm_forest", "cassandra")
    retune = make_retune_job([forest])
    config = {"ops": {"plan_workload": {"config": {"upcoming_jobs": [forest.name], "apply": False,
                                                    "evaluations": 200, "lookahead_seconds": 3600}}}}
    result = retune.execute_in_process(run_config=config, instance=dagster_instance)
    assert result.success
    plan = result.output_for_node("plan_workload")
    assert plan["job"] == forest.name and plan["workload"]["pattern"] in ("broadcast", "scatter")
    recommendation = result.output_for_node("recommend_configuration")
    assert recommendation["knobs"] and recommendation["search"]["evaluations"] > 0
    outcome = result.output_for_node("reconfigure")
    decision = outcome["decision"]
    assert outcome["applied"] is None  # dry run
    assert decision["reconfigure"] == (decision["benefit_ops"] > decision["cost_ops"]
                                       and decision["new_ops_per_s"] > decision["current_ops_per_s"])
    # the decision starts from what the node runs, read back from it: the store made the
    # keyspace with durable_writes off, which stock Cassandra's default is not
    from resources.stores.cassandra import CassandraObjectStore

    ks = CassandraObjectStore(keyspace="asgard").session.execute(
        "SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = 'asgard'").one()
    assert ("durable_writes" in outcome["in_force"]) == (ks.durable_writes is False)
    assert outcome["unreadable"] == {}


def test_retune_job_never_starts_a_node_that_is_down(dagster_instance):
    from resources.cassandra import CassandraNode

    forest = make_job("lightgbm_forest", "cassandra")
    retune = make_retune_job([forest])
    down = CassandraNode(index=9)  # 127.0.0.9: no test starts it
    assert not down.is_running()
    config = {"ops": {"plan_workload": {"config": {"upcoming_jobs": [forest.name], "apply": True, "node_index": 9,
                                                    "evaluations": 100}}}}
    result = retune.execute_in_process(run_config=config, instance=dagster_instance)
    assert result.success
    outcome = result.output_for_node("reconfigure")
    assert outcome["applied"] is None and "127.0.0.9 is not running" in outcome["decision"]["reason"]
    assert not down.is_running()
