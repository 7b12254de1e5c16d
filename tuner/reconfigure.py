"""The retune's last step, the same for every orchestrator: find the ring behind a store's session,
read the configuration in force back from every member, run SOPHIA's cost-benefit analysis and,
unless a dry run, apply, probe and roll back. The Dagster retune job's ``reconfigure`` op
(:mod:`asgard_dagster.retune`) and the Airflow retune DAG's ``reconfigure`` task
(:mod:`asgard_airflow.retune`) both call :func:`reconfigure`; each opens the store its own way
(its connection settings), logs where its users read, and says which runs are in flight.

* The project's own ring (every member a local instance it runs, on loopback or across hosts):
  live knobs to every member at once, table and keyspace knobs once, restart-only knobs one member
  at a time when the keyspace's replication factor is 2 or more (hints delivered, drain, restart,
  every member sees it UN), else all together once no other run is in flight, or deferred.
* Any other cluster (the user's own, or a ring across hosts whose agents take orders from the
  ring itself): :mod:`.reconfigure_unmanaged`, which creates and restarts nothing itself.

Returns ``(outcome, metadata)``: the outcome a caller returns (its XCom, its op output) and the
figures an orchestrator shows beside it (plain JSON values: Dagster turns them into metadata
values, Airflow logs and renders them).

Example (a dry run against the local node)::

    from asgard.resources.stores.cql import CassandraObjectStore
    from asgard.tuner.reconfigure import ReconfigureOptions, reconfigure
    from asgard.tuner.retune import recommend
    from asgard.tuner.surrogates import Surrogate
    from asgard.tuner.dataset import DEFAULT_MODEL
    from asgard.tuner.workload import Workload

    rec = recommend(Workload.from_dag("scatter", 6, 256))
    outcome, figures = reconfigure(CassandraObjectStore(), rec, Surrogate.load(DEFAULT_MODEL),
                                   ReconfigureOptions(apply=False, lookahead_seconds=1800))
    print(outcome["decision"]["reason"])
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from .retune import (
    ASSUMED_LOOKAHEAD_SECONDS, ASSUMED_RESTART_SECONDS, apply_config, dip_during, keyspace_replication,
    live_change_cost, probe, realized_gain,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconfigureOptions:
    """What the retune's configuration says about applying (the Dagster job's ``RetuneConfig``
    fields, the Airflow DAG's params)."""

    keyspace: str = "asgard"
    apply: bool = True
    force: bool = False
    #: seconds a restart is charged; None: the members' measured restarts
    restart_seconds: float | None = None
    #: T_L; None: the recommendation's, else the assumed window
    lookahead_seconds: float | None = None
    probe_seconds: float = 2.0
    quiet_wait_seconds: float = 300.0
    hints_wait_seconds: float = 120.0


def _no_wait(bound_s: float) -> tuple[float, list]:
    return 0.0, []


