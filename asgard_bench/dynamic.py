"""``asgard bench dynamic``: the paper's dynamic experiment (Asgard, Front. HPC'23, §4.4, Fig. 8).

A sequence of bursts -- ``burst`` runs of one application, then of the next, repeated
``rounds`` times -- runs on the local Cassandra (127.0.0.1, keyspace ``asgard``) three ways:

* ``default``      -- stock Cassandra throughout (:class:`asgard.tuner.knobs.Configuration` defaults);
* ``static_tuned`` -- the configuration the tuner recommends for one application
  (``static_app``), kept for the whole sequence;
* ``asgard``       -- before each burst, its runs are submitted (not started) and the project's upcoming-runs
  sensor is ticked; when the mix changed it asks for the retune job, which is executed: the
  topology analyzer reads the job's DAG and last run, the surrogate is searched, and SOPHIA's
  cost-benefit analysis decides whether to reconfigure (live knobs live, a restart only for
  restart-only knobs). The time a reconfiguration takes counts in Asgard's E2E and cost.

The three variants are interleaved burst by burst (their order rotated), so the machine's
drift hits them alike: before a variant's burst the node is put on that variant's configuration
(outside the timings; it is the bench's interleaving, not the variant's work). Server-side knobs
only: the reconfiguration job changes the server, and the client knobs reach a job through its
IO manager's fields.

Per variant: E2E (the runs' RUN_START..RUN_SUCCESS plus reconfiguration time), cost (priced
as ``bench apps``: function GB-s plus the Cassandra instance for the E2E time) and Perf/$
= 1 / (E2E x cost), with failed runs and every reconfiguration and its measured time.
"""
from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

VARIANTS = ("default", "static_tuned", "asgard")
DEFAULT_APPS = ("video_analytics", "lightgbm_forest", "word_count")


@dataclass
class DynamicConfig:
    apps: list[str] = field(default_factory=lambda: list(DEFAULT_APPS))
    burst: int = 2  # runs per burst (the paper: 5)
    rounds: int = 1  # the sequence of bursts, repeated
    static_app: str = "video_analytics"
    small: bool = False
    prices: str | None = None
    out: str | None = None
    max_concurrent: int = 2
    model_path: str | None = None

    def sequence(self) -> list[str]:
        if self.burst < 1 or self.rounds < 1:
            raise ValueError("burst and rounds must be at least 1")
        if self.static_app not in self.apps:
            raise ValueError(f"static_app {self.static_app!r} is not one of the apps {self.apps}")
        return [app for _ in range(self.rounds) for app in self.apps]


class NodeState:
    """The local node's keyspace and table options as found, to put back at the end."""

    def __init__(self, session, keyspace: str, table: str):
        self.keyspace, self.table = keyspace, table
        ks = session.execute("SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = %s",
                             (keyspace,)).one()
        t = session.execute(
            "SELECT compaction, compression, memtable, gc_grace_seconds, caching, memtable_flush_period_in_ms "
            "FROM system_schema.tables WHERE keyspace_name = %s AND table_name = %s", (keyspace, table)).one()
        self.durable_writes = ks.durable_writes
        self.table_options = {
            "compaction": dict(t.compaction), "compression": dict(t.compression), "memtable": t.memtable or "default",
            "gc_grace_seconds": t.gc_grace_seconds, "caching": dict(t.caching),
            "memtable_flush_period_in_ms": t.memtable_flush_period_in_ms,
        }

    def restore(self, session) -> None:
        from asgard.tuner.knobs import cql_literal

        session.execute(f"ALTER KEYSPACE {self.keyspace} WITH durable_writes = {cql_literal(self.durable_writes)}")
        session.execute(f"ALTER TABLE {self.keyspace}.{self.table} WITH " + " AND ".join(
            f"{k} = {cql_literal(v)}" for k, v in self.table_options.items()))


def _variant_order(i: int) -> list[str]:
    return [VARIANTS[(i + j) % len(VARIANTS)] for j in range(len(VARIANTS))]


