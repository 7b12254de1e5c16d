"""The retune decision and its application, free of any orchestrator: what the Dagster retune
job (:mod:`asgard_dagster.retune`) and the Airflow retune DAG (:mod:`asgard_airflow.retune`)
share.

* :func:`recommend`: the surrogate's best configuration for a workload (its ANOVA key knobs of
  the server, searched), or an operator's given knob values, predicted the same way;
* :func:`forecast_lookahead`: the look-ahead window T_L from upcoming runs and recent durations;
* :func:`reconfigure_ring`: find the ring, read the configuration in force back, run the
  cost-benefit analysis, and (unless a dry run) apply, probe and roll back: what the Dagster
  ``reconfigure`` op does, with the orchestrator's logging and "runs in flight" passed in;
* the helpers both use: :func:`apply_config`, :func:`probe`, :func:`realized_gain`,
  :func:`live_change_cost`, :func:`keyspace_replication`, :func:`given_configuration`, ...

Example (a dry run against the local node)::

    from asgard.tuner.retune import recommend, reconfigure_ring
    from asgard.tuner.workload import Workload
    rec = recommend(Workload.from_dag("scatter", 6, 256))
    outcome = reconfigure_ring(rec, ["127.0.0.1"], lookahead_s=1800, apply=False)
    print(outcome["decision"]["reason"])
"""
from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from asgard.resources.paths import run_dir

log = logging.getLogger(__name__)

# Assumptions, used only where nothing was measured yet:
# the slowest of the 28 restarts the tuner measured on this machine under load during calibration
# (9.3-15.9 s, median 9.7 s; tuner/data/calibration.jsonl), for a node the project never restarted
ASSUMED_RESTART_SECONDS = 15.9
# a job with no successful run yet: one window of the retune schedule (30 min)
ASSUMED_LOOKAHEAD_SECONDS = 1800.0


def applied_config_file():
    return run_dir("cassandra") / "applied-config.yaml"


def current_configuration():
    from asgard.tuner.knobs import Configuration

    path = applied_config_file()
    if path.exists():
        return Configuration((yaml.safe_load(path.read_text()) or {}).get("knobs", {}))
    return Configuration()

def dip_during(before: list, during: float) -> float:
    """The fraction of the probes' throughput (geometric mean before the change) lost while it
    was applied; 0 if the workload ran as fast or faster."""
    from asgard.tuner.measure import geomean

    return max(0.0, 1.0 - during / geomean([s.ops_per_s for s in before]))


def live_change_cost(members) -> tuple[float, float, str]:
    """(seconds, slowdown, where they come from) of a live change on this ring: the slowest
    member's recent measured values (live_changes.jsonl), else what is assumed."""
    from asgard.tuner.costbenefit import ASSUMED_LIVE_SLOWDOWN

    costs = {m.address: m.live_change_cost() for m in members}
    seconds = [s for s, _ in costs.values() if s is not None]
    slowdowns = [d for _, d in costs.values() if d is not None]
    if not seconds:
        return 0.0, ASSUMED_LIVE_SLOWDOWN, "assumed: no live change measured on this ring yet (charged 0 s)"
    if not slowdowns:
        return max(seconds), ASSUMED_LIVE_SLOWDOWN, (
            f"seconds measured (median of recent live changes, slowest member: {max(seconds):.2f} s); "
            f"slowdown assumed ({ASSUMED_LIVE_SLOWDOWN:g}): no live change was probed yet")
    return max(seconds), max(slowdowns), ("measured: medians of the recent live changes (live_changes.jsonl), "
                                          "the slowest member's")


def keyspace_replication(store, keyspace: str) -> int:
    """The keyspace's replication factor (SimpleStrategy; the sum over data centres otherwise)."""
    row = store.session.execute("SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s",
                                (keyspace,)).one()
    if row is None:
        return 1
    factors = [int(v) for k, v in dict(row.replication).items() if k != "class" and str(v).isdigit()]
    return sum(factors) or 1


