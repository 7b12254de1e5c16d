"""The Dagster side of tuning: the upcoming-runs sensor, the retune schedule and the retune job."""
from __future__ import annotations

import datetime as dt

import pytest

from dagster import (
    DagsterRunStatus, DefaultScheduleStatus, RunRequest, ScheduleDefinition, SkipReason, build_schedule_context,
    build_sensor_context, job, op,
)

from asgard_dagster.retune import make_retune_job
from asgard_dagster.sensors import make_retune_schedule, make_upcoming_runs_sensor, upcoming_from_schedules
from asgard.pipelines.jobs import make_job


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
    dagster_instance.create_run_for_job(words, status=DagsterRunStatus.NOT_STARTED)
    changed = sensor(build_sensor_context(instance=dagster_instance, cursor=context.cursor))
    config = changed.run_config["ops"]["plan_workload"]["config"]
    # the counts reach the retune job (two words runs come before one forest run), and the
    # retune run outranks the applications in the run queue
    assert config["upcoming_jobs"] == [words.name, forest.name]
    assert config["upcoming_counts"] == {words.name: 2, forest.name: 1}
    assert int(changed.tags["dagster/priority"]) > 0
    assert retune.tags["dagster/priority"] == changed.tags["dagster/priority"]


def test_schedule_counts_the_runs_of_the_next_window():
    forest, words = make_job("lightgbm_forest", "cassandra"), make_job("word_count", "cassandra")
    running = DefaultScheduleStatus.RUNNING
    schedules = [ScheduleDefinition(job=forest, cron_schedule="*/10 * * * *", default_status=running),
                 ScheduleDefinition(job=words, cron_schedule="0 3 * * *", default_status=running)]
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
    assert not quiet.run_requests and "no running watched schedule fires" in quiet.skip_message


def test_schedule_reads_each_schedule_in_its_time_zone_and_skips_stopped_ones():
    forest, words = make_job("lightgbm_forest", "cassandra"), make_job("word_count", "cassandra")
    # 03:00 in New York is 08:00 UTC in November: within the next 30 minutes of 07:45 UTC only
    # when the cron is read in the schedule's own zone
    nightly_ny = ScheduleDefinition(job=words, cron_schedule="0 3 * * *", execution_timezone="America/New_York",
                                    default_status=DefaultScheduleStatus.RUNNING)
    now = dt.datetime(2026, 11, 22, 7, 45, tzinfo=dt.timezone.utc)
    assert upcoming_from_schedules([nightly_ny], now, dt.timedelta(minutes=30)) == {words.name: 1}
    assert upcoming_from_schedules([nightly_ny], now.replace(hour=2), dt.timedelta(minutes=30)) == {}
    stopped = ScheduleDefinition(job=forest, cron_schedule="*/10 * * * *")  # default_status STOPPED
    retune = make_retune_job([forest, words])
    schedule = make_retune_schedule(retune, [nightly_ny, stopped], cron="*/30 * * * *", window_minutes=30)
    (request,) = schedule.evaluate_tick(build_schedule_context(scheduled_execution_time=now)).run_requests
    assert request.run_config["ops"]["plan_workload"]["config"]["upcoming_counts"] == {words.name: 1}
    only_stopped = make_retune_schedule(retune, [stopped], cron="*/30 * * * *", window_minutes=30)
    skipped = only_stopped.evaluate_tick(build_schedule_context(scheduled_execution_time=now))
    assert not skipped.run_requests and stopped.name in skipped.skip_message