class AsgardLoop:
    """The sensor and the retune job, as Dagster runs them, for one Dagster instance."""

    def __init__(self, instance, jobs: dict[str, Any], restart_seconds: float, lookahead_s: dict[str, float],
                 model_path: str | None, connection=None, node_index: int | None = 1):
        """``connection``: the retune job's :class:`~asgard_dagster.CassandraResource` (default: the
        local node's); ``node_index``: reach the ring through 127.0.0.N (None: the connection's)."""
        from asgard_dagster.retune import make_retune_job
        from asgard_dagster.sensors import make_upcoming_runs_sensor

        self.instance, self.jobs, self.node_index = instance, jobs, node_index
        self.retune = make_retune_job(list(jobs.values()), connection=connection, model_path=model_path)
        self.sensor = make_upcoming_runs_sensor(self.retune, list(jobs.values()))
        self.cursor: str | None = None
        self.restart_seconds, self.lookahead_s = restart_seconds, lookahead_s

    def before_burst(self, app: str, runs: int, mix: list[str] | None = None) -> dict[str, Any]:
        """Queue the burst's runs (``runs`` of ``app``, or one of each app in ``mix``), tick the
        sensor, run the retune job if it asks; the record."""
        import dagster as dg

        # NOT_STARTED, which the sensor watches beside QUEUED: a QUEUED run needs the origin of
        # a code location, which an in-process bench has not
        queued = [self.instance.create_run_for_job(self.jobs[a], status=dg.DagsterRunStatus.NOT_STARTED).run_id
                  for a in (mix or [app] * runs)]
        try:
            context = dg.build_sensor_context(instance=self.instance, cursor=self.cursor)
            request = self.sensor(context)
            self.cursor = context.cursor
        finally:
            for run_id in queued:  # placeholders: the bench executes the burst itself
                self.instance.delete_run(run_id)
        record: dict[str, Any] = {"app": app, "sensor": "skip", "reconfigured": False, "seconds": 0.0}
        if not isinstance(request, dg.RunRequest):
            record["reason"] = getattr(request, "skip_message", str(request))
            return record
        run_config = request.run_config
        plan_cfg = run_config["ops"]["plan_workload"]["config"]
        plan_cfg.update(lookahead_seconds=self.lookahead_s[app], restart_seconds=self.restart_seconds,
                        node_index=self.node_index, keyspace="asgard")
        t0 = time.perf_counter()
        result = self.retune.execute_in_process(run_config=run_config, instance=self.instance, tags=request.tags)
        outcome = result.output_for_node("reconfigure")
        applied = outcome["applied"] or {}
        run_seconds = time.perf_counter() - t0
        reconfigured = bool(applied) and bool(outcome["decision"].get("reconfigure", True))
        # a node the job does not run is changed by CQL, untimed: the whole retune run counts (its search too)
        seconds = float(applied.get("seconds", run_seconds if reconfigured else 0.0))
        in_force = next(iter((outcome.get("in_force_by_member") or {}).values()), None)
        record.update(sensor="retune", retune_run_seconds=round(run_seconds, 2),
                      reason=outcome["decision"]["reason"], reconfigured=reconfigured, in_force=in_force,
                      seconds=seconds, restarted=bool(applied.get("restarted")),
                      node_restart_seconds=applied.get("node_restart_seconds"),
                      config=result.output_for_node("recommend_configuration")["search"]["config"])
        return record


