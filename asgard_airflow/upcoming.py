"""The runs coming up for a set of Airflow DAGs, and their recent history, through Airflow's own
interfaces: what the retune DAG plans for.

* **queued** runs: DAG runs in state ``queued`` (triggered, waiting for the scheduler);
* **scheduled** runs: the ticks of each DAG's timetable in ``[now, now + window)`` (its
  ``start_date``/``end_date`` respected; a paused DAG starts nothing, so it forecasts nothing:
  neither its timetable nor its queued runs count);
* **history**: the last successful runs (their durations, for the look-ahead window) and the XCom
  rows of the latest (references with ``bytes``: the analyzer's sizes and degrees).

Two readers give the same answers: :class:`TaskReader` inside a task (Airflow 3 tasks have no
database access: the Task SDK asks the API server), :class:`DBReader` anywhere else (the CLI, a
test, the scheduler's process).

    from asgard_airflow.upcoming import TaskReader, upcoming_runs
    mix = upcoming_runs([video_dag, forest_dag], TaskReader(), window=timedelta(minutes=30))
    mix.counts   # {"asgard_video_analytics": 3, "asgard_lightgbm_forest": 1}
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

#: how many timetable ticks one DAG may contribute to a window (a bound, not a forecast)
MAX_TICKS = 1000


def timetable_runs(dag, now: dt.datetime, window: dt.timedelta) -> list[dt.datetime]:
    """When ``dag``'s timetable starts runs in ``[now, now + window)`` (``run_after`` of each).

        >>> import pendulum
        >>> from airflow.sdk import DAG
        >>> d = DAG("every_10", schedule="*/10 * * * *", start_date=pendulum.datetime(2026, 1, 1))
        >>> len(timetable_runs(d, pendulum.datetime(2026, 3, 1, 12, 5), dt.timedelta(minutes=30)))
        3
    """
    from airflow.timetables.base import TimeRestriction
    # the SDK's timetables describe a schedule; the core ones compute it (what the scheduler runs)
    from airflow.serialization.encoders import coerce_to_core_timetable

    import pendulum

    # the core timetables compute with pendulum's DateTime (a plain datetime has no in_timezone)
    now = pendulum.instance(now if now.tzinfo else now.replace(tzinfo=dt.timezone.utc))
    timetable = coerce_to_core_timetable(dag.timetable)
    if not getattr(timetable, "periodic", False):
        return []
    start = dag.start_date or now
    earliest = max(start, now)
    restriction = TimeRestriction(earliest=earliest, latest=dag.end_date, catchup=True)
    out, last = [], None
    for _ in range(MAX_TICKS):
        info = timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
        if info is None or info.run_after >= now + window:
            break
        if info.run_after >= now:
            out.append(info.run_after)
        last = info.data_interval
    return out


@dataclass
class UpcomingMix:
    """The runs ahead per DAG: ``counts`` (queued + scheduled, paused DAGs left out) and why."""

    counts: dict[str, int]
    queued: dict[str, int] = field(default_factory=dict)
    scheduled: dict[str, int] = field(default_factory=dict)
    paused: list[str] = field(default_factory=list)

    @property
    def signature(self) -> str:
        """Which DAGs are coming (not how many runs): what the retune DAG's cursor compares."""
        return json.dumps(sorted(d for d, n in self.counts.items() if n > 0))

    def as_dict(self) -> dict[str, Any]:
        return {"counts": self.counts, "queued": self.queued, "scheduled": self.scheduled, "paused": self.paused}


class TaskReader:
    """Reads through the Task SDK (the supervisor's API calls): for code running in a task."""

    def queued(self, dag_id: str) -> int:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        return RuntimeTaskInstance.get_dr_count(dag_id=dag_id, states=["queued"])

    def paused(self, dag_id: str) -> bool:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        return bool(RuntimeTaskInstance.get_dag(dag_id).is_paused)

    def successful_runs(self, dag_id: str, limit: int = 5) -> list:
        """The last ``limit`` successful runs (newest first) that have a logical date (a run
        triggered without one is not reachable through the SDK's previous-run call)."""
        from airflow.sdk.execution_time.comms import GetPreviousDagRun
        from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

        out, before = [], dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
        for _ in range(limit):
            run = SUPERVISOR_COMMS.send(GetPreviousDagRun(dag_id=dag_id, logical_date=before, state="success")).dag_run
            if run is None or run.logical_date is None:
                break
            out.append(run)
            before = run.logical_date
        return out

    def rows(self, dag, run_id: str) -> list[tuple]:
        """The raw XCom rows (references, not values) of the outputs the DAG's edges read."""
        from airflow.sdk.bases.xcom import BaseXCom

        from .topology import graph

        deps, _, _ = graph(dag)
        outputs = sorted({tuple(s) for d in deps for s in d.sources})
        rows = []
        for task_id, key in outputs:
            # BaseXCom's own deserialization parses the row's JSON: the reference, never a fetch from the store
            values = BaseXCom.get_all(key=key, dag_id=dag.dag_id, task_id=task_id, run_id=run_id) or []
            mapped = hasattr(dag.task_dict[task_id], "partial_kwargs")
            rows += [(task_id, i if mapped else -1, key, v) for i, v in enumerate(values)]
        return rows

    def history(self, dag, limit: int = 5) -> dict:
        runs = self.successful_runs(dag.dag_id, limit)
        durations = [(r.end_date - r.start_date).total_seconds() for r in runs if r.start_date and r.end_date]
        return {"durations": durations, "run_id": runs[0].run_id if runs else None,
                "rows": self.rows(dag, runs[0].run_id) if runs else []}


class DBReader:
    """Reads Airflow's metadata database (outside tasks: a test, the CLI, the scheduler's process)."""

    def queued(self, dag_id: str) -> int:
        from sqlalchemy import func, select

        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session

        with create_session() as session:
            return session.scalar(select(func.count()).select_from(DagRun).where(
                DagRun.dag_id == dag_id, DagRun.state == "queued")) or 0

    def paused(self, dag_id: str) -> bool:
        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session

        with create_session() as session:
            model = session.get(DagModel, dag_id)
            return bool(model and model.is_paused)

    def history(self, dag, limit: int = 5) -> dict:
        from .topology import db_history

        return db_history(dag.dag_id, limit)


def upcoming_runs(dags: Sequence, reader, now: dt.datetime | None = None,
                  window: dt.timedelta = dt.timedelta(minutes=30)) -> UpcomingMix:
    """Queued runs plus the timetables' ticks over ``window`` for each of ``dags``."""
    now = now or dt.datetime.now(dt.timezone.utc)
    mix = UpcomingMix(counts={})
    for dag in dags:
        if reader.paused(dag.dag_id):
            mix.paused.append(dag.dag_id)
            continue
        mix.queued[dag.dag_id] = int(reader.queued(dag.dag_id))
        mix.scheduled[dag.dag_id] = len(timetable_runs(dag, now, window))
        total = mix.queued[dag.dag_id] + mix.scheduled[dag.dag_id]
        if total:
            mix.counts[dag.dag_id] = total
    return mix
