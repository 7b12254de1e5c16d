"""The retune job, and the sensor and schedule that launch it for the work that is coming.

``make_retune_job(jobs)`` builds a job of three ops:

1. ``plan_workload``: the topology analyzer turns each upcoming job (named in the run config by
   the sensor or schedule) into a workload, using its last successful run's sizes, and picks the
   heaviest (most bytes moved);
2. ``recommend_configuration``: searches the shipped surrogate (Rafiki: NSGA-II over the
   neural-network ensemble or LightGBM) for the best Cassandra configuration of that workload;
3. ``reconfigure``: reads the configuration in force back from the node (keyspace and table
   options, ``system_views.settings``: :mod:`tuner.readback`), changes only the searched knobs
   of it, and runs SOPHIA's cost-benefit analysis; applies the result (live knobs live, restart
   only for restart-only knobs) only when the projected gain over the look-ahead window beats
   the throughput lost while reconfiguring. A node that is not running is left alone.

The last configuration applied is also recorded in ``$ASGARD_HOME/run/cassandra/applied-config.yaml``.
"""
import json
from typing import Sequence

import yaml
from dagster import Config, MetadataValue, Out, Output, job, op
from pydantic import Field

from resources.paths import run_dir

from .topology import analyze_with_history


def applied_config_file():
    return run_dir("cassandra") / "applied-config.yaml"


def current_configuration():
    from tuner.knobs import Configuration

    path = applied_config_file()
    if path.exists():
        return Configuration((yaml.safe_load(path.read_text()) or {}).get("knobs", {}))
    return Configuration()


class RetuneConfig(Config):
    upcoming_jobs: list[str] = Field(default=[], description="Jobs expected to run next (the sensor fills this).")
    lookahead_seconds: float = Field(default=1800.0, description="Window over which a new configuration must pay off.")
    restart_seconds: float = Field(default=15.0, description="Measured stop-to-ready seconds of the node (see `asgard bench startup`).")
    method: str = Field(default="nsga2", description="Search: nsga2 (genetic), tpe or exhaustive.")
    evaluations: int = Field(default=1000, description="Surrogate evaluations the search may spend.")
    model_path: str = Field(default="", description="Fitted surrogate; empty uses the one shipped in tuner/data.")
    apply: bool = Field(default=True, description="False only reports the decision (dry run).")
    node_index: int = Field(default=1, description="Local Cassandra instance to reconfigure (127.0.0.N).")
    keyspace: str = Field(default="asgard", description="Keyspace of the objects table whose options are tuned.")