def run_dynamic(cfg: DynamicConfig, on_event: Callable[[str], None] | None = None) -> dict[str, Any]:
    import dagster as dg

    from asgard_dagster.retune import applied_config_file, current_configuration
    from asgard.pipelines.jobs import make_job
    from asgard.resources.cassandra import CassandraNode
    from asgard.resources.stores.cql import CassandraObjectStore
    from asgard.tuner.dataset import DEFAULT_MODEL, Dataset
    from asgard.tuner.anova import key_knobs
    from asgard.tuner.knobs import CLIENT, KNOBS, Configuration
    from asgard.tuner.measure import Interleaver
    from asgard.tuner.surrogates import Surrogate
    from asgard.tuner.validate import recommend

    from .apps import app_sizes, run_one
    from .cost import Prices, instance_cost, perf_per_dollar

    say = on_event or (lambda _: None)
    sequence = cfg.sequence()
    prices = Prices.load(cfg.prices)
    hourly = prices.instances[prices.storage_kind("cassandra")[1]]
    node = CassandraNode()
    node.start()
    store = CassandraObjectStore(**node.client_options(), keyspace="asgard")  # a secure node: its CA and superuser
    store.ensure_schema()
    found = NodeState(store.session, "asgard", "objects")
    initial_overrides = node.overrides()
    state_file = applied_config_file()
    saved_state = state_file.read_text() if state_file.exists() else None
    # measured on this machine (the calibration's restarts), not assumed
    restart_seconds = Dataset.load().median_restart_seconds()
    model = Surrogate.load(cfg.model_path or DEFAULT_MODEL)
    sizes = {app: app_sizes(app, small=cfg.small) for app in cfg.apps}
    rows: list[dict] = []
    reconfigurations: list[dict] = []
    # applies a variant's configuration, changing only what differs from the one applied last
    # (no warm-up passes: the bench's runs are its own load)
    nodes = Interleaver(node, store, settle_s=0)
    t_start = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="asgard-bench-dynamic-") as tmp:
            with dg.DagsterInstance.local_temp(tempdir=tmp) as instance:
                jobs = {app: make_job(app, "cassandra", cfg.max_concurrent) for app in cfg.apps}
                # one untimed run of each app: the executor's forkserver, and the history the
                # topology analyzer reads its sizes from
                e2e_seen: dict[str, float] = {}
                for app in cfg.apps:
                    say(f"warm-up: {app}")
                    row, _, _ = run_one(instance, -1, "warmup", app, "cassandra", sizes[app], prices, cfg.max_concurrent)
                    e2e_seen[app] = row["e2e_s"]
                from asgard_dagster.topology import analyze_with_history

                server_knobs = [k for k in key_knobs(model) if KNOBS[k].apply != CLIENT]
                static_workload = analyze_with_history(jobs[cfg.static_app], instance).workload()
                static_config, _ = recommend(model, static_workload, server_knobs)
                # a burst's length is the look-ahead the reconfiguration must pay off within
                lookahead = {app: cfg.burst * e2e_seen[app] for app in cfg.apps}
                state_file.unlink(missing_ok=True)  # Asgard starts on the default
                loop = AsgardLoop(instance, jobs, restart_seconds, lookahead, cfg.model_path)

                for b, app in enumerate(sequence):
                    for variant in _variant_order(b):
                        if variant == "default":
                            nodes.switch(Configuration())
                        elif variant == "static_tuned":
                            nodes.switch(static_config)
                        else:
                            nodes.switch(current_configuration())
                            record = loop.before_burst(app, cfg.burst)
                            nodes.current = current_configuration()  # what the retune job left
                            record.update(burst=b)
                            reconfigurations.append(record)
                            say(f"asgard before burst {b} ({app}): {record.get('reason', record['sensor'])}")
                        for i in range(cfg.burst):
                            row, _, _ = run_one(instance, b, variant, app, "cassandra", sizes[app], prices,
                                                cfg.max_concurrent)
                            row.update(burst=b, run_in_burst=i)
                            rows.append(row)
                            outcome = f"{row['e2e_s']:.1f}s" if row["success"] else f"FAILED {row['error']}"
                            say(f"  {variant:<13} {app:<16} burst {b} run {i + 1}: {outcome}")
    finally:
        say("restoring the node")
        try:
            if node.overrides() != initial_overrides:
                from asgard.tuner.knob_apply import wait_store_ready

                node.restart_with(initial_overrides, replace=True)
                wait_store_ready(store)
            found.restore(store.session)
        finally:
            if saved_state is not None:
                state_file.write_text(saved_state)
            else:
                state_file.unlink(missing_ok=True)
    summary_rows: dict[str, dict] = {}
    for variant in VARIANTS:
        mine = [r for r in rows if r["phase"] == variant]
        reconf = [r for r in reconfigurations if r["reconfigured"]] if variant == "asgard" else []
        reconf_s = sum(r["seconds"] for r in reconf)
        e2e = sum(r["e2e_s"] for r in mine if r["success"]) + reconf_s
        cost = sum(r["cost_usd"] for r in mine if r["success"]) + instance_cost(hourly, reconf_s)
        summary_rows[variant] = {
            "perf_per_dollar": perf_per_dollar(e2e, cost), "e2e_s": round(e2e, 2), "cost_usd": cost,
            "failed_runs": sum(1 for r in mine if not r["success"]), "runs": len(mine),
            "reconfigurations": reconf if variant == "asgard" else [],
            "reconfiguration_seconds": round(reconf_s, 2),
            "server_cpu_s": round(sum(r["server_cpu_s"] for r in mine), 2),
            "config": (static_config.non_default() if variant == "static_tuned" else {}),
        }
    base = summary_rows["default"]["perf_per_dollar"]
    for v in summary_rows.values():
        v["perf_per_dollar_vs_default"] = v["perf_per_dollar"] / base if base else None
    out = Path(cfg.out) if cfg.out else Path("reports/bench-dynamic") / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "variants": summary_rows, "sequence": sequence, "burst": cfg.burst, "rounds": cfg.rounds,
        "static_app": cfg.static_app, "sizes": sizes, "restart_seconds_assumed_from": "tuner dataset median",
        "restart_seconds": restart_seconds, "decisions": reconfigurations, "runs": rows,
        "seconds": round(time.time() - t_start, 1), "out": str(out),
    }
    (out / "dynamic.json").write_text(json.dumps(result, indent=2, default=str))
    result["plot"] = str(plot(result, out / "dynamic.png"))
    (out / "dynamic.txt").write_text(table(result) + "\n")
    return result


