"""The retune decision and its application, free of any orchestrator: what the Dagster retune
job (:mod:`asgard_dagster.retune`) and the Airflow retune DAG (:mod:`asgard_airflow.retune`)
share.

* :func:`recommend`: the surrogate's best configuration for a workload (its ANOVA key knobs of
  the server, searched), or an operator's given knob values, predicted the same way;
* :func:`forecast_lookahead`: the look-ahead window T_L from upcoming runs and recent durations;
* the last step, find the ring, read the configuration in force back, decide, apply, probe and
  roll back, is :func:`asgard.tuner.reconfigure.reconfigure`;
* the helpers both use: :func:`apply_config`, :func:`probe`, :func:`realized_gain`,
  :func:`live_change_cost`, :func:`keyspace_replication`, :func:`given_configuration`, ...

Example::

    from asgard.tuner.retune import recommend
    from asgard.tuner.workload import Workload
    rec = recommend(Workload.from_dag("scatter", 6, 256))
    print(rec["knobs"], rec["predicted_gain_vs_default_pct"])
"""
from __future__ import annotations

import logging
import statistics
from pathlib import Path
from typing import Any, Mapping

import yaml

from asgard.resources.paths import run_dir

log = logging.getLogger(__name__)

# Assumptions, used only where nothing was measured yet:
# the slowest of the 28 restarts the tuner measured on this machine under load during calibration
# (9.3-15.9 s, median 9.7 s; tuner/data/calibration.jsonl), for a node the project never restarted
ASSUMED_RESTART_SECONDS = 15.9
# a job with no successful run yet: one window of the retune schedule (30 min)
ASSUMED_LOOKAHEAD_SECONDS = 1800.0


def applied_config_file(address: str | None = None) -> Path:
    """The knobs the retune last applied to the ring whose first member is ``address`` (None: the local
    node, 127.0.0.1): a file per ring, so tuning a profile's node or a user's cluster from this home
    never rewrites what another ring has in force."""
    if address in (None, "127.0.0.1"):
        return run_dir("cassandra") / "applied-config.yaml"
    return run_dir("cassandra") / f"applied-config-{address}.yaml"


def ring_address(ring) -> str:
    """The first member's address of ``ring`` (a CassandraCluster's, or a single node's)."""
    members = getattr(ring, "nodes", None)
    return (members[0] if isinstance(members, list) and members else ring).address


def current_configuration(address: str | None = None):
    from asgard.tuner.knobs import Configuration

    path = applied_config_file(address)
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
    from asgard.tuner.knob_apply import apply

    result = apply(ring, store, config, previous=previous, **kw)
    applied_config_file(ring_address(ring)).write_text(yaml.safe_dump({"knobs": config.as_dict()}, sort_keys=True))
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
