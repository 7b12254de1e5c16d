"""The retune's ``reconfigure`` step (:mod:`.reconfigure`) on a cluster the project does not run.

Reached when a member of the ring is not a local instance of this project (the user's own
cluster, on their hosts, or a Cassandra started without ``asgard cassandra up``). Nothing is
created there and nothing is restarted: the configuration in force is read from every member
over CQL; the decision is made on what can be changed from outside (keyspace and table options by
CQL, live settings over JMX where the caller gives JMX endpoints: Dagster's
:class:`~asgard_dagster.CassandraResource`, Airflow's ``[asgard] jmx_*`` settings); the rest of the recommendation -- restart-only settings, live ones without JMX -- is
recorded knob by knob as not applied, with why and the ``cassandra.yaml`` change an operator (or
their cass-operator ``spec.config``) would make. The run succeeds in every case.
"""
from __future__ import annotations

from typing import Any, Callable


def reconfigure_unmanaged(store, recommendation: dict, model, options, members: list[str], foreign: list[str],
                          jmx: dict, say: Callable[[str], None], warn: Callable[[str], None]) -> tuple[dict, dict]:
    """``(outcome, metadata)`` as :func:`.reconfigure.reconfigure` returns them."""
    from asgard.resources.cassandra.orders import RingControl
    from asgard.tuner.costbenefit import ASSUMED_LIVE_SLOWDOWN, decide, needs_restart
    from asgard.tuner.knobs import KEYSPACE, KNOBS, LIVE, RESTART, TABLE
    from asgard.tuner.readback import read_member_configurations
    from asgard.tuner.unmanaged import apply_unmanaged, knob_report, lacking
    from asgard.tuner.workload import Workload

    from asgard.tuner.retune import ASSUMED_LOOKAHEAD_SECONDS, ASSUMED_RESTART_SECONDS

    keyspace = options.keyspace

    session = store.session
    up = {h.address for h in session.cluster.metadata.all_hosts() if h.is_up}
    # each member's release: a value its release lacks (UCS, the trie memtable on 4.1) is said, not sent
    releases = {h.address: h.release_version for h in session.cluster.metadata.all_hosts() if h.address in members}
    readable = [m for m in members if m in up]
    by_member = read_member_configurations(session, keyspace, readable, table=store.table)
    current, unreadable = by_member[readable[0]]
    if unreadable:
        warn(f"settings not mapped onto knobs (taken at their defaults): {unreadable}")
    new = current.replace(**{k: recommendation["knobs"][k] for k in recommendation["search"]["knobs"]})
    with_jmx = bool(members) and all(m in jmx for m in members)
    # the project's ring across hosts: each host's agent takes restart orders from the ring itself
    control = RingControl(session)
    agents = control.agents()
    by_agents = bool(members) and all(m in agents for m in members)
    kinds = {TABLE, KEYSPACE} | ({LIVE, RESTART} if by_agents else ({LIVE} if with_jmx else set()))
    # the decision weighs what can be applied from here: nothing restarts on a cluster we do not run
    lacks = {k: why for k in current.diff(new) if (why := lacking(k, new[k], releases, new))}
    for why in sorted(set(lacks.values())):
        warn(why)
    reachable = current.replace(**{k: new[k] for k in current.diff(new) if KNOBS[k].apply in kinds and k not in lacks})
    lookahead = float(options.lookahead_seconds or recommendation.get("lookahead_seconds")
                      or ASSUMED_LOOKAHEAD_SECONDS)
    restart = needs_restart(current, reachable)
    decision = decide(model, Workload(**recommendation["workload"]), current, reachable, lookahead_s=lookahead,
                      restart_seconds=ASSUMED_RESTART_SECONDS if restart else 0.0, live_seconds=0.0,
                      live_slowdown=ASSUMED_LIVE_SLOWDOWN)
    act = options.apply and (decision.reconfigure or options.force)
    outcomes = apply_unmanaged(session, keyspace, store.table, current, new, members,
                               {} if by_agents else jmx, apply=act, releases=releases)
    restarts = None
    if by_agents:
        orderly = [o for o in outcomes if o.kind in (LIVE, RESTART)]
        if act and orderly:
            # one member at a time, across hosts: the hosts' agents under the ring's lease
            live = live_order_settings(reachable, [o.name for o in orderly if o.kind == LIVE])
            order = control.submit(reachable.yaml_overrides(), restart=restart, live=live)
            restarts = control.wait(order, members, timeout=max(900.0, 300.0 * len(members)))
            record_order_outcomes(orderly, restarts, f"order {order} in {control.ring!r}", restart)
        elif orderly:
            for o in orderly:
                o.why = f"not applied: a dry run (apply: false); the hosts' agents of {sorted(set(agents.values()))} would"
    report = knob_report(outcomes)
    refused = {o.name: o.why for o in outcomes if o.why.startswith("the cluster refused")}
    for why in sorted(set(refused.values())):
        warn(why)
    reason = decision.reason
    if options.force and not decision.reconfigure and act:
        reason = f"applied as forced (force=True), though {decision.reason}"
    elif not options.apply:
        reason = f"a dry run (apply: false): {decision.reason}"
    if by_agents:
        reason = (f"{reason}. A ring across hosts ({sorted(set(agents.values()))}): keyspace and table options by "
                  "CQL, the rest by an order the hosts' agents carry out one member at a time; "
                  f"{report['summary']}")
    else:
        reason = (f"{reason}. The project does not run {foreign} (a cluster it did not start): it applies keyspace "
                  f"and table options by CQL{' and live settings over JMX' if with_jmx else ''}, and restarts "
                  f"nothing; {report['summary']}")
    if lacks or refused:
        reason += "; " + "; ".join(f"{k}: {why}" for k, why in sorted({**lacks, **refused}.items()))
    outcome = {"decision": {**decision.as_dict(), "reconfigure": bool(act and report["applied_knobs"]),
                            "reason": reason, "managed": False},
               "applied": {"knobs": report["applied_knobs"]} if act else None,
               "in_force": current.non_default(), "unreadable": unreadable, "ring": members,
               "not_run_by_this_project": [] if by_agents else foreign, "knobs": report["knobs"],
               "agents": agents, "restarts": restarts, "releases": releases,
               "not_in_release": lacks, "refused_by_cluster": refused}
    if act:
        outcome["in_force_by_member"] = {a: c.non_default() for a, (c, _) in read_member_configurations(
            session, keyspace, readable, table=store.table).items()}
    metadata: dict[str, Any] = {
        "benefit": float(f"{decision.benefit_ops:.3g}"), "cost": float(f"{decision.cost_ops:.3g}"),
        "lookahead_seconds": lookahead, "ring": members, "managed": False, "by_agents": by_agents,
        "knobs": report["knobs"], "applied_knobs": report["applied_knobs"],
        "not_applied_knobs": report["not_applied_knobs"],
        "predicted_gain_pct": round(float(decision.predicted_gain_pct), 2),
        "releases": releases,
    }
    if lacks:
        metadata["not_in_release"] = lacks  # knob -> what the members' release lacks
    if refused:
        metadata["refused_by_cluster"] = refused
    if restarts:
        metadata["restart_order"] = [r["member"] for r in restarts]
        metadata["member_restart_seconds"] = {r["member"]: r.get("restart_seconds") for r in restarts}
    restart_yaml = {k: v for o in outcomes if o.yaml for k, v in o.yaml.items()}
    if restart_yaml:
        metadata["cassandra_yaml_for_an_operator"] = restart_yaml
    return outcome, metadata


