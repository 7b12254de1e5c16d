"""Reconfiguring a ring across hosts through the ring itself: orders in a table, one member at a time
under a lightweight-transaction lease. Cassandra stays the only server.

Why this and not Kubernetes: the project runs its own instances on the hosts (NUMA-pinned, one
per NUMA node), with no orchestrator between; each host already runs the project's runtime. A
table in the ring reaches every host the ring reaches, over the same TLS and login, and Paxos
(``IF NOT EXISTS``) gives a lease that at most one member holds at a time, which survives any one
host failing at replication factor 3. A cass-operator user gets the same decision as a
``spec.config`` change instead (:mod:`asgard.tuner.unmanaged`).

* The retune job (wherever Dagster's daemon runs) writes an order: the ``cassandra.yaml``
  overrides for every member and whether they need a restart (:meth:`RingControl.submit`), then
  waits until every member has carried it out (:meth:`RingControl.wait`).
* Each host runs a :class:`HostAgent` for its members (``asgard cassandra agent``): it heartbeats
  its members into ``agents``, and for an open order takes the ring's lease, checks that no member
  holds hints for any member but the one going down (``system_views.pending_hints``, asked of
  each member), drains and restarts its member with the overrides and its CQL port closed until
  every other member's gossip sees the new generation ready (``system_views.gossip_info``), records
  it done, and gives the lease back. A host that dies holding the lease loses it to the TTL.

Example::

    control = RingControl(session)
    order = control.submit({"memtable_flush_writers": 4}, restart=True)
    records = control.wait(order, members=["10.0.0.5", "10.0.0.6"], timeout=900)
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any, Callable

from ..process import ServerError

CONTROL_KEYSPACE = "asgard_control"
#: a lease not given back (its holder's host died) lapses after this many seconds; longer than a
#: member's drain + restart + convergence under load here (the slowest seen: 62 s)
LEASE_TTL_SECONDS = 600
#: an agent whose heartbeat is older than this is taken as not running
AGENT_STALE_SECONDS = 30.0


class OrderError(ServerError):
    """An order could not be carried out (timed out, or a member refused)."""


def ensure_control_schema(session, datacenter: str, replication_factor: int) -> None:
    session.execute(f"CREATE KEYSPACE IF NOT EXISTS {CONTROL_KEYSPACE} WITH replication = "
                    f"{{'class': 'NetworkTopologyStrategy', '{datacenter}': {replication_factor}}}", timeout=60)
    for cql in (
        "CREATE TABLE IF NOT EXISTS {ks}.orders (ring text, id timeuuid, overrides text, restart boolean, "
        "PRIMARY KEY (ring, id)) WITH CLUSTERING ORDER BY (id DESC)",
        "CREATE TABLE IF NOT EXISTS {ks}.done (ring text, id timeuuid, member text, record text, "
        "PRIMARY KEY ((ring, id), member))",
        "CREATE TABLE IF NOT EXISTS {ks}.agents (ring text, member text, host text, heartbeat timestamp, "
        "PRIMARY KEY (ring, member))",
        "CREATE TABLE IF NOT EXISTS {ks}.lease (ring text PRIMARY KEY, holder text, order_id timeuuid)",
    ):
        session.execute(cql.format(ks=CONTROL_KEYSPACE), timeout=60)


def _statement(session, cql: str, serial: bool = False):
    from cassandra import ConsistencyLevel
    from cassandra.query import SimpleStatement

    return SimpleStatement(cql.format(ks=CONTROL_KEYSPACE), consistency_level=ConsistencyLevel.LOCAL_QUORUM,
                           serial_consistency_level=ConsistencyLevel.LOCAL_SERIAL if serial else None)


class RingControl:
    """The coordinator's side: submit an order, wait for every member to carry it out."""

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

    def submit(self, overrides: dict[str, Any], restart: bool = True) -> uuid.UUID:
        from cassandra.util import uuid_from_time

        order = uuid_from_time(time.time())
        self.session.execute(_statement(self.session, "INSERT INTO {ks}.orders (ring, id, overrides, restart) "
                                                      "VALUES (%s, %s, %s, %s)"),
                             (self.ring, order, json.dumps(overrides, sort_keys=True), restart))
        return order

    def done(self, order: uuid.UUID) -> dict[str, dict]:
        rows = self.session.execute(_statement(self.session, "SELECT member, record FROM {ks}.done WHERE ring = %s "
                                                             "AND id = %s"), (self.ring, order))
        return {r.member: json.loads(r.record) for r in rows}

    def wait(self, order: uuid.UUID, members: list[str], timeout: float = 900.0) -> list[dict]:
        """The members' records in the order they finished, once every one of ``members`` has;
        :class:`OrderError` after ``timeout`` naming those still to do."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                done = self.done(order)
            except Exception:  # a member restarting under the read: asked again
                done = {}
            if all(m in done for m in members):
                return sorted((dict(done[m], member=m) for m in members), key=lambda r: r.get("finished_at", 0))
            if time.monotonic() > deadline:
                raise OrderError(f"order {order}: {sorted(set(members) - set(done))} not done after {timeout:.0f}s "
                                 f"(done: {sorted(done)}); check those hosts' agents (`asgard cassandra agent`)")
            time.sleep(1.0)


class HostAgent:
    """One host's runtime for the ring's orders: ``members`` are the :class:`CassandraNode` s it runs."""

    def __init__(self, host: str, members: list, connect: Callable[[], Any], ring: str = "asgard",
                 converge_timeout: float = 180.0, hints_timeout: float = 120.0):
        self.host, self.members, self.ring = host, list(members), ring
        self._connect, self._session = connect, None
        self.converge_timeout, self.hints_timeout = converge_timeout, hints_timeout
        self.records: list[dict] = []

    @property
    def session(self):
        if self._session is None:
            self._session = self._connect()
        return self._session

    def heartbeat(self) -> None:
        for member in self.members:
            self.session.execute(_statement(self.session, "INSERT INTO {ks}.agents (ring, member, host, heartbeat) "
                                                          "VALUES (%s, %s, %s, toTimestamp(now()))"),
                                 (self.ring, member.address, self.host))

    def _open_orders(self) -> list[tuple[uuid.UUID, dict, bool]]:
        rows = self.session.execute(_statement(self.session, "SELECT id, overrides, restart FROM {ks}.orders "
                                                             "WHERE ring = %s LIMIT 10"), (self.ring,))
        return [(r.id, json.loads(r.overrides), r.restart) for r in reversed(list(rows))]

    def poll_once(self) -> list[dict]:
        """Carry out, for this host's members, every open order they have not carried out yet."""
        records = []
        for order, overrides, restart in self._open_orders():
            done = RingControl(self.session, self.ring).done(order)
            for member in self.members:
                if member.address in done:
                    continue
                if not self._take_lease(order, member.address):
                    return records  # another member is at it: the next poll
                try:
                    record = self._carry_out(member, overrides, restart)
                    record["finished_at"] = time.time()
                    self.session.execute(_statement(self.session, "INSERT INTO {ks}.done (ring, id, member, record) "
                                                                  "VALUES (%s, %s, %s, %s)"),
                                         (self.ring, order, member.address, json.dumps(record)))
                    records.append(record)
                finally:
                    self._give_back_lease(member.address)
        self.records.extend(records)
        return records

    def _take_lease(self, order: uuid.UUID, holder: str) -> bool:
        row = self.session.execute(
            _statement(self.session, "INSERT INTO {ks}.lease (ring, holder, order_id) VALUES (%s, %s, %s) "
                                     f"IF NOT EXISTS USING TTL {LEASE_TTL_SECONDS}", serial=True),
            (self.ring, holder, order)).one()
        return bool(row[0]) or getattr(row, "holder", None) == holder

    def _give_back_lease(self, holder: str) -> None:
        self.session.execute(_statement(self.session, "DELETE FROM {ks}.lease WHERE ring = %s IF holder = %s",
                                        serial=True), (self.ring, holder))

    def _others(self, member) -> list:
        return [h for h in self.session.cluster.metadata.all_hosts() if h.address != member.address]

    def _wait_no_hints_but_to(self, member) -> tuple[float, int]:
        """Until no other member holds hints for any member but ``member`` (each asked itself)."""
        t0 = time.monotonic()
        first = None
        while True:
            pending = []
            for host in self._others(member):
                rows = self.session.execute("SELECT address, files FROM system_views.pending_hints", host=host)
                pending += [(host.address, str(r.address), r.files) for r in rows
                            if str(r.address) != member.address and r.files]
            first = len(pending) if first is None else first
            if not pending:
                return time.monotonic() - t0, first
            if time.monotonic() - t0 > self.hints_timeout:
                raise OrderError(f"hints still pending after {self.hints_timeout:.0f}s ({pending}): taking "
                                 f"{member.address} down now would leave partitions without a complete replica")
            time.sleep(0.5)

    def _seen_back_by_every_member(self, member) -> None:
        """Until every other member's gossip has ``member`` at its new generation, NORMAL, rpc ready."""
        deadline = time.monotonic() + self.converge_timeout
        while True:
            try:
                views = []
                for host in self._others(member):
                    rows = self.session.execute("SELECT address, generation, status, status_with_port "
                                                "FROM system_views.gossip_info", host=host, timeout=10)
                    views.append(next((r for r in rows if str(r.address) == member.address), None))
                # a peer's state is in STATUS_WITH_PORT (STATUS is left empty for peers in 5.0)
                if views and all(r is not None and (r.generation or 0) >= self._generation_floor
                                 and str(r.status_with_port or r.status or "").startswith("NORMAL") for r in views):
                    return
            except Exception:  # a member not answering yet: asked again
                pass
            if time.monotonic() > deadline:
                raise OrderError(f"{member.address} was not seen back by every member within {self.converge_timeout:.0f}s")
            time.sleep(0.5)

    _generation_floor = 0

    def _carry_out(self, member, overrides: dict, restart: bool) -> dict:
        from .cluster import _drain

        record: dict[str, Any] = {"host": self.host, "restart": restart}
        if not restart:
            member.set_overrides(overrides)
            return record
        waited, files = self._wait_no_hints_but_to(member)
        record.update(hints_wait_seconds=round(waited, 2), hint_files=files)
        member.set_overrides(overrides)
        record["drain_seconds"] = round(_drain(member), 2)
        # gossip generations are the start's epoch seconds: the member's next one is at least now
        self._generation_floor = int(time.time())

        def converge() -> None:
            t0 = time.monotonic()
            self._seen_back_by_every_member(member)
            record["converge_seconds"] = round(time.monotonic() - t0, 2)

        record["restart_seconds"] = round(member.restart(before_clients=converge), 3)
        return record

    def run(self, stop: threading.Event, interval: float = 1.0) -> None:
        """Heartbeat and carry out orders until ``stop`` is set (errors are retried at the next poll)."""
        while not stop.is_set():
            try:
                self.heartbeat()
                self.poll_once()
            except Exception as exc:  # a member of the ring restarting under a read: the next poll
                self.last_error = exc
            stop.wait(interval)
