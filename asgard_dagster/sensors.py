"""Sensors and schedules that keep Cassandra fit for the work that is coming.

* :func:`make_upcoming_runs_sensor` watches queued (and not yet started) runs of the watched
  jobs and launches the retune job when the mix of upcoming jobs changes; the cursor holds the
  last mix, so the same queue never triggers twice.
* :func:`make_retune_schedule` runs the retune job on a cron schedule for the runs that the
  watched schedules will start within the next window (croniter reads their cron strings).
"""
from __future__ import annotations

import datetime as dt
import json
from typing import Sequence

from croniter import croniter
from dagster import (
    DagsterRunStatus, RunRequest, RunsFilter, ScheduleDefinition, ScheduleEvaluationContext, SensorEvaluationContext,
    SkipReason, sensor,
)


def _retune_request(job_names: list[str], key: str) -> RunRequest:
    return RunRequest(run_key=key, run_config={"ops": {"plan_workload": {"config": {"upcoming_jobs": job_names}}}},
                      tags={"asgard/upcoming": ",".join(job_names)})


def make_upcoming_runs_sensor(retune_job, watched_jobs: Sequence, name: str = "asgard_upcoming_runs_sensor",
                              minimum_interval_seconds: int = 30):
    """Launch ``retune_job`` when the queued runs of ``watched_jobs`` change.

    Example::

        sensors=[make_upcoming_runs_sensor(retune, [video_job, forest_job])]
    """
    watched = sorted({j if isinstance(j, str) else j.name for j in watched_jobs})

    @sensor(job=retune_job, name=name, minimum_interval_seconds=minimum_interval_seconds,
            description="Retunes Cassandra when the mix of queued runs of the watched jobs changes.")
    def upcoming_runs(context: SensorEvaluationContext):
        runs = context.instance.get_runs(
            RunsFilter(job_name=None, statuses=[DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED]), limit=200)
        mix = sorted({r.job_name for r in runs if r.job_name in watched})
        if not mix:
            return SkipReason(f"no queued runs of {watched}")
        signature = json.dumps(mix)
        if signature == context.cursor:
            return SkipReason(f"upcoming mix {mix} unchanged since the last retune")
        context.update_cursor(signature)
        return _retune_request(mix, key=f"queued:{signature}:{len(runs)}")

    return upcoming_runs


def upcoming_from_schedules(schedules: Sequence[ScheduleDefinition], now: dt.datetime,
                            window: dt.timedelta) -> dict[str, int]:
    """``{job name: runs}`` that ``schedules`` will start in ``[now, now + window)``."""
    counts: dict[str, int] = {}
    for schedule in schedules:
        crons = schedule.cron_schedule if isinstance(schedule.cron_schedule, list) else [schedule.cron_schedule]
        for cron in crons:
            it = croniter(cron, now)
            while (tick := it.get_next(dt.datetime)) < now + window:
                counts[schedule.job_name] = counts.get(schedule.job_name, 0) + 1
    return counts


def make_retune_schedule(retune_job, watched_schedules: Sequence[ScheduleDefinition], cron: str = "*/30 * * * *",
                         window_minutes: int = 30, name: str = "asgard_retune_schedule"):
    """Every ``cron`` tick, retune for the runs the watched schedules start in the next window."""

    def evaluate(context: ScheduleEvaluationContext):
        now = context.scheduled_execution_time or dt.datetime.now(dt.timezone.utc)
        counts = upcoming_from_schedules(watched_schedules, now, dt.timedelta(minutes=window_minutes))
        if not counts:
            return SkipReason(f"no watched schedule fires in the next {window_minutes} minutes")
        jobs = sorted(counts, key=lambda j: -counts[j])
        return _retune_request(jobs, key=f"scheduled:{now.isoformat()}")

    return ScheduleDefinition(name=name, cron_schedule=cron, job=retune_job, execution_fn=evaluate,
                              description="Retunes Cassandra for the runs scheduled in the next window.")
