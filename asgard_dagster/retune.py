"""The retune job, and the sensor and schedule that launch it for the work that is coming.

``make_retune_job(jobs)`` builds a job of three ops:

1. ``plan_workload``: the topology analyzer turns each upcoming job (named in the run config by
   the sensor or schedule) into a workload, using its last successful run's sizes, and picks the
   heaviest (most bytes moved);
2. ``recommend_configuration``: searches the shipped surrogate (Rafiki: NSGA-II over the
   neural-network ensemble or LightGBM) for the best Cassandra configuration of that workload;
3. ``reconfigure``: finds the ring through the job's connection (``system.local`` and
   ``system.peers_v2``; each member 127.0.0.i is the local instance the project runs, which must
   be running: a member that is down is never started, nothing is applied. A ring with a member
   the project does not run -- the user's own cluster -- is tuned from outside instead, creating
   and restarting nothing: :mod:`asgard.tuner.reconfigure_unmanaged`; the step itself is
   :func:`asgard.tuner.reconfigure.reconfigure`, shared with the Airflow retune DAG), reads the
   configuration in force back from every member (keyspace and table options,
   ``system_views.settings``: :mod:`asgard.tuner.readback`), changes only the searched knobs of it, and
   runs SOPHIA's cost-benefit analysis; applies the result only when the projected gain over the
   look-ahead window beats the throughput lost while reconfiguring: live knobs to every member at
   once, table and keyspace knobs once, restart-only knobs one member at a time when the
   keyspace's replication factor is 2 or more (``CassandraCluster.rolling_restart``: hints
   delivered, drain, restart, every member sees it UN), else all members together once no other
   run is in flight (``quiet_wait_seconds``), or deferred with the reason recorded.

The last configuration applied is also recorded in ``$ASGARD_HOME/run/cassandra/applied-config.yaml``.
"""
import json
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from dagster import Config, DagsterRunStatus, MetadataValue, Out, Output, RunsFilter, job, op
from pydantic import Field

# the decision and apply helpers are shared with the Airflow retune DAG (orchestrator-free, in
# asgard.tuner.retune); re-exported here, where callers have imported them from
from asgard.tuner.retune import (  # noqa: E402,F401
    ASSUMED_LOOKAHEAD_SECONDS, ASSUMED_RESTART_SECONDS, apply_config, applied_config_file, current_configuration,
    dip_during, given_configuration, keyspace_replication, live_change_cost, local_instance as _local_instance,
    probe, realized_gain,
)

from .topology import analyze_with_history


# priority of retune runs: above application runs (default 0), so the run that prepares the
# store for a queue is not itself queued behind it
RETUNE_PRIORITY = "10"


def recent_durations(instance, job_name: str, runs: int = 5) -> list[float]:
    """Wall seconds of the job's last ``runs`` successful runs."""
    out = []
    for record in instance.get_run_records(RunsFilter(job_name=job_name, statuses=[DagsterRunStatus.SUCCESS]),
                                           limit=runs):
        if record.start_time and record.end_time:
            out.append(record.end_time - record.start_time)
    return out


def forecast_lookahead(instance, counts: dict[str, int]) -> tuple[float, dict]:
    """T_L of the upcoming runs (:func:`asgard.tuner.retune.forecast_lookahead`), each job's recent
    successful durations read from this Dagster instance."""
    from asgard.tuner.retune import forecast_lookahead as forecast

    return forecast(counts, {job_name: recent_durations(instance, job_name) for job_name in counts})


def other_runs_in_flight(instance, own_run_id: str) -> list[str]:
    records = instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.STARTED]), limit=100)
    return [r.dagster_run.run_id for r in records if r.dagster_run.run_id != own_run_id]