def test_lookahead_is_forecast_from_the_upcoming_runs_recent_durations(dagster_instance, cassandra_node):
    from asgard_dagster.retune import forecast_lookahead, recent_durations

    words = make_job("word_count", "cassandra")
    for _ in range(2):
        assert words.execute_in_process(instance=dagster_instance).success
    durations = recent_durations(dagster_instance, words.name)
    assert len(durations) == 2 and all(d > 0 for d in durations)
    lookahead, forecast = forecast_lookahead(dagster_instance, {words.name: 3})
    assert lookahead == pytest.approx(3 * sum(durations) / 2)
    assert forecast["jobs"][words.name] == {"runs": 3, "median_s": round(sum(durations) / 2, 2), "history": 2}
    assumed, why = forecast_lookahead(dagster_instance, {"never_ran": 2})
    assert assumed == 1800.0 and why["source"].startswith("assumed")


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
    from asgard.resources.stores.cql import CassandraObjectStore

    ks = CassandraObjectStore(keyspace="asgard").session.execute(
        "SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = 'asgard'").one()
    assert ("durable_writes" in outcome["in_force"]) == (ks.durable_writes is False)
    assert outcome["unreadable"] == {}
    # the restart charged is this node's measured one when the project has restarted it, and
    # says so; otherwise the named assumption
    measured = cassandra_node.restart_seconds()
    assert outcome["restart_seconds"] == (measured if measured is not None else 15.9)
    assert outcome["restart_source"].startswith("median" if measured is not None else "assumed")
    assert plan["lookahead_seconds"] == 3600 and plan["forecast"]["source"] == "configured"


def test_retune_job_never_starts_a_node_that_is_down(dagster_instance):
    from asgard.resources.cassandra import CassandraNode

    forest = make_job("lightgbm_forest", "cassandra")
    retune = make_retune_job([forest])
    down = CassandraNode(index=99)  # 127.0.0.99: no test starts it
    assert not down.is_running()
    config = {"ops": {"plan_workload": {"config": {"upcoming_jobs": [forest.name], "apply": True, "node_index": 99,
                                                    "evaluations": 100}}}}
    result = retune.execute_in_process(run_config=config, instance=dagster_instance)
    assert result.success
    outcome = result.output_for_node("reconfigure")
    assert outcome["applied"] is None and "127.0.0.99 is not running" in outcome["decision"]["reason"]
    assert not down.is_running()


class _Hostile:
    """Unpickling this creates a file: what an attacker's pickle could do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        from pathlib import Path

        return (Path.touch, (Path(self.marker),))


def test_a_run_may_choose_the_model_and_a_pickle_is_refused_unopened(dagster_instance, tmp_path):
    """The model is JSON and LightGBM's file, so a run's config may name it; a pickle is never
    unpickled, whoever names it."""
    import json
    import pickle
    import shutil

    from asgard.tuner.dataset import DEFAULT_MODEL
    from asgard.tuner.surrogates import PickledModelError

    from asgard_dagster.retune import RetuneConfig

    assert RetuneConfig.model_fields["model_path"].description
    forest = make_job("lightgbm_forest", "cassandra")
    retune = make_retune_job([forest])

    def run(**extra):
        config = {"upcoming_jobs": [forest.name], "apply": False, "node_index": 99, "evaluations": 100, **extra}
        return retune.execute_in_process(run_config={"ops": {"plan_workload": {"config": config}}},
                                         instance=dagster_instance, raise_on_error=False)

    shipped = run()
    assert shipped.success and shipped.output_for_node("recommend_configuration")["search"]["config"]
    # a copy of the shipped model that claims a 1000% error: the search keeps no knob of its pick
    unsure = tmp_path / "unsure"
    unsure.mkdir()
    doc = json.loads(DEFAULT_MODEL.read_text())
    shutil.copy(DEFAULT_MODEL.parent / doc["weights"], unsure / doc["weights"])
    (unsure / "model.json").write_text(json.dumps({**doc, "heldout_error_pct": 1000.0}))
    chosen = run(model_path=str(unsure / "model.json"))
    assert chosen.success
    search = chosen.output_for_node("recommend_configuration")["search"]
    assert search["config"] == {} and search["dropped"]

    marker = tmp_path / "unpickled"
    for name in ("evil.pkl", "evil.json"):
        (tmp_path / name).write_bytes(pickle.dumps(_Hostile(marker), protocol=4))
        refused = run(model_path=str(tmp_path / name))
        assert not refused.success and not marker.exists()
        (failure,) = [e for e in refused.all_events if e.event_type_value == "STEP_FAILURE"]
        assert failure.step_key == "recommend_configuration"
        error = failure.event_specific_data.error.cause  # what the op raised, under Dagster's wrapper
        assert error.cls_name == PickledModelError.__name__ and "asgard tune fit --out" in error.message


def test_workspace_retune_job_plans_for_an_asset_job(dagster_instance, cassandra_node):
    """The workspace's retune job analyses the asset job ``word_count_map`` (resolved against the
    assets) as it does op jobs; a dry run."""
    from asgard.pipelines.definitions import defs

    retune = defs.resolve_job_def("asgard_retune_cassandra")
    config = {"ops": {"plan_workload": {"config": {"upcoming_jobs": ["word_count_map"], "apply": False,
                                                    "evaluations": 50, "lookahead_seconds": 600}}}}
    result = retune.execute_in_process(run_config=config, instance=dagster_instance)
    assert result.success
    plan = result.output_for_node("plan_workload")
    assert plan["job"] == "word_count_map"
    # the stages the analyzer found are in the output's metadata
    metadata = next(e for e in result.all_node_events if e.step_key == "plan_workload"
                    and e.event_type_value == "STEP_OUTPUT").event_specific_data.metadata
    assert [(s["producer"], s["kind"]) for s in metadata["stages"].value] == [("corpus_split", "pipe")]
    assert plan["workload"]["pattern"] == "mixed"  # a pipe of one split: no fan-out to tune for


@pytest.fixture(scope="module")
def live_node():
    """127.0.0.18: this module's own instance, for changes applied for real (node1 serves the suite)."""
    from asgard.resources.cassandra import CassandraNode

    node = CassandraNode(index=18, heap="2G")  # the heap the tuner's knob space was calibrated on
    node.wipe()
    node.set_overrides({}, replace=True)  # wipe() keeps them: knobs an earlier session applied
    node.live_change_log.unlink(missing_ok=True)  # and the costs it measured
    node.start()
    yield node
    node.stop()


