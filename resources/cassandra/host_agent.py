"""A host's agent of the ring's orders (:mod:`.orders`: the coordinator's side): :class:`HostAgent`
carries them out for the members this host runs, one member at a time under the ring's lease and
only when it is safe to take one down; :class:`HostAgentProcess` runs it as the process it is on a
host (``asgard cassandra host agent``), finding its members by their launch records under the
host's ``ASGARD_HOME``.

On an emulated host (:class:`~asgard.resources.network.hosts.EmulatedHost`) it runs in the host's
network namespace with the host's root as its ``ASGARD_HOME``: it sees only that host's members and
``ring-ca``, as on a machine of its own. It is ready once it has heartbeaten its members into the
ring (its log says so); SIGTERM stops it after the order in hand.

Example::

    agent = HostAgentProcess("asgard-h1", host.root, netns="asgard-h1")
    agent.start()      # seconds until its first heartbeat
    agent.kill()       # kill -9: a host's agent dying (its lease lapses once its member is back up)
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from ..process import ManagedServer
from .orders import (AGENT_STALE_SECONDS, Order, OrderError, RingControl, UnsafeToDrainError, _statement,
                     desired_overrides)

#: how often an agent carrying out an order heartbeats meanwhile
HEARTBEAT_SECONDS = 5.0

#: the line the agent's CLI prints once its members' first heartbeat is in the ring
READY_LINE = "heartbeating"


class HostAgentProcess(ManagedServer):
    """The agent of host ``host`` (its name in the ring's ``agents`` and done records), on the host
    whose ``ASGARD_HOME`` is ``root``, in network namespace ``netns``."""

    start_timeout = 120.0

    def __init__(self, host: str, root: Path, netns: str | None = None, interval: float = 1.0):
        super().__init__(f"agent-{host}", Path(root) / "run" / "agent", netns=netns)
        self.host, self.root, self.interval = host, Path(root), interval

    @property
    def endpoint(self) -> str:
        return f"host {self.host}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "asgard.cli", "cassandra", "host", "agent", "--name", self.host,
                "--interval", str(self.interval)]

    def environment(self) -> dict[str, str]:
        # the host's root, not this machine's: it finds its members and ring CA there only
        return {**os.environ, "ASGARD_HOME": str(self.root), "PYTHONUNBUFFERED": "1"}

    def is_ready(self) -> bool:
        if not self.is_running():
            return False
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return False
        # this start's lines only (the log is appended to across starts)
        return READY_LINE in text.rsplit("\n=== start ", 1)[-1]

    def status(self) -> dict:
        info = super().status()
        info.update(host=self.host, root=str(self.root), netns=self.netns)
        return info


def _same_setting(read: Any, wanted: Any) -> bool:
    """A ``system_views.settings`` text against the wanted one (``64MiB/s`` and ``64 MiB/s`` alike)."""
    def norm(v: Any) -> str:
        return str(v).replace(" ", "").lower()

    return read is not None and wanted is not None and norm(read) == norm(wanted)


def _seconds(text: str | None, default: float = 10.0) -> float:
    """A duration setting's text (``1000ms``, ``10s``) in seconds."""
    import re

    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m)?\s*", str(text or ""))
    if not match:
        return default
    return int(match.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0}[match.group(2) or "ms"]


