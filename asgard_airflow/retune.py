"""The retune DAG: Cassandra kept fit for the Airflow runs that are coming, the same loop as the
Dagster retune job (the decision and apply code is shared: :mod:`asgard.tuner.retune`,
:mod:`asgard.tuner.reconfigure`).

``make_retune_dag(dags)`` builds a DAG of five tasks, on a short schedule (every 10 minutes):

1. ``watch_upcoming`` reads the upcoming runs of ``dags`` (queued runs, their timetables' ticks over
   the look-ahead window; paused DAGs forecast nothing) and compares the mix (which DAGs) with the
   cursor kept in the Airflow Variable ``asgard_retune_cursor__<dag_id>``: unchanged (or nothing
   coming), the rest of the run is skipped (a short circuit), so a retune runs when the mix of
   upcoming runs changes, or when a run is triggered with ``always``;
2. ``plan_workload``: the topology analyzer (:mod:`asgard_airflow.topology`) on each upcoming DAG,
   sized by its last successful run's XCom references; the heaviest becomes the workload, and the
   look-ahead T_L is the upcoming runs times each DAG's median recent duration;
3. ``recommend_configuration``: the surrogate's search (:func:`asgard.tuner.retune.recommend`);
4. ``reconfigure``: SOPHIA's cost-benefit analysis over the configuration read back from the ring,
   and (``apply``) the change, probes and rollback (:func:`asgard.tuner.reconfigure.reconfigure`, the
   Dagster job's own step: the project's ring rolled one member at a time, or a cluster it does not
   run tuned from outside by CQL and JMX with the rest recorded as not applied);
   its outcome is the task's XCom (a dict) and its log lines;
5. ``decision_report``: the decision as Markdown in the task's *Rendered Template* tab.

Params (the trigger form): ``apply`` (False: a dry run), ``always``, ``lookahead_seconds``,
``restart_seconds``, ``probe_seconds``, ``quiet_wait_seconds``, ``method``, ``evaluations``,
``knobs`` (given values instead of the search), ``force``. The model (its JSON file): the DAG's
``model_path``, else ``[asgard] model_path``, else the shipped one; read when a task runs
(:func:`configured_model_path`).

    from asgard.pipelines.airflow_apps import make_app_dag
    from asgard_airflow.retune import make_retune_dag
    apps = [make_app_dag(a) for a in ("video_analytics", "word_count")]
    retune = make_retune_dag(apps)
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import time
from pathlib import Path
from typing import Any, Sequence

from airflow.sdk import DAG, BaseOperator, Param, Variable, task
from airflow.sdk.exceptions import AirflowSkipException

log = logging.getLogger(__name__)

#: a retune task goes before the applications' tasks when both wait for a slot
RETUNE_PRIORITY_WEIGHT = 10


def cursor_name(dag_id: str) -> str:
    return f"asgard_retune_cursor__{dag_id}"


def summary_markdown(plan: dict, outcome: dict) -> str:
    """The decision as an Airflow user reads it (the report task's rendered template)."""
    d = outcome.get("decision", {})
    verdict = "reconfigure" if d.get("reconfigure") else "keep the configuration in force"
    lines = [f"### asgard retune: {verdict}", "", f"**Reason:** {d.get('reason')}", "",
             f"* upcoming runs: `{json.dumps(plan.get('counts', {}))}`",
             f"* planned for: `{plan.get('job')}` ({plan.get('workload', {}).get('name')})",
             f"* look-ahead T_L: {plan.get('lookahead_seconds', 0):.0f} s ({plan.get('forecast', {}).get('source')})"]
    if "benefit_ops" in d:
        lines += [f"* benefit {d['benefit_ops']:.3g} vs cost {d['cost_ops']:.3g} "
                  f"(predicted gain {d.get('predicted_gain_pct', 0):+.1f}%)",
                  f"* restart charged: {outcome.get('restart_seconds')} s ({outcome.get('restart_source')})",
                  f"* in force: `{json.dumps(outcome.get('in_force'), default=str)}`",
                  f"* recommended: `{json.dumps(outcome.get('recommended'), default=str)}`"]
    lines.append(f"* dry run: {outcome.get('dry_run', True)}; applied: `{json.dumps(outcome.get('applied'), default=str)}`")
    if outcome.get("knobs"):  # a cluster the project does not run: knob by knob, and what an operator would change
        lines += ["", "| knob | to | applied | how, or why not | cassandra.yaml |", "|---|---|---|---|---|"]
        for k in outcome["knobs"]:
            yaml_change = json.dumps(k.get("cassandra_yaml")) if k.get("cassandra_yaml") else ""
            lines.append(f"| `{k['knob']}` | `{k.get('to')}` | {'yes' if k.get('applied') else 'no'} | "
                         f"{k.get('how') or k.get('why') or ''} | {yaml_change} |")
    return "\n".join(lines)


class DecisionReport(BaseOperator):
    """Renders the retune decision (Markdown) in the task's Rendered Template tab and its log."""

    template_fields = ("summary",)
    template_fields_renderers = {"summary": "md"}

    def __init__(self, *, summary: str, **kwargs):
        super().__init__(**kwargs)
        self.summary = summary

    def execute(self, context):
        self.log.info("retune decision:\n%s", self.summary)
        return None


def _tuning_store():
    """The store the XCom backend writes to, for tuning the Cassandra behind it (``[asgard]``
    settings: contact points, login, TLS); ``(store, None)``, or ``(None, why not)``."""
    from asgard.resources.stores.cql import CassandraObjectStore
    from asgard.tuner.reconfigure import store_unreachable
    from asgard.tuner.retune import local_instance

    from .xcom import configured_store, read_settings

    settings = read_settings()
    if settings.backend != "cassandra":
        return None, f"the XCom backend is {settings.backend} ([asgard] backend): no Cassandra to tune"
    options, secrets = dict(settings.store_options), dict(settings.secrets)
    contact, port = list(settings.option("contact_points")), int(settings.option("port"))
    unreachable = store_unreachable(contact, port)
    if unreachable:
        return None, unreachable
    entry = local_instance(contact[0])
    if options.get("ssl_ca_file") or secrets.get("username") or entry is None or not entry.secure:
        return configured_store(settings), None
    # no login configured for a secure local node: the DAG manages it, with its own CA and superuser
    return CassandraObjectStore(**entry.client_options(), keyspace=settings.option("keyspace")), None


def jmx_endpoints_for(members: list[str]) -> dict:
    """Each member's JMX endpoint from ``[asgard] jmx_port`` (every member's) or ``jmx_endpoints``
    (``member=host:port,...``), ``jmx_ssl``, ``jmx_truststore``; the login from the environment
    (``AIRFLOW__ASGARD__JMX_USERNAME`` / ``AIRFLOW__ASGARD__JMX_PASSWORD``): for a cluster the
    project does not run, whose live settings are then applied over JMX."""
    import os

    from airflow.sdk.configuration import conf

    from asgard.tuner.unmanaged import JmxEndpoint

    port = conf.get("asgard", "jmx_port", fallback=None)
    given = {member.strip(): where.strip() for member, _, where in
             (pair.partition("=") for pair in (conf.get("asgard", "jmx_endpoints", fallback="") or "").split(","))
             if where}
    ssl = (conf.get("asgard", "jmx_ssl", fallback="false") or "false").lower() in ("1", "true", "yes")
    out = {}
    for member in members:
        where = given.get(member) or (f"{member}:{port}" if port else None)
        if where:
            host, _, p = where.strip().rpartition(":")
            out[member] = JmxEndpoint(host=host, port=int(p), username=os.environ.get("AIRFLOW__ASGARD__JMX_USERNAME"),
                                      password=os.environ.get("AIRFLOW__ASGARD__JMX_PASSWORD"), ssl=ssl,
                                      truststore=conf.get("asgard", "jmx_truststore", fallback=None))
    return out


def configured_model_path(model_path: str | Path | None = None) -> Path:
    """The surrogate's JSON file the retune tasks load: ``model_path`` (given where the DAG is
    defined), else ``[asgard] model_path``, else the shipped model. Read when called."""
    from airflow.sdk.configuration import conf

    from asgard.tuner.dataset import DEFAULT_MODEL

    # configuration may choose the model: it is JSON and LightGBM's or numpy's files, loading one runs no code
    configured = model_path or conf.get("asgard", "model_path", fallback=None)
    return Path(configured).expanduser() if configured else DEFAULT_MODEL


def make_retune_dag(dags: Sequence[DAG], dag_id: str = "asgard_retune_cassandra", schedule: Any = "*/10 * * * *",
                    window_minutes: int = 30, model_path: str | Path | None = None,
                    start_date: dt.datetime | None = None) -> DAG:
    """A DAG that retunes the Cassandra holding the XComs for the upcoming runs of ``dags``.

    ``model_path``: the fitted surrogate's JSON file; None: ``[asgard] model_path``, read when a
    task runs, else the shipped model (:func:`configured_model_path`)."""
    import pendulum

    by_id = {d.dag_id: d for d in dags}
    model = str(model_path) if model_path else None
    window = dt.timedelta(minutes=window_minutes)
    params = {
        "apply": Param(True, type="boolean", description="False only reports the decision (a dry run)."),
        "always": Param(False, type="boolean", description="Plan even if the upcoming mix did not change."),
        "lookahead_seconds": Param(None, type=["null", "number"], description="T_L; None: forecast."),
        "restart_seconds": Param(None, type=["null", "number"], description="None: the node's measured restarts."),
        "probe_seconds": Param(2.0, type="number", description="Probe seconds before/after a change (0: none)."),
        "quiet_wait_seconds": Param(300.0, type="number", description="RF 1: wait for no run in flight."),
        "method": Param("nsga2", enum=["nsga2", "tpe", "exhaustive"]),
        "evaluations": Param(1000, type="integer", minimum=10),
        "knobs": Param({}, type="object", description="Server knob values to weigh instead of the search."),
        "force": Param(False, type="boolean", description="Apply even if the change does not pay."),
    }
    with DAG(dag_id, schedule=schedule, start_date=start_date or pendulum.datetime(2026, 1, 1, tz="UTC"),
             catchup=False, max_active_runs=1, params=params, tags=["asgard"],
             default_args={"priority_weight": RETUNE_PRIORITY_WEIGHT},
             doc_md="Retunes Cassandra for the upcoming runs of " + ", ".join(f"`{d}`" for d in by_id)
             + ". The decision: `reconfigure`'s XCom and log, `decision_report`'s Rendered Template.") as retune:

        @task.short_circuit(multiple_outputs=False)
        def watch_upcoming(params=None) -> dict:
            from .upcoming import TaskReader, upcoming_runs

            mix = upcoming_runs(list(by_id.values()), TaskReader(), window=window)
            name = cursor_name(dag_id)
            previous = Variable.get(name, default=None)
            log.info("upcoming runs over %s: %s (cursor: %s)", window, mix.as_dict(), previous)
            always = bool(params.get("always"))
            if not mix.counts and not always:
                log.info("no upcoming runs of %s: nothing to plan for", sorted(by_id))
                return {}
            if mix.signature == previous and not always:
                log.info("upcoming mix %s unchanged since the last retune: skipped", mix.signature)
                return {}
            Variable.set(name, mix.signature)
            return {"counts": mix.counts or {d: 1 for d in by_id}, "mix": mix.as_dict()}

        @task(multiple_outputs=False)  # '-> dict' would push each key too
        def plan_workload(upcoming: dict, params=None) -> dict:
            from asgard.tuner.retune import forecast_lookahead

            from .topology import analyze_with_history
            from .upcoming import TaskReader

            from asgard.tuner.topology import NoDataFlowError, heaviest

            reader, durations, analyses, topologies = TaskReader(), {}, {}, {}
            for dag_id_ in upcoming["counts"]:
                history = reader.history(by_id[dag_id_])
                durations[dag_id_] = history["durations"]
                topologies[dag_id_] = topo = analyze_with_history(by_id[dag_id_], history)
                try:
                    stage = topo.dominant()
                except NoDataFlowError as exc:
                    log.info("%s: left out of the plan", exc)
                    continue
                analyses[dag_id_] = {"sized_by_run": history["run_id"], "dominant": stage.kind,
                                     "stages": topo.as_rows()}
                log.info("%s: %d stages, dominant %s (%d writes, %d reads of %d B), sized from run %s", dag_id_,
                         len(topo.stages), stage.kind, stage.writes, stage.reads, stage.object_bytes,
                         history["run_id"])
            best = heaviest(topologies.items())
            if best is None:  # the rest of the run is skipped: nothing to plan, nothing changed
                raise AirflowSkipException(f"nothing to plan: none of {sorted(upcoming['counts'])} passes data "
                                           "between its tasks")
            job, topo = best
            if params.get("lookahead_seconds") is not None:
                lookahead, forecast = float(params["lookahead_seconds"]), {"source": "configured"}
            else:
                lookahead, forecast = forecast_lookahead(upcoming["counts"], durations)
            log.info("look-ahead T_L = %.0f s (%s)", lookahead, forecast["source"])
            return {"job": job, "workload": topo.workload().as_dict(), "stages": topo.as_rows(), "dags": analyses,
                    "counts": upcoming["counts"], "lookahead_seconds": lookahead, "forecast": forecast}

        @task(multiple_outputs=False)  # '-> dict' would push each key too
        def recommend_configuration(plan: dict, params=None) -> dict:
            from asgard.tuner.retune import recommend
            from asgard.tuner.workload import Workload

            rec = recommend(Workload(**plan["workload"]), knobs=params.get("knobs") or None,
                            method=params["method"], evaluations=int(params["evaluations"]),
                            model_path=configured_model_path(model))
            log.info("recommended %s (predicted %+.1f%% over the default)", rec["knobs"],
                     rec["predicted_gain_vs_default_pct"])
            return json.loads(json.dumps(rec, default=str))

        @task(multiple_outputs=False)  # '-> dict' would push each key too
        def reconfigure(plan: dict, recommendation: dict, params=None) -> dict:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            from asgard.tuner.reconfigure import ReconfigureOptions, reconfigure as reconfigure_ring
            from asgard.tuner.surrogates import Surrogate

            def wait_quiet(bound_s: float) -> tuple[float, list]:
                t0 = time.monotonic()
                while True:
                    busy = [d for d in by_id if RuntimeTaskInstance.get_dr_count(dag_id=d, states=["running"])]
                    if not busy or time.monotonic() - t0 >= bound_s:
                        return time.monotonic() - t0, busy
                    log.info("waiting for runs in flight to finish before restarting: %s", busy[:5])
                    time.sleep(2.0)

            store, why_not = _tuning_store()
            if store is None:
                log.warning("%s", why_not)
                outcome = {"decision": {"reconfigure": False, "reason": why_not}, "applied": None, "in_force": None}
            else:
                options = ReconfigureOptions(
                    keyspace=store.keyspace, apply=bool(params["apply"]), force=bool(params["force"]),
                    restart_seconds=params.get("restart_seconds"), lookahead_seconds=plan["lookahead_seconds"],
                    probe_seconds=float(params["probe_seconds"]), quiet_wait_seconds=float(params["quiet_wait_seconds"]))
                outcome, figures = reconfigure_ring(
                    store, recommendation, Surrogate.load(configured_model_path(model)), options,
                    jmx_endpoints_for=jmx_endpoints_for, say=lambda line: log.info("%s", line),
                    wait_quiet=wait_quiet, warn=lambda line: log.warning("%s", line))
                outcome.setdefault("dry_run", not options.apply)
                outcome["figures"] = figures
                log.info("%s", outcome["decision"]["reason"])
            outcome = json.loads(json.dumps(outcome, default=str))
            outcome["summary_md"] = summary_markdown(plan, outcome)
            return outcome

        upcoming = watch_upcoming()
        plan = plan_workload(upcoming)
        outcome = reconfigure(plan, recommend_configuration(plan))
        report = DecisionReport(task_id="decision_report",
                                summary="{{ ti.xcom_pull(task_ids='reconfigure')['summary_md'] }}")
        outcome >> report
    return retune