def test_a_live_change_is_measured_and_charged_to_the_next_decision(dagster_instance, live_node):
    """The loop through a real retune run on a lone node: a live change (nodetool) applied while
    the probe's workload runs on; how long it took and the throughput it cost are recorded;
    predicted and realized gain are in the run's metadata; the next decision charges the
    measured cost, not an assumption."""
    import json

    forest = make_job("lightgbm_forest", "cassandra")
    retune = make_retune_job([forest])

    def run(knobs: dict, apply: bool):
        config = {"ops": {"plan_workload": {"config": {
            "upcoming_jobs": [forest.name], "node_index": 18, "knobs": knobs, "force": True, "apply": apply,
            "probe_seconds": 1.0, "evaluations": 50, "lookahead_seconds": 600}}}}
        result = retune.execute_in_process(run_config=config, instance=dagster_instance)
        assert result.success
        [output] = [e for e in result.events_for_node("reconfigure") if e.is_successful_output]
        return result.output_for_node("reconfigure"), {k: v.value for k, v in
                                                         output.event_specific_data.metadata.items()}

    assert not live_node.live_change_log.exists()
    first, meta = run({"concurrent_writes": 64, "compaction_throughput_mib": 128}, apply=True)
    assert first["live_source"].startswith("assumed") and first["decision"]["cost_ops"] == 0
    applied = first["applied"]
    assert applied["restarted"] is False
    assert sorted(applied["live"]) == ["setcompactionthroughput 128", "setconcurrency MutationStage 64"]
    [record] = [json.loads(line) for line in live_node.live_change_log.read_text().splitlines()]
    assert record["endpoint"] == "127.0.0.18:9042"
    assert 0 < record["seconds"] <= applied["seconds"] + 0.01
    assert 0 <= record["slowdown"] < 1  # probed: the workload ran on through the change
    # the record keeps 3 decimals, the metadata 2: rounded twice, they may differ in the last place
    assert abs(meta["measured_live_change"]["seconds"] - record["seconds"]) <= 0.0051
    assert meta["measured_live_change"]["ops_per_s_during"] > 0
    # the loop closed: predicted and realized gain side by side, rolled back if worse than noise
    assert {"predicted_gain_pct", "realized_gain_pct", "noise_pct"} <= set(meta)
    # predicted over what was in force, as realized is measured: the same gain the decision weighed
    assert first["predicted_gain_pct"] == first["decision"]["predicted_gain_pct"]
    assert meta["predicted_gain_pct"] == round(first["decision"]["predicted_gain_pct"], 2)
    assert (first["decision"]["predicted_gain_pct"] <= 0) == ("not faster" in first["decision"]["reason"])
    rolled_back = meta["realized_gain_pct"] < -meta["noise_pct"]
    assert ("rolled_back" in first) == rolled_back
    assert live_node.settings(["concurrent_writes"])["concurrent_writes"] == ("32" if rolled_back else "64")

    # the next decision over a live change charges what was measured
    second, meta2 = run({"concurrent_writes": 48}, apply=False)
    assert second["live_source"].startswith("measured")
    assert second["live_change_seconds"] == record["seconds"]
    assert second["live_slowdown"] == record["slowdown"]
    assert meta2["live_change_seconds"] == round(record["seconds"], 2)
    assert second["applied"] is None and len(live_node.live_change_log.read_text().splitlines()) == 1

    # what is already in force is said so, and nothing is applied or charged
    in_force = {"concurrent_writes": 32 if rolled_back else 64}
    third, _ = run(in_force, apply=False)
    assert third["decision"]["reason"] == "the recommended configuration is already in force"
    assert third["decision"]["reconfigure"] is False and third["decision"]["predicted_gain_pct"] == 0


