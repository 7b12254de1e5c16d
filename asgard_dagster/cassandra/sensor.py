"""A run-status sensor that purges a run's stored outputs once it has succeeded."""
from __future__ import annotations

from dagster import DagsterRunStatus, DefaultSensorStatus, RunStatusSensorContext, SkipReason, run_status_sensor

from ..io_manager import StoreIOManager
from ..sensors import how_to_start


def make_purge_on_success_sensor(io_manager: StoreIOManager, name: str = "asgard_purge_succeeded_runs", **kwargs):
    """Purge a run's outputs when it succeeds, and those of the runs it re-executed (their
    outputs were only kept for that re-execution). Failed runs keep theirs for
    're-execute from failure' until the TTL ends them.

    Example::

        io_manager = CassandraIOManager(cassandra=CassandraResource(contact_points=["cass1"]))
        defs = Definitions(jobs=[...], resources={"io_manager": io_manager},
                           sensors=[make_purge_on_success_sensor(io_manager)])
    """

    # explicit, and said in the description the UI shows: it purges nothing until someone turns it on
    kwargs.setdefault("default_status", DefaultSensorStatus.STOPPED)
    kwargs.setdefault("description", "Purges a succeeded run's stored outputs, and those of the runs it re-executed. "
                      + how_to_start("sensor", name, kwargs["default_status"]))

    @run_status_sensor(run_status=DagsterRunStatus.SUCCESS, name=name, monitor_all_code_locations=False, **kwargs)
    def purge_succeeded_run(context: RunStatusSensorContext):
        run = context.dagster_run
        # resolved at each tick, as a run resolves it: an EnvVar field (credentials, signing key)
        # must reach the driver as its value, not as the variable's name
        # (the _cm form: an IO manager with a nested resource, the connection, is initialized as a context)
        purged = []
        with io_manager.process_config_and_initialize_cm() as resolved:
            for run_id in dict.fromkeys([run.run_id, run.parent_run_id, run.root_run_id]):
                if run_id:
                    resolved.purge_run(run_id)
                    purged.append(run_id)
        context.log.info(f"purged stored outputs of runs {purged}")
        if not purged:
            return SkipReason("nothing to purge")

    return purge_succeeded_run