def reconfigure(store, recommendation: dict, model, options: ReconfigureOptions, *,
                jmx_endpoints_for: Callable[[list], dict] = lambda members: {},
                say: Callable[[str], None] = log.info, warn: Callable[[str], None] = log.warning,
                wait_quiet: Callable[[float], tuple[float, list]] = _no_wait) -> tuple[dict, dict]:
    """Decide and (with ``options.apply``) reconfigure the ring behind ``store``'s session.

    ``jmx_endpoints_for(members)``: each member's JMX endpoint where the caller has one (a cluster
    the project does not run); ``wait_quiet(bound_s)``: wait up to ``bound_s`` for no other run in
    flight, returning ``(seconds waited, runs still busy)``. Returns ``(outcome, metadata)``."""
    from asgard.resources.cassandra.cluster import HintsPendingError, RingMemberError, managed_ring

    from .costbenefit import decide, needs_restart
    from .readback import read_member_configurations
    from .workload import Workload

    def nothing(reason: str) -> tuple[dict, dict]:
        warn(reason)
        return {"decision": {"reconfigure": False, "reason": reason}, "applied": None, "in_force": None}, {}

    try:  # every member the cluster names, as the local instance that runs it (or not ours)
        ring, all_members, foreign = managed_ring(store.session)
    except RingMemberError as exc:
        return nothing(f"nothing read, nothing applied: {exc}")
    if ring is None:  # a cluster the project does not run: tuned from outside, created on nothing
        from .reconfigure_unmanaged import reconfigure_unmanaged

        return reconfigure_unmanaged(store, recommendation, model, options, all_members, foreign,
                                     jmx_endpoints_for(all_members), say=say, warn=warn)
    store.ensure_schema()  # the project's own ring: its tables exist before they are tuned
    keyspace = options.keyspace
    members = [n.address for n in ring.nodes]
    # the configuration in force, read back from every member, not from a record of what was applied
    by_member = read_member_configurations(store.session, keyspace, members)
    current, unreadable = by_member[members[0]]
    if unreadable:
        warn(f"settings not mapped onto knobs (taken at their defaults): {unreadable}")
    # only the searched (or given) knobs change; everything else stays as it is in force
    new = current.replace(**{k: recommendation["knobs"][k] for k in recommendation["search"]["knobs"]})
    # a member left on other restart-only values (a rolling restart stopped part-way) restarts too
    stale = [a for a in members[1:] if needs_restart(by_member[a][0], new)]
    measured = {n.address: n.restart_seconds() for n in ring.nodes}
    if options.restart_seconds is not None:
        restart_s, restart_source = options.restart_seconds, "configured"
    elif any(v is not None for v in measured.values()):
        slowest = max((a for a in measured if measured[a] is not None), key=lambda a: measured[a])
        restart_s = measured[slowest]
        restart_source = (f"median of the recent restarts of {slowest} (its restarts.jsonl), the slowest of the "
                          f"ring's members: {measured}")
    else:
        restart_s, restart_source = ASSUMED_RESTART_SECONDS, "assumed: no member has a measured restart yet"
    live_s, live_slowdown, live_source = live_change_cost(ring.nodes)
    lookahead = float(options.lookahead_seconds or recommendation.get("lookahead_seconds")
                      or ASSUMED_LOOKAHEAD_SECONDS)
    workload = Workload(**recommendation["workload"])
    decision = decide(model, workload, current, new, lookahead_s=lookahead, restart_seconds=restart_s,
                      live_seconds=live_s, live_slowdown=live_slowdown)
    rf = keyspace_replication(store, keyspace)
    rolling = rf >= 2 and len(members) > 1
    outcome = {"decision": decision.as_dict(), "applied": None, "in_force": current.non_default(),
               "recommended": new.non_default(), "unreadable": unreadable, "restart_seconds": restart_s,
               "restart_source": restart_source, "live_change_seconds": live_s, "live_slowdown": live_slowdown,
               "live_source": live_source, "ring": members, "replication_factor": rf,
               "lookahead_seconds": lookahead, "dry_run": not options.apply,
               "restart_plan": "rolling" if rolling else "together after a quiet window"}
    # three significant figures: a live change's cost is a few hundredths of a second of throughput
    metadata: dict[str, Any] = {
        "benefit": float(f"{decision.benefit_ops:.3g}"), "cost": float(f"{decision.cost_ops:.3g}"),
        "lookahead_seconds": lookahead, "restart_seconds": float(restart_s), "restart_source": restart_source,
        "live_change_seconds": round(live_s, 2), "live_slowdown": round(live_slowdown, 4), "live_source": live_source,
        "ring": members, "replication_factor": rf,
        # over the configuration in force: the baseline the probes measure the realized gain on
        "predicted_gain_pct": round(float(decision.predicted_gain_pct), 2)}
    say(f"decision: {'reconfigure' if decision.reconfigure else 'keep'}: {decision.reason}")
    if not options.apply or not (decision.reconfigure or options.force):
        return outcome, metadata
    if options.force and not decision.reconfigure:
        outcome["decision"] = {**outcome["decision"], "reconfigure": True, "forced": True,
                               "reason": f"applied as forced (force=True), though {decision.reason}"}

    restart = needs_restart(current, new) or bool(stale)
    if restart and not rolling:
        # one replica per partition: every request to it waits out the restart; do it when no run is in flight
        waited, busy = wait_quiet(options.quiet_wait_seconds)
        metadata["quiet_wait_seconds"] = outcome["quiet_wait_seconds"] = round(waited, 1)
        if busy:
            outcome["decision"] = {**outcome["decision"], "reconfigure": False, "deferred": True, "reason": (
                f"deferred: a restart with replication factor {rf} waits for no run in flight, and after "
                f"{waited:.0f} s runs {busy[:5]} still were (quiet_wait_seconds={options.quiet_wait_seconds:g})")}
            return outcome, metadata

    before = probe(ring, store, workload, options.probe_seconds)

    def apply_new():
        return apply_config(ring, store, new, current, force_restart=bool(stale), rolling=rolling,
                            hints_timeout=options.hints_wait_seconds)

    try:
        if restart or not before:
            applied, during = apply_new(), None
        else:  # a live change: the probe's workload runs on while it is applied (its dip)
            from .measure import ops_during

            applied, during = ops_during(store, workload, apply_new)
    except HintsPendingError as exc:
        done = getattr(exc, "records", [])
        outcome["decision"] = {**outcome["decision"], "reconfigure": False, "partial": True, "reason": (
            f"stopped part-way: {exc} Members restarted: {[r['member'] for r in done]}; the next retune "
            "restarts the others")}
        outcome["applied"] = {"restarted": bool(done), "restart_mode": "rolling", "members": done}
        return outcome, metadata
    if not applied.restarted and (applied.live or applied.table):
        slowdown = None if during is None else dip_during(before, during)
        for member in ring.nodes:
            member.record_live_change(applied.seconds, slowdown)
        metadata["measured_live_change"] = {
            "seconds": round(applied.seconds, 2), "ops_per_s_during": None if during is None else round(during, 1),
            "slowdown": None if slowdown is None else round(slowdown, 4)}
    after = probe(ring, store, workload, options.probe_seconds)
    outcome["applied"] = metadata["applied"] = applied.as_dict()
    if applied.restarted:
        metadata["measured_restart_seconds"] = round(applied.node_restart_seconds, 2)
        metadata["restart_order"] = [r["member"] for r in applied.members]
        metadata["member_restart_seconds"] = {r["member"]: r["restart_seconds"] for r in applied.members}
    # what each member runs now, read back from it
    outcome["in_force_by_member"] = {a: c.non_default() for a, (c, _) in
                                     read_member_configurations(store.session, keyspace, members).items()}
    predicted = float(decision.predicted_gain_pct)
    if before and after:
        realized, noise = realized_gain(before, after)
        outcome.update(predicted_gain_pct=predicted, realized_gain_pct=realized, noise_pct=noise)
        metadata.update(realized_gain_pct=round(realized, 2), noise_pct=round(noise, 2))
        say(f"predicted {predicted:+.1f}%, realized {realized:+.1f}% (noise {noise:.1f}%)")
        if realized < -noise:
            # worse beyond what the probe can tell from noise: back to what was in force
            rolled = apply_config(ring, store, current, new, rolling=rolling, hints_timeout=options.hints_wait_seconds)
            outcome["rolled_back"] = metadata["rolled_back"] = rolled.as_dict()
            warn(f"rolled back: realized {realized:+.1f}% is worse than the noise of {noise:.1f}%")
    return outcome, metadata


def store_unreachable(contact_points: list[str], port: int) -> str | None:
    """The reason to do nothing when no contact point answers (a node someone stopped stays
    stopped: the retune never starts one), else None."""
    from asgard.resources.process import port_open

    if any(port_open(h, port) for h in contact_points):
        return None
    return (f"Cassandra at {', '.join(contact_points)} is not running (nothing answers on port {port}): "
            "nothing read, nothing applied")
