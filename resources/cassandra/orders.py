"""Reconfiguring a ring across hosts through the ring itself: orders in a table, one member at a time
under a lightweight-transaction lease. Cassandra stays the only server.

Why this and not Kubernetes: the project runs its own instances on the hosts (NUMA-pinned, one
per NUMA node), with no orchestrator between; each host already runs the project's runtime. A
table in the ring reaches every host the ring reaches, over the same TLS and login, and Paxos
(``IF NOT EXISTS``) gives a lease that at most one member holds at a time, which survives any one
host failing at replication factor 3. A cass-operator user gets the same decision as a
``spec.config`` change instead (:mod:`asgard.tuner.unmanaged`).

* The retune job (wherever Dagster's daemon runs) writes an order: the ``cassandra.yaml``
  overrides for every member (the whole desired configuration), whether they need a restart, and
  the live settings to send over JMX and read back (:meth:`RingControl.submit`), then waits until
  every member has carried it out (:meth:`RingControl.wait`).
* Only the newest order is open: a newer order supersedes every older one, and it closes once
  every member has a done record for it. A member that joins later starts on the newest order's
  overrides (:func:`desired_overrides`, :meth:`HostAgent.start_members`) and records it done
  without a restart; it replays no older order.
* Each host runs a :class:`~.host_agent.HostAgent` for its members (``asgard cassandra agent``): it heartbeats
  its members into ``agents``, and for the open order takes the ring's lease. A live-only order is
  sent to its member over JMX and read back from the member's ``system_views.settings``; the done
  record says applied only where the read-back matches. A restart order first waits until the
  member may go down (:meth:`HostAgent.check_safe_to_drain`): every other member up and NORMAL in
  every member's gossip, and no member holding hints for any member but it
  (``system_views.pending_hints`` of each member, trusted only once the latest start has settled:
  :mod:`.hints`, the rule the loopback ring's rolling restart uses); else
  :class:`UnsafeToDrainError`, the member untouched. Then it drains and restarts its member with
  the overrides and its CQL port closed until every other member's gossip sees the new generation
  ready (``system_views.gossip_info``), records it done, and gives the lease back. A host that
  dies holding the lease loses it once its
  heartbeat has stopped and its member is back up (a member still down keeps it).

Example::

    control = RingControl(session)
    order = control.submit({"memtable_flush_writers": 4}, restart=True)
    records = control.wait(order, members=["10.0.0.5", "10.0.0.6"], timeout=900)
"""
from __future__ import annotations

import dataclasses
import json
import time
import uuid
from typing import Any

from ..process import ServerError

CONTROL_KEYSPACE = "asgard_control"
#: an agent whose heartbeat is older than this is taken as not running (it heartbeats every few
#: seconds, during an order too)
AGENT_STALE_SECONDS = 30.0


class OrderError(ServerError):
    """An order could not be carried out (timed out, or a member refused)."""


class UnsafeToDrainError(OrderError):
    """A member was not taken down: another member was down or not NORMAL in some member's gossip,
    or a member held hints for a member other than it. ``member``: the one kept up; ``reasons``:
    what was wrong, one line each."""

    def __init__(self, member: str, reasons: list[str], waited: float):
        self.member, self.reasons, self.waited = member, list(reasons), waited
        super().__init__(
            f"{member} was not taken down: after {waited:.0f}s, {'; '.join(reasons)}. A member goes down only while "
            "every other member is up and NORMAL in every member's gossip and no member holds hints for any "
            "member but it, so every partition keeps a complete replica. Start or repair the member named "
            "(`nodetool status`, `asgard cassandra status`); the agent tries again at its next poll.")


class OrderSupersededError(OrderError):
    """A newer order was submitted before every member had carried this one out: it is closed, and
    the members go straight to the newer one's configuration."""

    def __init__(self, order: uuid.UUID, newer: uuid.UUID, done: list[str]):
        self.order, self.newer, self.done_by = order, newer, list(done)
        super().__init__(f"order {order} was superseded by order {newer} (carried out by {sorted(done)} before "
                         f"that): wait for {newer} instead")