def probe(node, store, workload, seconds: float, repeats: int = 2) -> list:
    """``repeats`` short runs of ``workload`` through the real store (empty if ``seconds`` is 0)."""
    from asgard.tuner.measure import measure

    return [measure(node, store, workload, seconds, seed=i) for i in range(repeats)] if seconds > 0 else []


def realized_gain(before: list, after: list) -> tuple[float, float]:
    """(gain %, noise %): the geometric-mean throughput after over before, and the noise as the
    spread of the probes under the old configuration against each other (at least 5%)."""
    from asgard.tuner.measure import geomean

    b = [s.ops_per_s for s in before if s.ops_per_s > 0]
    a = [s.ops_per_s for s in after if s.ops_per_s > 0]
    if not a or not b:
        return -100.0 if b else 0.0, 5.0
    gain = (geomean(a) / geomean(b) - 1) * 100
    noise = (max(b) / min(b) - 1) * 100 if len(b) > 1 else 0.0
    return gain, max(noise, 5.0)


def apply_config(ring, store, config, previous, **kw):
    from asgard.tuner.knobs import apply

    result = apply(ring, store, config, previous=previous, **kw)
    applied_config_file().write_text(yaml.safe_dump({"knobs": config.as_dict()}, sort_keys=True))
    return result


def local_instance(address: str):
    """The local instance at ``address`` (127.0.0.i) as launched, or None for any other address."""
    import re

    from asgard.resources.cassandra import CassandraNode

    from asgard.resources.process import ServerError

    match = re.fullmatch(r"127\.0\.0\.(\d{1,3})", address)
    try:
        return CassandraNode.launched(int(match.group(1))) if match else None
    except ServerError:  # launched by other tooling: the ring discovery says why, by member
        return None


def given_configuration(model, workload, knobs: dict):
    """A :class:`~asgard.tuner.search.SearchResult` for knob values an operator gave (``RetuneConfig.knobs``):
    validated one by one (a typed :class:`~asgard.tuner.knobs.KnobError` names a wrong one), predicted by
    the surrogate like a searched one, so the cost-benefit analysis weighs it the same way."""
    import time as _time

    from asgard.tuner.knobs import CLIENT, KNOBS, Configuration, KnobError, knob
    from asgard.tuner.search import SearchResult

    values = {name: knob(name).validate(value) for name, value in knobs.items()}
    client = sorted(n for n in values if KNOBS[n].apply == CLIENT)
    if client:
        raise KnobError(f"knobs {client} are the store's client options, not the server's: set them on the IO "
                        "manager (chunk_size_bytes, concurrency, codec), not in the retune job's knobs")
    t0 = _time.perf_counter()
    config = Configuration(values)
    default_ratio, ratio = (float(x) for x in model.predict(model.space.matrix(workload, [Configuration(), config])))
    return SearchResult(method="given", config=config, predicted_ratio=ratio, default_predicted_ratio=default_ratio,
                        seconds=_time.perf_counter() - t0, surrogate_calls=1, evaluations=0, knobs=sorted(values))


def forecast_lookahead(counts: Mapping[str, int], durations: Mapping[str, list]) -> tuple[float, dict]:
    """T_L: the seconds the upcoming runs will keep the store busy, sum over jobs (DAGs) of runs x
    the median of their recent successful durations (``durations[job]``, seconds); the
    assumption where no upcoming job has any."""
    total, rows = 0.0, {}
    for job_name, n in counts.items():
        seen = list(durations.get(job_name) or [])
        each = statistics.median(seen) if seen else None
        rows[job_name] = {"runs": n, "median_s": round(each, 2) if each else None, "history": len(seen)}
        total += n * (each if each else 0.0)
    if total <= 0:
        return ASSUMED_LOOKAHEAD_SECONDS, {"jobs": rows, "source": "assumed (no successful run of the upcoming jobs)"}
    return total, {"jobs": rows, "source": "forecast: runs x median recent duration"}