def plot(result: dict[str, Any], path: Path) -> Path:
    """Per-burst E2E of each variant (the paper's Fig. 8 shape) and whole-sequence Perf/$."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 1]})
    bursts = range(len(result["sequence"]))
    for variant in VARIANTS:
        e2e = [sum(r["e2e_s"] for r in result["runs"] if r["phase"] == variant and r["burst"] == b) for b in bursts]
        ax1.plot(list(bursts), e2e, marker="o", label=variant)
    for rec in result["decisions"]:
        if rec["reconfigured"]:
            ax1.axvline(rec["burst"] - 0.5, color="grey", linestyle=":", linewidth=1)
    ax1.set_xticks(list(bursts), [s.split("_")[0] for s in result["sequence"]], rotation=30)
    ax1.set_ylabel("burst E2E (s)")
    ax1.set_title("per burst (dotted: Asgard reconfigured)")
    ax1.legend()
    v = result["variants"]
    ax2.bar(list(VARIANTS), [v[k]["perf_per_dollar_vs_default"] or 0 for k in VARIANTS], color=["C0", "C1", "C2"])
    ax2.axhline(1.0, color="black", linewidth=0.8)
    ax2.set_ylabel("Perf/$ over default")
    ax2.set_title("whole sequence")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_noise_pct(result: dict[str, Any]) -> float | None:
    """Run-to-run noise of one run's E2E: the default's runs of the same burst, standard
    deviation over mean, averaged over the bursts (the floor beside a variant's gain)."""
    import statistics

    cvs = []
    for b in range(len(result["sequence"])):
        e2e = [r["e2e_s"] for r in result["runs"] if r["phase"] == "default" and r["burst"] == b and r["success"]]
        if len(e2e) > 1:
            cvs.append(statistics.stdev(e2e) / statistics.mean(e2e))
    return round(100 * statistics.mean(cvs), 2) if cvs else None


def table(result: dict[str, Any]) -> str:
    noise = run_noise_pct(result)
    lines = [f"sequence: {' -> '.join(result['sequence'])} (x{result['burst']} runs each); "
             f"restart cost {result['restart_seconds']:.1f}s (measured: the tuner dataset's median restart)",
             f"{'variant':<14}{'Perf/$ (1/s$)':>14}{'vs default':>12}{'E2E s':>9}{'failed':>8}{'reconfigs':>11}  config"]
    for name in VARIANTS:
        v = result["variants"][name]
        cfg = ",".join(f"{k}={x}" for k, x in v["config"].items())
        if name == "asgard":
            cfg = "per burst, below"
        lines.append(f"{name:<14}{v['perf_per_dollar']:>14.4g}{(v['perf_per_dollar_vs_default'] or 0):>11.3f}x"
                     f"{v['e2e_s']:>9.1f}{v['failed_runs']:>8}{len(v['reconfigurations']):>11}  {cfg}")
    if noise is not None:
        lines.append(f"noise: one run's E2E varies {noise:.1f}% (default, same burst); a whole-sequence ratio "
                     f"within about that of 1.0 is no difference")
    for rec in result["decisions"]:
        lines.append(f"  before burst {rec['burst']} ({rec['app']}): {rec['sensor']}; "
                     f"{'reconfigured in %.2fs' % rec['seconds'] if rec['reconfigured'] else 'kept'}"
                     f" -- {rec.get('reason', '')}")
    return "\n".join(lines)
