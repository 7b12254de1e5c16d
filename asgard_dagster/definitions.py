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
) -> Definitions:
    """Definitions whose ``io_manager`` keeps outputs in Cassandra (the local node by default).

    Example::

        from asgard_dagster.definitions import asgard_definitions
        defs = asgard_definitions(jobs=[my_job])      # workspace.yaml: python_module: my_project.defs
    """
    io_manager = io_manager or CassandraIOManager()
    all_sensors = list(sensors)
    if purge_on_success:
        all_sensors.append(make_purge_on_success_sensor(io_manager))
    return Definitions(
        jobs=list(jobs), assets=list(assets), sensors=all_sensors, schedules=list(schedules),
        resources={"io_manager": io_manager, **(extra_resources or {})},
    )