@op
def ping() -> None:
    return None


@job
def heartbeat():
    """A job whose ops pass no data: nothing of it reaches the store."""
    ping()


def test_a_job_whose_ops_pass_no_data_plans_nothing_and_the_retune_run_succeeds(dagster_instance):
    """Nothing of such a job reaches the store: the plan leaves it out, and with nothing else
    upcoming the retune stops after planning (skipped, not failed), touching no server."""
    retune = make_retune_job([heartbeat])
    result = retune.execute_in_process(
        run_config={"ops": {"plan_workload": {"config": {"upcoming_jobs": ["heartbeat"], "lookahead_seconds": 60}}}},
        instance=dagster_instance)
    assert result.success
    skipped = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SKIPPED"}
    assert skipped == {"recommend_configuration", "reconfigure"}
    logs = " ".join(e.user_message or "" for e in dagster_instance.all_logs(result.run_id))
    assert "heartbeat passes no data between its steps" in logs and "nothing to plan" in logs


@pytest.mark.fast  # no server: the jobs' graphs and the instance's (empty) history
def test_a_mix_is_tuned_for_its_heaviest_job_and_a_job_passing_no_data_is_left_out(dagster_instance):
    """What the retune job plans for (and bench day's best_static recommends for): of the upcoming
    jobs, the one whose dominant stage moves the most bytes."""
    from asgard.tuner.topology import heaviest
    from asgard_dagster.topology import analyze_with_history

    mix = [heartbeat, make_job("word_count", "cassandra"), make_job("lightgbm_forest", "cassandra"),
           make_job("etl_columnar", "cassandra")]
    topologies = [(j.name, analyze_with_history(j, dagster_instance)) for j in mix]
    skipped = []
    name, topology = heaviest(topologies, skipped=lambda name, exc: skipped.append(name))
    assert skipped == ["heartbeat"]
    moved = {n: t.dominant().bytes_moved for n, t in topologies[1:]}
    assert len(set(moved.values())) > 1 and moved[name] == max(moved.values()), moved
    assert topology is dict(topologies)[name]
    assert heaviest(topologies[:1]) is None
    # the retune job plans for it (a dry run stops at the plan's output here: no node to read)
    retune = make_retune_job(mix)
    result = retune.execute_in_process(run_config={"ops": {"plan_workload": {"config": {
        "upcoming_jobs": [j.name for j in mix], "lookahead_seconds": 60}}}}, instance=dagster_instance,
        op_selection=["plan_workload"])
    assert result.success and result.output_for_node("plan_workload")["job"] == name