class RetuneConfig(Config):
    upcoming_jobs: list[str] = Field(default=[], description="Jobs expected to run next (the sensor fills this).")
    upcoming_counts: dict[str, int] = Field(
        default={}, description="Runs of each upcoming job (the sensor and schedule fill this); a job missing counts once.")
    lookahead_seconds: Optional[float] = Field(
        default=None, description="Window over which a new configuration must pay off. None: forecast from the "
        "upcoming runs and each job's recent successful durations.")
    restart_seconds: Optional[float] = Field(
        default=None, description="Stop-to-ready seconds charged for a restart. None: the median of the node's recent "
        "measured restarts (its restarts.jsonl).")
    quiet_wait_seconds: float = Field(
        default=300.0, description="With replication factor 1, how long a restart waits for no other run to be in "
        "flight before it is deferred.")
    probe_seconds: float = Field(
        default=2.0, description="Seconds of each probe of the workload before and after a change (realized gain); "
        "0 skips the probes and the rollback.")
    method: str = Field(default="nsga2", description="Search: nsga2 (genetic), tpe or exhaustive.")
    evaluations: int = Field(default=1000, description="Surrogate evaluations the search may spend.")
    apply: bool = Field(default=True, description="False only reports the decision (dry run).")
    node_index: Optional[int] = Field(
        default=None, description="Reach the ring through the local instance 127.0.0.N instead of the connection's "
        "contact points (the connection's login and TLS still apply). Every member of that ring is reconfigured.")
    keyspace: str = Field(default="asgard", description="Keyspace of the objects table whose options are tuned; its "
                          "replication factor picks the restart plan (>= 2: rolling; 1: quiet window).")
    knobs: dict[str, Any] = Field(
        default={}, description="Server knob values to apply as given instead of the surrogate's search (an "
        "operator's choice: a known-good configuration, a rollback by hand); the rest of the configuration in "
        "force is kept. The cost-benefit analysis still decides, unless force.")
    force: bool = Field(
        default=False, description="Apply even when the cost-benefit analysis says the change does not pay; the "
        "analysis and its reason are still recorded.")
    hints_wait_seconds: float = Field(
        default=120.0, description="Rolling restart: how long a member may wait for the hints to the members "
        "restarted before it to be delivered before it goes down; past that the remaining members are left as "
        "they are, and why is recorded.")
    # a run may choose the model: it is JSON and LightGBM's or numpy's files, loading one runs no code (no pickle)
    model_path: Optional[str] = Field(
        default=None, description="The fitted surrogate's JSON file (`asgard tune fit --out model.json`; its "
        "weights beside it). None: the model the job was defined with (make_retune_job(model_path=...)), by "
        "default the shipped one (asgard/tuner/data/model.json). A pickled model is refused.")


# the retune job's connection to the node, bound on the job (its fields: credentials, TLS)
CONNECTION_KEY = "asgard_cassandra"