@dataclasses.dataclass(frozen=True)
class Order:
    """One order: ``overrides`` is the whole desired ``cassandra.yaml`` change (every knob's key,
    ``None`` for back to Cassandra's default), so the newest order alone says what every member
    runs; ``live``: ``{knob: {"command": nodetool args, "setting": system_views.settings name,
    "value": the setting's text once applied}}``, sent over each member's JMX when ``restart`` is
    false and read back from the member in either case."""

    id: uuid.UUID
    overrides: dict
    restart: bool
    live: dict

    @property
    def submitted_at(self) -> float:
        from cassandra.util import unix_time_from_uuid1

        return unix_time_from_uuid1(self.id)


def ensure_control_schema(session, datacenter: str, replication_factor: int) -> None:
    from ..stores.cql.statements import table_id

    session.execute(f"CREATE KEYSPACE IF NOT EXISTS {CONTROL_KEYSPACE} WITH replication = "
                    f"{{'class': 'NetworkTopologyStrategy', '{datacenter}': {replication_factor}}}", timeout=60)
    # agents on several hosts create these at once: one id per table, as the store's (table_id)
    for table, cql in (
        ("orders", "CREATE TABLE IF NOT EXISTS {ks}.orders (ring text, id timeuuid, overrides text, restart boolean, "
                   "live text, PRIMARY KEY (ring, id)) WITH CLUSTERING ORDER BY (id DESC) AND ID = {id}"),
        ("done", "CREATE TABLE IF NOT EXISTS {ks}.done (ring text, id timeuuid, member text, record text, "
                 "PRIMARY KEY ((ring, id), member)) WITH ID = {id}"),
        ("agents", "CREATE TABLE IF NOT EXISTS {ks}.agents (ring text, member text, host text, heartbeat timestamp, "
                   "PRIMARY KEY (ring, member)) WITH ID = {id}"),
        ("lease", "CREATE TABLE IF NOT EXISTS {ks}.lease (ring text PRIMARY KEY, holder text, order_id timeuuid) "
                  "WITH ID = {id}"),
    ):
        session.execute(cql.format(ks=CONTROL_KEYSPACE, id=table_id(CONTROL_KEYSPACE, table)), timeout=60)
    # a control keyspace made before orders carried live settings
    if session.execute("SELECT column_name FROM system_schema.columns WHERE keyspace_name = %s AND "
                       "table_name = 'orders' AND column_name = 'live'", (CONTROL_KEYSPACE,)).one() is None:
        session.execute(f"ALTER TABLE {CONTROL_KEYSPACE}.orders ADD live text", timeout=60)


def _statement(session, cql: str, serial: bool = False):
    from cassandra import ConsistencyLevel
    from cassandra.query import SimpleStatement

    return SimpleStatement(cql.format(ks=CONTROL_KEYSPACE), consistency_level=ConsistencyLevel.LOCAL_QUORUM,
                           serial_consistency_level=ConsistencyLevel.LOCAL_SERIAL if serial else None)


def _order(row) -> Order:
    return Order(row.id, json.loads(row.overrides), bool(row.restart), json.loads(row.live or "{}"))


