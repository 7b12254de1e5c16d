"""Sensors and schedules that keep Cassandra fit for the work that is coming.

* :func:`make_upcoming_runs_sensor` watches queued (and not yet started) runs of the watched
  jobs and launches the retune job when the mix of upcoming jobs changes; the cursor holds the
  last mix, so the same queue never triggers twice.
* :func:`make_retune_schedule` runs the retune job on a cron schedule for the runs that the
  watched schedules will start within the next window (croniter reads their cron strings).

Both start stopped; each description says so and how to turn it on (:func:`how_to_start`).
"""
from __future__ import annotations

import datetime as dt
import json
from typing import Sequence

from croniter import croniter
from dagster import (
    DagsterRunStatus, DefaultScheduleStatus, DefaultSensorStatus, RunRequest, RunsFilter, ScheduleDefinition, ScheduleEvaluationContext, SensorEvaluationContext,
    SkipReason, sensor,
)


def how_to_start(kind: str, name: str, status) -> str:
    """The sentence a sensor's or schedule's description ends with: whether it starts stopped, and
    how to turn it on (the UI shows the description on the sensor's or schedule's page)."""
    if status.value == "RUNNING":
        return f"Starts running; stop it with its toggle in the UI (Automation) or `dagster {kind} stop {name}`."
    return (f"Starts stopped: turn it on with its toggle in the UI (Automation) or "
            f"`dagster {kind} start {name}` with your workspace (`-w workspace.yaml`); it ticks while the daemon "
            f"runs (`dagster dev` runs one).")


def _retune_request(counts: dict[str, int], key: str) -> RunRequest:
    """A retune run for ``{job: upcoming runs}``, heaviest first, above the applications' priority."""
    from .retune import RETUNE_PRIORITY

    job_names = sorted(counts, key=lambda j: (-counts[j], j))
    config = {"upcoming_jobs": job_names, "upcoming_counts": {j: counts[j] for j in job_names}}
    return RunRequest(run_key=key, run_config={"ops": {"plan_workload": {"config": config}}},
                      tags={"asgard/upcoming": ",".join(f"{j}x{counts[j]}" for j in job_names),
                            "dagster/priority": RETUNE_PRIORITY})


def make_upcoming_runs_sensor(retune_job, watched_jobs: Sequence, name: str = "asgard_upcoming_runs_sensor",
                              minimum_interval_seconds: int = 30):
    """Launch ``retune_job`` when the queued runs of ``watched_jobs`` change.

    Example::

        sensors=[make_upcoming_runs_sensor(retune, [video_job, forest_job])]
    """
    watched = sorted({j if isinstance(j, str) else j.name for j in watched_jobs})

    @sensor(job=retune_job, name=name, minimum_interval_seconds=minimum_interval_seconds,
            default_status=DefaultSensorStatus.STOPPED,
            description="Retunes Cassandra when the mix of queued runs of the watched jobs changes. "
            + how_to_start("sensor", name, DefaultSensorStatus.STOPPED))
    def upcoming_runs(context: SensorEvaluationContext):
        runs = context.instance.get_runs(
            RunsFilter(job_name=None, statuses=[DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED]), limit=200)
        counts: dict[str, int] = {}
        for r in runs:
            if r.job_name in watched:
                counts[r.job_name] = counts.get(r.job_name, 0) + 1
        if not counts:
            return SkipReason(f"no queued runs of {watched}")
        mix = sorted(counts)
        # the cursor keeps the mix (which jobs): more runs of the same jobs need no new retune
        signature = json.dumps(mix)
        if signature == context.cursor:
            return SkipReason(f"upcoming mix {mix} unchanged since the last retune")
        context.update_cursor(signature)
        return _retune_request(counts, key=f"queued:{signature}:{len(runs)}")

    return upcoming_runs


def upcoming_from_schedules(schedules: Sequence[ScheduleDefinition], now: dt.datetime,
                            window: dt.timedelta) -> dict[str, int]:
    """``{job name: runs}`` that ``schedules`` will start in ``[now, now + window)``, each read
    in its own ``execution_timezone`` (UTC if it has none)."""
    from zoneinfo import ZoneInfo

    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.timezone.utc)
    counts: dict[str, int] = {}
    for schedule in schedules:
        crons = schedule.cron_schedule if isinstance(schedule.cron_schedule, list) else [schedule.cron_schedule]
        local_now = now.astimezone(ZoneInfo(schedule.execution_timezone or "UTC"))
        for cron in crons:
            it = croniter(cron, local_now)
            while (tick := it.get_next(dt.datetime)) < now + window:
                counts[schedule.job_name] = counts.get(schedule.job_name, 0) + 1
    return counts


def schedule_is_running(instance, schedule: ScheduleDefinition) -> bool:
    """Whether ``schedule`` will start runs: its state as toggled in the UI or CLI if it was, else
    its ``default_status``. A schedule someone stopped starts nothing, so it forecasts nothing."""
    from dagster._core.definitions.run_request import InstigatorType
    from dagster._core.scheduler.instigation import InstigatorStatus

    if instance is None:
        return schedule.default_status.value == "RUNNING"
    for state in instance.all_instigator_state(instigator_type=InstigatorType.SCHEDULE):
        if state.name == schedule.name and state.status in (InstigatorStatus.RUNNING, InstigatorStatus.STOPPED):
            return state.status == InstigatorStatus.RUNNING
    return schedule.default_status.value == "RUNNING"


def make_retune_schedule(retune_job, watched_schedules: Sequence[ScheduleDefinition], cron: str = "*/30 * * * *",
                         window_minutes: int = 30, name: str = "asgard_retune_schedule"):
    """Every ``cron`` tick, retune for the runs the watched schedules start in the next window."""

    def evaluate(context: ScheduleEvaluationContext):
        now = context.scheduled_execution_time or dt.datetime.now(dt.timezone.utc)
        # a context built without an instance (a unit test, a dry evaluation) has no toggled states
        instance = context.instance if context.instance_ref is not None else None
        running = [s for s in watched_schedules if schedule_is_running(instance, s)]
        counts = upcoming_from_schedules(running, now, dt.timedelta(minutes=window_minutes))
        if not counts:
            stopped = sorted(s.name for s in watched_schedules if s not in running)
            return SkipReason(f"no running watched schedule fires in the next {window_minutes} minutes"
                              + (f" (stopped: {stopped})" if stopped else ""))
        # one request per tick: the run key is the tick, so a tick evaluated twice launches once
        return _retune_request(counts, key=f"scheduled:{now.isoformat()}")

    return ScheduleDefinition(name=name, cron_schedule=cron, job=retune_job, execution_fn=evaluate,
                              default_status=DefaultScheduleStatus.STOPPED,
                              description="Retunes Cassandra for the runs that the watched schedules (those turned "
                              "on) will start in the next window. " + how_to_start("schedule", name, DefaultScheduleStatus.STOPPED))