def recommend(workload, knobs: Mapping[str, Any] | None = None, method: str = "nsga2", evaluations: int = 1000,
              model_path: str | Path | None = None) -> dict:
    """The surrogate's recommendation for ``workload``: ``{"workload", "knobs", "search",
    "predicted_gain_vs_default_pct"}``. ``knobs`` given: those values (validated), not a search;
    else the ANOVA key knobs of the server (a job's client options are its store's settings)."""
    from .anova import key_knobs
    from .dataset import DEFAULT_MODEL
    from .knobs import CLIENT, KNOBS
    from .search import search
    from .surrogates import Surrogate

    model = Surrogate.load(Path(model_path) if model_path else DEFAULT_MODEL)
    if knobs:
        result = given_configuration(model, workload, dict(knobs))
    else:
        searched = [k for k in key_knobs(model) if KNOBS[k].apply != CLIENT]
        result = search(model, workload, knobs=searched, method=method, evaluations=evaluations)
    return {"workload": workload.as_dict(), "knobs": result.config.as_dict(), "search": result.as_dict(),
            "predicted_gain_vs_default_pct": float(result.predicted_gain_pct)}


def reconfigure_ring(recommendation: dict, contact_points: list[str], port: int = 9042, keyspace: str = "asgard",
                     lookahead_s: float | None = None, restart_seconds: float | None = None, apply: bool = True,
                     force: bool = False, probe_seconds: float = 2.0, quiet_wait_seconds: float = 300.0,
                     hints_wait_seconds: float = 120.0, model_path: str | Path | None = None,
                     store_factory: Callable[..., Any] | None = None, say: Callable[[str], None] = log.info,
                     runs_in_flight: Callable[[], list] = lambda: []) -> dict:
    """Decide (SOPHIA's cost-benefit analysis over the configuration read back from the ring) and,
    with ``apply``, reconfigure: the outcome dict (``decision``, ``applied``, ``in_force``, the
    restart and live-change costs and where they come from, ``ring``, ``replication_factor``).

    ``store_factory(contact_points=..., keyspace=...)`` opens the store (default: the local
    instance's own client options for a secure node, else a plain :class:`CassandraObjectStore`);
    ``say`` logs a line where the orchestrator's user reads it; ``runs_in_flight()`` lists other
    runs a restart with replication factor 1 must wait for.
    """
    from asgard.resources.cassandra.cluster import HintsPendingError, RingMemberError, local_ring
    from asgard.resources.process import port_open
    from asgard.resources.stores.cql import CassandraObjectStore

    from .costbenefit import decide, needs_restart
    from .dataset import DEFAULT_MODEL
    from .readback import read_member_configurations
    from .surrogates import Surrogate
    from .workload import Workload

    def nothing(reason: str) -> dict:
        say(reason)
        return {"decision": {"reconfigure": False, "reason": reason}, "applied": None, "in_force": None}

    if not any(port_open(h, port) for h in contact_points):  # a node someone stopped stays stopped
        return nothing(f"Cassandra at {', '.join(contact_points)} is not running (nothing answers on port {port}): "
                       "nothing read, nothing applied")
    entry = local_instance(contact_points[0])
    if store_factory is not None:
        store = store_factory(contact_points=contact_points, keyspace=keyspace)
    elif entry is not None and entry.secure:
        store = CassandraObjectStore(**entry.client_options(), keyspace=keyspace)
    else:
        store = CassandraObjectStore(contact_points=contact_points, port=port, keyspace=keyspace)
    store.ensure_schema()
    try:
        ring = local_ring(store.session)
    except RingMemberError as exc:
        return nothing(f"nothing read, nothing applied: {exc}")
    members = [n.address for n in ring.nodes]
    by_member = read_member_configurations(store.session, keyspace, members)
    current, unreadable = by_member[members[0]]
    new = current.replace(**{k: recommendation["knobs"][k] for k in recommendation["search"]["knobs"]})
    stale = [a for a in members[1:] if needs_restart(by_member[a][0], new)]
    measured = {n.address: n.restart_seconds() for n in ring.nodes}
    if restart_seconds is not None:
        restart_s, restart_source = restart_seconds, "configured"
    elif any(v is not None for v in measured.values()):
        slowest = max((a for a in measured if measured[a] is not None), key=lambda a: measured[a])
        restart_s, restart_source = measured[slowest], (
            f"median of the recent restarts of {slowest} (its restarts.jsonl), the slowest of the ring's members")
    else:
        restart_s, restart_source = ASSUMED_RESTART_SECONDS, "assumed: no member has a measured restart yet"
    live_s, live_slowdown, live_source = live_change_cost(ring.nodes)
    lookahead = float(lookahead_s or ASSUMED_LOOKAHEAD_SECONDS)
    model = Surrogate.load(Path(model_path) if model_path else DEFAULT_MODEL)
    workload = Workload(**recommendation["workload"])
    decision = decide(model, workload, current, new, lookahead_s=lookahead, restart_seconds=restart_s,
                      live_seconds=live_s, live_slowdown=live_slowdown)
    rf = keyspace_replication(store, keyspace)
    rolling = rf >= 2 and len(members) > 1
    outcome = {"decision": decision.as_dict(), "applied": None, "in_force": current.non_default(),
               "recommended": new.non_default(), "unreadable": unreadable, "restart_seconds": restart_s,
               "restart_source": restart_source, "live_change_seconds": live_s, "live_slowdown": live_slowdown,
               "live_source": live_source, "ring": members, "replication_factor": rf, "lookahead_seconds": lookahead,
               "restart_plan": "rolling" if rolling else "together after a quiet window", "dry_run": not apply}
    say(f"decision: {'reconfigure' if decision.reconfigure else 'keep'}: {decision.reason}")
    if not apply or not (decision.reconfigure or force):
        return outcome
    if force and not decision.reconfigure:
        outcome["decision"] = {**outcome["decision"], "reconfigure": True, "forced": True,
                               "reason": f"applied as forced, though {decision.reason}"}
    restart = needs_restart(current, new) or bool(stale)
    if restart and not rolling:
        t0 = time.monotonic()
        while (busy := runs_in_flight()) and time.monotonic() - t0 < quiet_wait_seconds:
            say(f"waiting for runs in flight to finish before restarting: {busy[:5]}")
            time.sleep(2.0)
        outcome["quiet_wait_seconds"] = round(time.monotonic() - t0, 1)
        if busy:
            outcome["decision"] = {**outcome["decision"], "reconfigure": False, "deferred": True, "reason": (
                f"deferred: a restart with replication factor {rf} waits for no run in flight, and runs {busy[:5]} "
                f"still were after {quiet_wait_seconds:g} s")}
            return outcome
    before = probe(ring, store, workload, probe_seconds)
    try:
        applied = apply_config(ring, store, new, current, force_restart=bool(stale), rolling=rolling,
                               hints_timeout=hints_wait_seconds)
    except HintsPendingError as exc:
        done = getattr(exc, "records", [])
        outcome["decision"] = {**outcome["decision"], "reconfigure": False, "partial": True,
                               "reason": f"stopped part-way: {exc}; the next retune restarts the others"}
        outcome["applied"] = {"restarted": bool(done), "restart_mode": "rolling", "members": done}
        return outcome
    outcome["applied"] = applied.as_dict()
    after = probe(ring, store, workload, probe_seconds)
    if before and after:
        realized, noise = realized_gain(before, after)
        outcome.update(predicted_gain_pct=float(decision.predicted_gain_pct), realized_gain_pct=realized,
                       noise_pct=noise)
        say(f"predicted {decision.predicted_gain_pct:+.1f}%, realized {realized:+.1f}% (noise {noise:.1f}%)")
        if realized < -noise:  # worse beyond what the probes can tell from noise: back to what was in force
            outcome["rolled_back"] = apply_config(ring, store, current, new, rolling=rolling,
                                                  hints_timeout=hints_wait_seconds).as_dict()
            say(f"rolled back: realized {realized:+.1f}% is worse than the noise of {noise:.1f}%")
    return outcome