class RingControl:
    """The coordinator's side: submit an order, wait for every member to carry it out.

    Only the newest order is ever open: an older one is superseded by it (its configuration is
    part of the newer one's), and the newest closes once every member of the ring has a done
    record for it (:meth:`state`)."""

    def __init__(self, session, ring: str = "asgard"):
        self.session, self.ring = session, ring

    def exists(self) -> bool:
        return self.session.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s AND "
                                    "table_name = 'agents'", (CONTROL_KEYSPACE,)).one() is not None

    def agents(self, max_age: float = AGENT_STALE_SECONDS) -> dict[str, str]:
        """``{member: host}`` of the members whose host's agent heartbeat is recent."""
        if not self.exists():
            return {}
        rows = self.session.execute(_statement(self.session, "SELECT member, host, heartbeat FROM {ks}.agents "
                                                             "WHERE ring = %s"), (self.ring,))
        now = time.time()
        return {r.member: r.host for r in rows
                if r.heartbeat is not None and now - r.heartbeat.timestamp() <= max_age}

    def submit(self, overrides: dict[str, Any], restart: bool = True, live: dict[str, dict] | None = None) -> uuid.UUID:
        """A new order (every older one is superseded by it): ``overrides`` for every member's
        next start, a restart of each if ``restart``, and the ``live`` settings (:class:`Order`)."""
        from cassandra.util import uuid_from_time

        order = uuid_from_time(time.time())
        self.session.execute(_statement(self.session, "INSERT INTO {ks}.orders (ring, id, overrides, restart, live) "
                                                      "VALUES (%s, %s, %s, %s, %s)"),
                             (self.ring, order, json.dumps(overrides, sort_keys=True), restart,
                              json.dumps(live or {}, sort_keys=True)))
        return order

    def latest(self) -> Order | None:
        """The newest order (the ring's desired configuration), or None if none was ever given."""
        if not self.exists():
            return None
        row = self.session.execute(_statement(self.session, "SELECT id, overrides, restart, live FROM {ks}.orders "
                                                            "WHERE ring = %s LIMIT 1"), (self.ring,)).one()
        return _order(row) if row is not None else None

    def newer_than(self, order: uuid.UUID) -> uuid.UUID | None:
        """The newest order submitted after ``order``, if any."""
        row = self.session.execute(_statement(self.session, "SELECT id FROM {ks}.orders WHERE ring = %s AND id > %s "
                                                            "LIMIT 1"), (self.ring, order)).one()
        return row.id if row is not None else None

    def members(self) -> list[str]:
        """Every member of the ring, as the driver knows them (up or down)."""
        return sorted(h.address for h in self.session.cluster.metadata.all_hosts())

    def state(self, order: uuid.UUID) -> str:
        """``"superseded by <id>"``, ``"closed"`` (every member of the ring carried it out) or ``"open"``."""
        newer = self.newer_than(order)
        if newer is not None:
            return f"superseded by {newer}"
        done = self.done(order)
        return "closed" if all(m in done for m in self.members()) else "open"

    def done(self, order: uuid.UUID) -> dict[str, dict]:
        rows = self.session.execute(_statement(self.session, "SELECT member, record FROM {ks}.done WHERE ring = %s "
                                                             "AND id = %s"), (self.ring, order))
        return {r.member: json.loads(r.record) for r in rows}

    def wait(self, order: uuid.UUID, members: list[str], timeout: float = 900.0) -> list[dict]:
        """The members' records in the order they finished, once every one of ``members`` has;
        :class:`OrderSupersededError` once a newer order is given first; :class:`OrderError` after
        ``timeout`` naming those still to do."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                done = self.done(order)
                newer = None if all(m in done for m in members) else self.newer_than(order)
            except Exception:  # a member restarting under the read: asked again
                done, newer = {}, None
            if all(m in done for m in members):
                return sorted((dict(done[m], member=m) for m in members), key=lambda r: r.get("finished_at", 0))
            if newer is not None:
                raise OrderSupersededError(order, newer, list(done))
            if time.monotonic() > deadline:
                raise OrderError(f"order {order}: {sorted(set(members) - set(done))} not done after {timeout:.0f}s "
                                 f"(done: {sorted(done)}); check those hosts' agents (`asgard cassandra agent`)")
            time.sleep(1.0)


def desired_overrides(session, ring: str = "asgard") -> dict[str, Any]:
    """The overrides a member that joins the ring starts with: the newest order's (none if no
    order was ever given), so it never replays an older order's restart."""
    latest = RingControl(session, ring).latest()
    return dict(latest.overrides) if latest is not None else {}