def setting_text(knob: str, value: Any) -> str:
    """``value`` of ``knob`` as its member's ``system_views.settings`` shows it (``16MiB/s``, ``64``)."""
    from asgard.tuner.knobs import KNOBS

    unit = KNOBS[knob].unit
    return f"{value}{unit}" if unit in ("MiB", "MiB/s", "ms") else str(value)


def live_order_settings(config, names: list[str]) -> dict[str, dict]:
    """An order's live settings (:class:`~asgard.resources.cassandra.orders.Order`): for each live
    knob of ``names``, the nodetool command that sets it on a member and the setting to read back."""
    from asgard.tuner.knobs import KNOBS

    commands = config.live_commands()
    return {name: {"command": commands[name], "setting": KNOBS[name].yaml_key,
                   "value": setting_text(name, config[name])}
            for name in names if name in commands and KNOBS[name].yaml_key}


def record_order_outcomes(orderly: list, records: list[dict], order: str, restart: bool) -> None:
    """Each knob an order carried, from the members' done records: a live knob applied only where
    every member read back its value (else not applied, with each member's why); a restart-only
    knob applied by the members' restarts."""
    from asgard.tuner.knobs import LIVE

    how = f"{order}: " + ("a rolling restart by the hosts' agents" if restart else "set live by the hosts' agents")
    for o in orderly:
        o.yaml = None
        if o.kind != LIVE:
            o.applied, o.why, o.how = True, "", how
            continue
        entries = {r["member"]: (r.get("live") or {}).get(o.name) for r in records}
        missing = sorted(m for m, e in entries.items() if e is None)
        wrong = {m: e.get("why") or "not applied" for m, e in entries.items() if e is not None and not e.get("applied")}
        o.applied = not missing and not wrong
        if o.applied:
            read = sorted({e["read_back"] for e in entries.values()})
            o.why, o.how = "", f"{how}; read back {', '.join(read)} on {sorted(entries)}"
        else:
            o.how = how
            o.why = "not applied: " + "; ".join(
                [f"{m}: {why}" for m, why in sorted(wrong.items())]
                + ([f"no read-back from {missing} (an agent of an older version?)"] if missing else []))