def make_retune_job(jobs: Sequence, name: str = "asgard_retune_cassandra"):
    """A job that retunes the local Cassandra for the upcoming runs of ``jobs``.

    Example::

        retune = make_retune_job([video_job, forest_job])
        defs = asgard_definitions(jobs=[video_job, forest_job], retune_job=retune)
    """
    by_name = {j.name: j for j in jobs}

    @op(out=Out(dict))
    def plan_workload(context, config: RetuneConfig) -> Output:
        upcoming = [j for j in config.upcoming_jobs if j in by_name] or list(by_name)
        unknown = sorted(set(config.upcoming_jobs) - set(by_name))
        if unknown:
            context.log.warning(f"not analysing unknown jobs {unknown}; known: {sorted(by_name)}")
        best = None
        for job_name in upcoming:
            topo = analyze_with_history(by_name[job_name], context.instance)
            stage = topo.dominant()
            context.log.info(f"{job_name}: {len(topo.stages)} stages, dominant {stage.kind} "
                             f"({stage.writes} writes, {stage.reads} reads of {stage.object_bytes} B)")
            if best is None or stage.bytes_moved > best[1].bytes_moved:
                best = (job_name, stage, topo)
        job_name, stage, topo = best
        workload = topo.workload()
        return Output(
            {"job": job_name, "workload": workload.as_dict(), "config": config.model_dump()},
            metadata={"job": job_name, "pattern": workload.pattern, "fanout": workload.fanout,
                      "object_kib": workload.object_kib, "read_ratio": MetadataValue.float(workload.nominal_read_ratio),
                      "stages": MetadataValue.json(topo.as_rows())},
        )

    @op(out=Out(dict))
    def recommend_configuration(plan: dict) -> Output:
        from tuner.anova import key_knobs
        from tuner.dataset import DEFAULT_MODEL
        from tuner.search import search
        from tuner.surrogates import Surrogate
        from tuner.workload import Workload

        config = RetuneConfig(**plan["config"])
        model = Surrogate.load(config.model_path or DEFAULT_MODEL)
        workload = Workload(**plan["workload"])
        from tuner.knobs import CLIENT, KNOBS

        # the ANOVA key knobs only (each was varied in calibration, so the surrogate has seen them
        # move), and only the server's: a job's client options are its IO manager's fields
        knobs = [k for k in key_knobs(model) if KNOBS[k].apply != CLIENT]
        result = search(model, workload, knobs=knobs, method=config.method, evaluations=config.evaluations)
        return Output(
            {"workload": plan["workload"], "knobs": result.config.as_dict(), "search": result.as_dict(),
             "config": plan["config"]},
            metadata={"predicted_gain_pct": MetadataValue.float(float(result.predicted_gain_pct)),
                      "search": MetadataValue.json(json.loads(json.dumps(result.as_dict(), default=str)))},
        )

    @op
    def reconfigure(context, recommendation: dict) -> dict:
        from resources.cassandra import CassandraNode
        from resources.stores.cassandra import CassandraObjectStore
        from tuner.costbenefit import decide
        from tuner.dataset import DEFAULT_MODEL
        from tuner.knobs import Configuration, apply
        from tuner.surrogates import Surrogate
        from tuner.workload import Workload

        from tuner.readback import read_configuration

        config = RetuneConfig(**recommendation["config"])
        model = Surrogate.load(config.model_path or DEFAULT_MODEL)
        node = CassandraNode(index=config.node_index)
        if not node.is_running():  # a node someone stopped stays stopped
            reason = f"Cassandra at {node.address} is not running: nothing read, nothing applied"
            context.log.warning(reason)
            context.add_output_metadata({"reconfigure": False, "reason": reason})
            return {"decision": {"reconfigure": False, "reason": reason}, "applied": None, "in_force": None}
        store = CassandraObjectStore(contact_points=[node.address], port=node.native_port, keyspace=config.keyspace)
        store.ensure_schema()
        # the configuration in force, read back from the node, not from a record of what was applied
        current, unreadable = read_configuration(store.session, config.keyspace)
        if unreadable:
            context.log.warning(f"settings not mapped onto knobs (taken at their defaults): {unreadable}")
        # only the searched knobs change; everything else stays as it is in force
        new = current.replace(**{k: recommendation["knobs"][k] for k in recommendation["search"]["knobs"]})
        decision = decide(model, Workload(**recommendation["workload"]), current, new,
                          lookahead_s=config.lookahead_seconds, restart_seconds=config.restart_seconds)
        outcome = {"decision": decision.as_dict(), "applied": None, "in_force": current.non_default(),
                   "unreadable": unreadable}
        context.log.info(f"cost-benefit: {decision.reason}")
        if decision.reconfigure and config.apply:
            applied = apply(node, store, new, previous=current)
            applied_config_file().write_text(yaml.safe_dump({"knobs": new.as_dict()}, sort_keys=True))
            outcome["applied"] = applied.as_dict()
        context.add_output_metadata({
            "reconfigure": decision.reconfigure, "reason": decision.reason,
            "benefit_ops": MetadataValue.float(float(decision.benefit_ops)),
            "cost_ops": MetadataValue.float(float(decision.cost_ops)),
            "applied": MetadataValue.json(outcome["applied"] or {}),
        })
        return outcome

    @job(name=name, description="Retune the local Cassandra for the upcoming runs (topology -> surrogate -> cost-benefit).")
    def retune():
        reconfigure(recommend_configuration(plan_workload()))

    return retune
