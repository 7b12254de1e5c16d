"""``asgard_definitions``: a ``Definitions`` with the Asgard IO manager, purge sensor and
(optionally) the tuning sensors, schedule and retune job wired in."""
from __future__ import annotations

from typing import Sequence

from dagster import Definitions

from .cassandra import CassandraIOManager, make_purge_on_success_sensor
from .io_manager import StoreIOManager


def asgard_definitions(
    jobs: Sequence = (),
    assets: Sequence = (),
    io_manager: StoreIOManager | None = None,
    purge_on_success: bool = True,
    extra_resources: dict | None = None,
    sensors: Sequence = (),
    schedules: Sequence = (),
    retune: bool = False,
    retune_cron: str = "*/30 * * * *",
) -> Definitions:
    """Definitions whose ``io_manager`` keeps outputs in Cassandra (the local node by default).

    With ``retune=True`` it also adds the retune job (topology -> surrogate -> cost-benefit ->
    apply), a sensor that launches it when the queued runs of ``jobs`` change, and a schedule that
    launches it for the runs ``schedules`` will start in the next window.

    Example::

        from asgard_dagster.definitions import asgard_definitions
        defs = asgard_definitions(jobs=[my_job], schedules=[nightly], retune=True)
    """
    io_manager = io_manager or CassandraIOManager()
    all_jobs, all_sensors, all_schedules = list(jobs), list(sensors), list(schedules)
    if purge_on_success:
        all_sensors.append(make_purge_on_success_sensor(io_manager))
    if retune:
        from .retune import make_retune_job
        from .sensors import make_retune_schedule, make_upcoming_runs_sensor

        # the job reaches the node with the IO manager's login and TLS settings
        connection = io_manager.connection() if isinstance(io_manager, CassandraIOManager) else None
        # an asset job is analysed as the op graph it resolves to against these assets
        retune_job = make_retune_job([_resolved(j, assets) for j in jobs], connection=connection)
        all_jobs.append(retune_job)
        all_sensors.append(make_upcoming_runs_sensor(retune_job, jobs))
        all_schedules.append(make_retune_schedule(retune_job, schedules, cron=retune_cron))
    return Definitions(
        jobs=all_jobs, assets=list(assets), sensors=all_sensors, schedules=all_schedules,
        resources={"io_manager": io_manager, **(extra_resources or {})},
    )


def _resolved(job, assets: Sequence):
    """``job``, or the job an asset job (``define_asset_job``) resolves to against ``assets``."""
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

    if isinstance(job, UnresolvedAssetJobDefinition):
        return Definitions(assets=list(assets), jobs=[job]).resolve_job_def(job.name)
    return job