class HostAgent:
    """One host's runtime for the ring's orders: ``members`` are the :class:`CassandraNode` s it
    runs (across hosts, or on loopback: it needs only their addresses, JMX and restart).

    ``safety_timeout``: how long a member waits to be safe to take down (:meth:`check_safe_to_drain`)
    before :class:`UnsafeToDrainError`."""

    def __init__(self, host: str, members: list, connect: Callable[[], Any], ring: str = "asgard",
                 converge_timeout: float = 180.0, safety_timeout: float = 120.0):
        self.host, self.members, self.ring = host, list(members), ring
        self._connect, self._session = connect, None
        self.converge_timeout, self.safety_timeout = converge_timeout, safety_timeout
        self.records: list[dict] = []
        self.last_error: Exception | None = None
        #: holders whose lapsed lease this agent took over
        self.leases_taken_over: list[str] = []

    @property
    def session(self):
        if self._session is None:
            self._session = self._connect()
        return self._session

    def reset_session(self) -> None:
        """Connect afresh at the next use (after the ring did not answer)."""
        session, self._session = self._session, None
        if session is not None:
            session.cluster.shutdown()

    def heartbeat(self) -> None:
        for member in self.members:
            self.session.execute(_statement(self.session, "INSERT INTO {ks}.agents (ring, member, host, heartbeat) "
                                                          "VALUES (%s, %s, %s, toTimestamp(now()))"),
                                 (self.ring, member.address, self.host))

    def _heartbeat_until(self, stop: threading.Event) -> None:
        while not stop.wait(HEARTBEAT_SECONDS):
            try:
                self.heartbeat()
            except Exception:  # a member restarting under the write: the next beat
                pass

    def start_members(self, overrides: dict[str, Any] | None = None) -> list:
        """Start the members that are not running on the ring's desired configuration (the newest
        order's overrides, or ``overrides`` where given; ``{}``: as they last ran): a member that
        joins later replays no older order."""
        started = []
        if overrides is None:
            overrides = desired_overrides(self.session, self.ring)
        for member in self.members:
            if member.is_running():
                continue
            member.set_overrides(overrides)
            member.start()
            started.append(member)
        return started

    def poll_once(self) -> list[dict]:
        """Carry out, for this host's members, the open order (only the newest ever is) they have
        not carried out yet. A member that started on its overrides after it was given (one that
        joined later) records it done without a restart."""
        records: list[dict] = []
        control = RingControl(self.session, self.ring)
        order = control.latest()
        if order is None:
            return records
        done = control.done(order.id)
        holder = self._lease_holder()
        for member in self.members:
            if member.address in done:
                self._give_back_if_held(member, holder)
                continue
            if self._in_force_since_start(member, order):
                record = {"host": self.host, "restart": False, "in_force_at_start": True}
                if order.live:
                    record["live"] = self._live_settings(member, order.live, send=False)
                records.append(self._record_done(order, member, record))
                self._give_back_if_held(member, holder)
                continue
            if not self._take_lease(order.id, member.address):
                break  # another member is at it: the next poll
            beating = threading.Event()
            # the heartbeat goes on while the order is carried out: a lease lapses only once it stops
            beat = threading.Thread(target=self._heartbeat_until, args=(beating,), daemon=True)
            beat.start()
            left_down = False
            try:
                records.append(self._record_done(order, member, self._carry_out(member, order)))
            except Exception:
                # failed after its member went down: the lease stays with it (its next poll takes it
                # again and starts it), so no other member goes down meanwhile
                left_down = not member.is_running()
                raise
            finally:
                beating.set()
                beat.join()
                if not left_down:
                    self._give_back_lease(member.address)
        self.records.extend(records)
        return records

    def _record_done(self, order: Order, member, record: dict) -> dict:
        record["finished_at"] = time.time()
        if "live" in record:
            record["applied"] = all(entry["applied"] for entry in record["live"].values())
        self.session.execute(_statement(self.session, "INSERT INTO {ks}.done (ring, id, member, record) "
                                                      "VALUES (%s, %s, %s, %s)"),
                             (self.ring, order.id, member.address, json.dumps(record)))
        return record

    def _in_force_since_start(self, member, order: Order) -> bool:
        """Whether ``member`` runs with ``order``'s overrides since a start after it was given
        (its gossip generation is its start's epoch second)."""
        if any(member.overrides().get(k) != v for k, v in order.overrides.items()):
            return False
        host = self._host(member.address)
        if host is None or not host.is_up:
            return False
        try:
            row = next((r for r in self.session.execute("SELECT address, generation FROM system_views.gossip_info",
                                                        host=host, timeout=10) if str(r.address) == member.address),
                       None)
        except Exception:  # not answering: not taken as started on it
            return False
        return row is not None and (row.generation or 0) > order.submitted_at

    def _take_lease(self, order: uuid.UUID, holder: str) -> bool:
        """The ring's lease for ``holder`` (a member's address). A lease not given back lapses only
        once its holder's agent has stopped heartbeating and its member is back up: a member still
        down keeps it, so no second member goes down meanwhile."""
        row = self.session.execute(
            _statement(self.session, "INSERT INTO {ks}.lease (ring, holder, order_id) VALUES (%s, %s, %s) "
                                     "IF NOT EXISTS", serial=True),
            (self.ring, holder, order)).one()
        if bool(row[0]) or getattr(row, "holder", None) == holder:
            return True
        if not self._lease_lapsed(row.holder):
            return False
        taken = self.session.execute(
            _statement(self.session, "UPDATE {ks}.lease SET holder = %s, order_id = %s WHERE ring = %s "
                                     "IF holder = %s", serial=True), (holder, order, self.ring, row.holder)).one()
        if taken[0]:
            self.leases_taken_over.append(row.holder)
        return bool(taken[0])

    def _lease_lapsed(self, holder: str) -> bool:
        """Whether the lease ``holder`` did not give back has lapsed: its agent's heartbeat has
        stopped and its member is back up (or has left the ring)."""
        row = self.session.execute(_statement(self.session, "SELECT heartbeat FROM {ks}.agents WHERE ring = %s AND "
                                                            "member = %s"), (self.ring, holder)).one()
        beating = (row is not None and row.heartbeat is not None
                   and time.time() - row.heartbeat.timestamp() <= AGENT_STALE_SECONDS)
        if beating:
            return False
        if self._host(holder) is None:
            return True  # no longer a member of the ring
        views, unreachable = self._gossip_views()
        return holder not in unreachable and all(
            str(r.status_with_port or r.status or "").startswith("NORMAL")
            for view in views.values() for r in view if str(r.address) == holder)

    def _lease_holder(self) -> str | None:
        row = self.session.execute(_statement(self.session, "SELECT holder FROM {ks}.lease WHERE ring = %s"),
                                   (self.ring,)).one()
        return row.holder if row else None

    def _give_back_if_held(self, member, holder: str | None) -> None:
        """Give back the lease ``member`` still holds though its order is done on it: the agent
        before this one died before giving it back, and this agent's heartbeat would keep it from
        ever lapsing (no other member could go down again). ``holder`` read once per poll: the
        conditional delete is a Paxos round, not sent on every poll."""
        if holder == member.address:
            self._give_back_lease(member.address)

    def _give_back_lease(self, holder: str) -> None:
        self.session.execute(_statement(self.session, "DELETE FROM {ks}.lease WHERE ring = %s IF holder = %s",
                                        serial=True), (self.ring, holder))

    def _host(self, address: str):
        return next((h for h in self.session.cluster.metadata.all_hosts() if h.address == address), None)

    def _others(self, member) -> list:
        return [h for h in self.session.cluster.metadata.all_hosts() if h.address != member.address]

    # --- before a member goes down ----------------------------------------------------------
    def _gossip_views(self) -> tuple[dict[str, list], dict[str, str]]:
        """``({member: its system_views.gossip_info rows}, {member: why it gave none})`` of every
        member the driver knows."""
        views: dict[str, list] = {}
        unreachable: dict[str, str] = {}
        for host in self.session.cluster.metadata.all_hosts():
            if not host.is_up:
                unreachable[host.address] = "is down (the driver cannot reach it)"
                continue
            try:
                views[host.address] = list(self.session.execute(
                    "SELECT address, generation, status, status_with_port FROM system_views.gossip_info",
                    host=host, timeout=10))
            except Exception as exc:
                unreachable[host.address] = f"does not answer ({type(exc).__name__})"
        return views, unreachable

    def ring_problems(self, going_down: str) -> tuple[list[str], float]:
        """``(what keeps going_down from going down, the latest start among the members)``: every
        other member must answer and be NORMAL in the gossip of every member that answers (a
        member stopped by drain or SIGTERM says ``shutdown`` there; one killed stops answering).
        The latest start is the newest gossip generation seen (epoch seconds)."""
        views, unreachable = self._gossip_views()
        problems = [f"{address} {why}" for address, why in unreachable.items() if address != going_down]
        latest_start = 0.0
        for viewer, view in views.items():
            for row in view:
                address = str(row.address)
                latest_start = max(latest_start, float(row.generation or 0))
                if address == going_down:
                    continue
                # a peer's state is in STATUS_WITH_PORT (STATUS is left empty for peers in 5.0)
                status = str(row.status_with_port or row.status or "")
                if not status.startswith("NORMAL"):
                    problems.append(f"{viewer} sees {address} {status.split(',')[0] or 'with no status'}")
                if address not in views and address not in unreachable:
                    problems.append(f"{viewer} sees {address}, which the driver does not know")
        return sorted(set(problems)), latest_start

    def pending_hints(self, going_down: str) -> dict[str, list[str]]:
        """``{holder: [target]}``: the hint files each member lists (``system_views.pending_hints``,
        asked of each member itself, the one going down included) for a member other than ``going_down``."""
        pending: dict[str, list[str]] = {}
        for host in self.session.cluster.metadata.all_hosts():
            rows = self.session.execute("SELECT address, files FROM system_views.pending_hints", host=host, timeout=10)
            targets = [str(r.address) for r in rows if str(r.address) != going_down and r.files]
            if targets:
                pending[host.address] = targets
        return pending

    def hints_flush_seconds(self) -> float:
        """The longest ``hints_flush_period`` among the members (as each runs it)."""
        longest = 0.0
        for host in self.session.cluster.metadata.all_hosts():
            row = self.session.execute("SELECT value FROM system_views.settings WHERE name = 'hints_flush_period'",
                                       host=host, timeout=10).one()
            longest = max(longest, _seconds(row.value if row else None))
        return longest

    def check_safe_to_drain(self, member) -> tuple[float, int]:
        """Wait until ``member`` may go down: every other member up and NORMAL in every member's
        gossip (:meth:`ring_problems`), and no member holding hints for any member but it, the
        hints asked only once the members' answers are complete and then read empty for a flush
        and dispatch-trigger period in a row (:mod:`.hints`). Returns
        ``(seconds waited, hint files pending when the hints wait began)``;
        :class:`UnsafeToDrainError` after ``safety_timeout``."""
        from .hints import (
            HINTS_DISPATCH_TRIGGER_SECONDS, HintsPendingError, view_trusted_after, wait_no_pending_hints,
        )

        t0 = time.monotonic()
        deadline = t0 + self.safety_timeout
        while True:
            problems, latest_start = self.ring_problems(member.address)
            if not problems:
                flush = self.hints_flush_seconds()
                try:
                    _, files = wait_no_pending_hints(
                        lambda: self.pending_hints(member.address), view_trusted_after(latest_start, flush),
                        max(0.0, deadline - time.monotonic()), member.address,
                        quiet_seconds=flush + HINTS_DISPATCH_TRIGGER_SECONDS)
                except HintsPendingError as exc:
                    raise UnsafeToDrainError(member.address, [str(exc).split(": taking")[0]],
                                             time.monotonic() - t0) from exc
                except Exception as exc:  # a member stopped answering during the wait: the ring is asked again
                    problems = [f"a member stopped answering while its hints were asked ({type(exc).__name__})"]
                else:
                    # a member may have gone down during the hints wait
                    problems, _ = self.ring_problems(member.address)
                    if not problems:
                        return time.monotonic() - t0, files
            if time.monotonic() > deadline:
                raise UnsafeToDrainError(member.address, problems, time.monotonic() - t0)
            time.sleep(1.0)

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

    # --- carrying an order out ----------------------------------------------------------------
    def _live_settings(self, member, live: dict[str, dict], send: bool) -> dict[str, dict]:
        """Each live setting of an order on ``member``: sent over its JMX (``send``), then read back
        from the member's ``system_views.settings``; applied only where the read-back matches."""
        entries: dict[str, dict] = {}
        for knob, spec in sorted(live.items()):
            entry = {"setting": spec.get("setting"), "wanted": spec.get("value")}
            if send and spec.get("command"):
                entry["command"] = "nodetool " + " ".join(spec["command"])
                try:
                    member.nodetool(*spec["command"])
                except Exception as exc:  # a refused or unreachable JMX: recorded, not applied
                    entry.update(applied=False, why=f"{entry['command']} failed on {member.address}: {exc}")
            entries[knob] = entry
        settings = self._settings_of(member)
        for knob, entry in entries.items():
            if "applied" in entry:
                continue
            entry["read_back"] = settings.get(entry["setting"])
            entry["applied"] = _same_setting(entry["read_back"], entry["wanted"])
            if not entry["applied"]:
                entry["why"] = (f"{entry['setting']} reads {entry['read_back']!r} on {member.address}, not "
                                f"{entry['wanted']!r}")
        return entries

    def _settings_of(self, member, timeout: float = 60.0) -> dict[str, str]:
        """``system_views.settings`` of ``member`` itself (a member just back is waited for)."""
        deadline = time.monotonic() + timeout
        while True:
            host = self._host(member.address)
            try:
                if host is not None and host.is_up:
                    return {r.name: r.value for r in self.session.execute("SELECT name, value FROM system_views.settings",
                                                                          host=host, timeout=10)}
            except Exception:  # marked down between the check and the request: asked again
                pass
            if time.monotonic() > deadline:
                raise OrderError(f"{member.address} did not answer its settings within {timeout:.0f}s: its order's "
                                 "settings could not be read back; check it (`nodetool status`)")
            time.sleep(0.5)

    def _carry_out(self, member, order: Order) -> dict:
        from .cluster import _drain

        record: dict[str, Any] = {"host": self.host, "restart": order.restart}
        if not order.restart:
            member.set_overrides(order.overrides)  # kept for its next start
            if order.live:
                record["live"] = self._live_settings(member, order.live, send=True)
            return record
        waited, files = self.check_safe_to_drain(member)
        record.update(safety_wait_seconds=round(waited, 2), hint_files=files)
        member.set_overrides(order.overrides)
        record["drain_seconds"] = round(_drain(member), 2)
        # gossip generations are the start's epoch seconds: the member's next one is at least now
        self._generation_floor = int(time.time())

        def converge() -> None:
            t0 = time.monotonic()
            self._seen_back_by_every_member(member)
            record["converge_seconds"] = round(time.monotonic() - t0, 2)

        record["restart_seconds"] = round(member.restart(before_clients=converge), 3)
        if order.live:
            record["live"] = self._live_settings(member, order.live, send=False)
        return record

    def run(self, stop: threading.Event, interval: float = 1.0, report: Callable[[str], Any] | None = None) -> None:
        """Heartbeat and carry out orders until ``stop`` is set (errors are retried at the next poll);
        ``report`` is given a line per done record and per error (an agent's log)."""
        while not stop.is_set():
            try:
                self.heartbeat()
                for record in self.poll_once():
                    if report:
                        report(f"done: {json.dumps(record, default=str)}")
            except Exception as exc:  # a member of the ring restarting under a read: the next poll
                self.last_error = exc
                if report:
                    report(f"retrying at the next poll: {type(exc).__name__}: {exc}")
            stop.wait(interval)