def make_retune_job(jobs: Sequence, name: str = "asgard_retune_cassandra", connection=None,
                    model_path: str | Path | None = None):
    """A job that retunes the local Cassandra ring for the upcoming runs of ``jobs``.

    ``connection`` (a :class:`~asgard_dagster.CassandraResource`) gives the contact points, login
    and TLS settings the job reaches the ring with (``asgard_definitions`` passes the IO
    manager's); every member of the ring they reach is reconfigured. Without a login, a secure
    local node is reached with its own CA and superuser.

    ``model_path`` is the fitted surrogate's JSON file (default: the shipped one,
    ``asgard.tuner.dataset.DEFAULT_MODEL``); a run's config may name another (``model_path`` of
    ``plan_workload``'s config). A model is JSON and its library's own weights file, never a
    pickle, so loading one a run names runs no code.

    Example::

        retune = make_retune_job([video_job, forest_job], connection=io_manager.connection())
        defs = asgard_definitions(jobs=[video_job, forest_job], retune_job=retune)
    """
    from .cassandra.resources import CassandraResource

    by_name = {j.name: j for j in jobs}
    model_file = Path(model_path) if model_path else None  # None: asgard.tuner.dataset.DEFAULT_MODEL

    def load_model(config: "RetuneConfig"):
        from asgard.tuner.dataset import DEFAULT_MODEL
        from asgard.tuner.surrogates import Surrogate

        return Surrogate.load(Path(config.model_path) if config.model_path else model_file or DEFAULT_MODEL)

    # optional: with no upcoming job that passes data between its steps there is nothing to plan,
    # and the rest of the run is skipped (a success), not failed
    @op(out=Out(dict, is_required=False))
    def plan_workload(context, config: RetuneConfig):
        upcoming = [j for j in config.upcoming_jobs if j in by_name] or list(by_name)
        unknown = sorted(set(config.upcoming_jobs) - set(by_name))
        if unknown:
            context.log.warning(f"not analysing unknown jobs {unknown}; known: {sorted(by_name)}")
        from asgard.tuner.topology import heaviest

        best = heaviest(((j, analyze_with_history(by_name[j], context.instance)) for j in upcoming),
                        skipped=lambda name, exc: context.log.info(f"{exc}: left out of the plan"))
        if best is None:
            context.log.warning(f"nothing to plan: none of {upcoming} passes data between its steps; the retune "
                                "stops here and changes nothing")
            return
        job_name, topo = best
        stage = topo.dominant()
        context.log.info(f"{job_name}, the heaviest of {upcoming}: {len(topo.stages)} stages, dominant {stage.kind} "
                         f"({stage.writes} writes, {stage.reads} reads of {stage.object_bytes} B)")
        workload = topo.workload()
        counts = {j: int(config.upcoming_counts.get(j, 1)) for j in upcoming}
        if config.lookahead_seconds is not None:
            lookahead, forecast = config.lookahead_seconds, {"source": "configured"}
        else:
            lookahead, forecast = forecast_lookahead(context.instance, counts)
        context.log.info(f"look-ahead T_L = {lookahead:.0f} s ({forecast['source']})")
        yield Output(
            {"job": job_name, "workload": workload.as_dict(), "config": config.model_dump(),
             "lookahead_seconds": lookahead, "forecast": forecast},
            metadata={"job": job_name, "pattern": workload.pattern, "fanout": workload.fanout,
                      "lookahead_seconds": MetadataValue.float(float(lookahead)),
                      "forecast": MetadataValue.json(forecast),
                      "object_kib": workload.object_kib, "read_ratio": MetadataValue.float(workload.nominal_read_ratio),
                      "stages": MetadataValue.json(topo.as_rows())},
        )

    @op(out=Out(dict))
    def recommend_configuration(plan: dict) -> Output:
        from asgard.tuner.anova import key_knobs
        from asgard.tuner.search import search
        from asgard.tuner.workload import Workload

        config = RetuneConfig(**plan["config"])
        model = load_model(config)
        workload = Workload(**plan["workload"])
        from asgard.tuner.knobs import CLIENT, KNOBS

        if config.knobs:
            result = given_configuration(model, workload, config.knobs)
        else:
            # the ANOVA key knobs only (each was varied in calibration, so the surrogate has seen them
            # move), and only the server's: a job's client options are its IO manager's fields
            knobs = [k for k in key_knobs(model) if KNOBS[k].apply != CLIENT]
            result = search(model, workload, knobs=knobs, method=config.method, evaluations=config.evaluations)
        return Output(
            {"workload": plan["workload"], "knobs": result.config.as_dict(), "search": result.as_dict(),
             "config": plan["config"], "lookahead_seconds": plan["lookahead_seconds"],
             "predicted_gain_vs_default_pct": float(result.predicted_gain_pct)},
            # the search's baseline is the stock default; what the node runs may differ (the
            # reconfigure step reads it back and predicts the gain over it)
            metadata={"predicted_gain_vs_default_pct": MetadataValue.float(float(result.predicted_gain_pct)),
                      "search": MetadataValue.json(json.loads(json.dumps(result.as_dict(), default=str)))},
        )

    @op
    def reconfigure(context, recommendation: dict, asgard_cassandra: CassandraResource) -> dict:
        from asgard.resources.stores.cql import CassandraObjectStore
        from asgard.tuner.reconfigure import ReconfigureOptions, reconfigure as reconfigure_ring, store_unreachable

        config = RetuneConfig(**recommendation["config"])
        connection = asgard_cassandra.connection_kwargs()
        contact = [f"127.0.0.{config.node_index}"] if config.node_index is not None else connection["contact_points"]

        def finish(outcome: dict, metadata: dict) -> dict:
            context.log.info(outcome["decision"]["reason"])
            context.add_output_metadata({"reconfigure": bool(outcome["decision"]["reconfigure"]),
                                         "reason": outcome["decision"]["reason"], **metadata})
            return outcome

        unreachable = store_unreachable(contact, connection["port"])
        if unreachable:
            context.log.warning(unreachable)
            return finish({"decision": {"reconfigure": False, "reason": unreachable}, "applied": None,
                           "in_force": None}, {})
        entry = _local_instance(contact[0])
        if connection["ssl_ca_file"] or connection["username"] or entry is None or not entry.secure:
            store = asgard_cassandra.get_store(contact_points=contact, keyspace=config.keyspace)
        else:  # no login configured for a secure local node: the job manages it, with its own CA and superuser
            store = CassandraObjectStore(**entry.client_options(), keyspace=config.keyspace)
        options = ReconfigureOptions(
            keyspace=config.keyspace, apply=config.apply, force=config.force, restart_seconds=config.restart_seconds,
            probe_seconds=config.probe_seconds, quiet_wait_seconds=config.quiet_wait_seconds,
            hints_wait_seconds=config.hints_wait_seconds)
        outcome, metadata = reconfigure_ring(
            store, recommendation, load_model(config), options,
            jmx_endpoints_for=asgard_cassandra.jmx_endpoints_for, say=context.log.info, warn=context.log.warning,
            wait_quiet=lambda bound_s: wait_quiet(context, bound_s))
        return finish(outcome, metadata)

    @job(name=name, tags={"dagster/priority": RETUNE_PRIORITY},
         resource_defs={CONNECTION_KEY: connection if connection is not None else CassandraResource()},
         description="Retune the local Cassandra for the upcoming runs (topology -> surrogate -> cost-benefit).")
    def retune():
        reconfigure(recommend_configuration(plan_workload()))

    return retune


def wait_quiet(context, bound_s: float, poll_s: float = 2.0) -> tuple[float, list[str]]:
    """Wait up to ``bound_s`` for no other run to be in flight; (seconds waited, runs still busy)."""
    t0 = time.monotonic()
    while True:
        busy = other_runs_in_flight(context.instance, context.run_id)
        waited = time.monotonic() - t0
        if not busy or waited >= bound_s:
            return waited, busy
        context.log.info(f"waiting for runs in flight to finish before restarting: {busy[:5]}")
        time.sleep(min(poll_s, max(0.1, bound_s - waited)))
