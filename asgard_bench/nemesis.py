"""``asgard bench nemesis``: faults at random on a ring across emulated hosts while a loop of runs
goes on and the ring is reconfigured, after Jepsen's nemesis (bounded in count and time).

Three hosts (network namespaces, each on its own root), one member each, replication factor 3 at
``LOCAL_QUORUM`` (:mod:`asgard.pipelines.ring_check`'s job, which checks every byte it reads). Each
host's agent (``asgard cassandra host agent``) is a process in its namespace. The coordinator is
the retune job, run in a process of its own, one reconfiguration after another: each is a restart
order (``memtable_flush_writers``, a restart-only setting) that the agents carry out one member at
a time. Meanwhile, one fault at a time, with a random gap between:

* ``kill_agent``: kill -9 a host's agent, the one holding the ring's lease where one does (in the
  middle of a restart), then start it again;
* ``kill_coordinator``: kill -9 the retune in the middle of its order; the next retune supersedes it;
* ``pause_member``: SIGSTOP a member for a few seconds, then SIGCONT;
* ``drop_packets``: a host sends nothing for a few seconds (a 1-byte token bucket on its link, in
  its namespace: this kernel has no netem);
* ``restart_host``: kill -9 a host's agent and members at once, then start its agent, which starts
  its members on the ring's desired configuration.

A watcher samples every member's gossip throughout. A member is down when the driver has it down
(its connections refused or closed: a stopped process) or some member's gossip does not see it
``NORMAL`` (a drained one says ``shutdown``); one merely slow to answer the watcher is not (it is
counted apart); down by an order when no fault of the nemesis holds it (from injection until it is
seen up again). Checked:

* no moment with two members down by orders;
* no run failed, and every output of every run reads back afterwards;
* every order ends closed (every member carried it out) or superseded by a newer one.

Example::

    report = run_nemesis(faults_per_kind=20, reconfigurations=3)   # its own ring; about 1 h here
    report["outcomes"]   # {"runs": 41, "runs_failed": 0, "outputs_lost": 0, "two_down_by_orders": 0, ...}
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FAULT_KINDS = ("kill_agent", "kill_coordinator", "pause_member", "drop_packets", "restart_host")
#: a fault that takes a member away lasts this long (seconds, drawn uniformly): under the
#: job's 120 s ride-through, so a run outlives it even next to a member an order has down
FAULT_SECONDS = (3.0, 8.0)
#: the gap between one fault's heal and the next fault (seconds, drawn uniformly)
GAP_SECONDS = (2.0, 10.0)
KNOB = "memtable_flush_writers"
KNOB_VALUES = (1, 2, 4)


@dataclass
class Fault:
    kind: str
    target: str
    at: float
    healed_at: float | None = None
    detail: str = ""


@dataclass
class Tally:
    """What the nemesis did and what it saw; the report's body."""

    faults: list[Fault] = field(default_factory=list)
    runs: list[dict] = field(default_factory=list)
    coordinators: list[dict] = field(default_factory=list)
    samples: int = 0
    slow_answers: int = 0
    two_down_by_orders: list[dict] = field(default_factory=list)
    most_down: int = 0
    timed_out: bool = False


class Watcher(threading.Thread):
    """Samples every member's gossip every ``interval`` seconds (each member asked at once, with a
    short timeout: a paused member must not stall the sample)."""

    def __init__(self, session, members: list[str], faulted: dict[str, str], lock: threading.Lock, tally: Tally,
                 interval: float = 0.5):
        super().__init__(daemon=True, name="nemesis-watcher")
        self.session, self.members, self.faulted, self.lock, self.tally = session, members, faulted, lock, tally
        self.interval, self.stop = interval, threading.Event()

    def down(self) -> dict[str, str]:
        """``{member: why}`` for every member down now."""
        hosts = {h.address: h for h in self.session.cluster.metadata.all_hosts()}
        asked = {}
        for address in self.members:
            host = hosts.get(address)
            if host is None or not host.is_up:
                continue
            asked[address] = self.session.execute_async(
                "SELECT address, status, status_with_port FROM system_views.gossip_info", host=host, timeout=2.0)
        down = {a: "the driver has it down" for a in self.members if a not in asked}
        for viewer, future in asked.items():
            try:
                rows = list(future.result())
            except Exception:
                # slow to answer the watcher is not down (a busy machine): its peers' gossip and the
                # driver's connections say that
                self.tally.slow_answers += 1
                continue
            for row in rows:
                status = str(row.status_with_port or row.status or "")
                if str(row.address) in self.members and not status.startswith("NORMAL"):
                    down.setdefault(str(row.address), f"{viewer} sees it {status.split(',')[0] or 'without status'}")
        return down

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                down = self.down()
            except Exception:  # the watcher's own session between hosts: the next sample
                continue
            with self.lock:
                for address in [a for a, why in self.faulted.items() if why == "recovering" and a not in down]:
                    del self.faulted[address]  # seen up again: no longer the nemesis's
                by_orders = sorted(a for a in down if a not in self.faulted)
                self.tally.samples += 1
                self.tally.most_down = max(self.tally.most_down, len(down))
                if len(by_orders) >= 2:
                    self.tally.two_down_by_orders.append({"at": time.time(), "members": {a: down[a] for a in by_orders}})


class Nemesis:
    """The faults on ``ring`` (a :class:`~asgard.resources.cassandra.hosts.HostRing` of one member per
    host) and its hosts' ``agents`` (:class:`~asgard.resources.cassandra.host_agent.HostAgentProcess`)."""

    def __init__(self, ring, hosts: list, agents: list, rng: random.Random, tally: Tally):
        self.ring, self.hosts, self.agents, self.rng, self.tally = ring, hosts, agents, rng, tally
        self.lock = threading.Lock()
        self.faulted: dict[str, str] = {}  # member address -> "fault" | "recovering"
        self.coordinator: subprocess.Popen | None = None
        self.order_open = threading.Event()  # the live coordinator's order is in the ring

    def _hold(self, members: list, why: str = "fault") -> None:
        with self.lock:
            for member in members:
                self.faulted[member.address] = why

    def _release(self, members: list) -> None:
        with self.lock:
            for member in members:
                self.faulted[member.address] = "recovering"

    def _lease_holder(self) -> str | None:
        from asgard.resources.cassandra.orders import CONTROL_KEYSPACE

        session = self.ring.session()
        try:
            row = session.execute(f"SELECT holder FROM {CONTROL_KEYSPACE}.lease WHERE ring = 'asgard'").one()
            return row.holder if row else None
        finally:
            session.cluster.shutdown()

    def _host_of(self, address: str | None):
        return next((h for h in self.hosts for m in self.ring.members_of(h) if m.address == address), None)

    def _agent_of(self, host):
        return self.agents[self.hosts.index(host)]

    def possible(self, kind: str) -> bool:
        return kind != "kill_coordinator" or (self.coordinator is not None and self.coordinator.poll() is None
                                              and self.order_open.is_set())

    def inject(self, kind: str) -> Fault:
        """The fault ``kind``, healed; one the system under test could not heal from (an agent that
        would not start again) is recorded with its error, its host's agent started once more."""
        try:
            return getattr(self, kind)()
        except Exception as exc:
            fault = Fault(kind, "?", time.time(), time.time(), detail=f"error: {type(exc).__name__}: {str(exc)[:500]}")
            for agent in self.agents:
                if not agent.is_running():
                    try:
                        agent.start()
                    except Exception as again:
                        fault.detail += f"; {agent.name} again: {type(again).__name__}"
            return fault

    def kill_agent(self) -> Fault:
        holder = None
        try:
            holder = self._lease_holder()
        except Exception:
            pass
        host = self._host_of(holder) or self.rng.choice(self.hosts)
        agent = self._agent_of(host)
        fault = Fault("kill_agent", host.name, time.time(), detail=f"lease holder {holder}" if holder else "no lease")
        agent.kill()
        time.sleep(self.rng.uniform(*FAULT_SECONDS))
        agent.start()  # starts its member if the kill left it down
        fault.healed_at = time.time()
        return fault

    def kill_coordinator(self) -> Fault:
        proc = self.coordinator
        fault = Fault("kill_coordinator", f"pid {proc.pid}", time.time())
        proc.kill()
        proc.wait(30)
        fault.healed_at = time.time()
        return fault

    def pause_member(self) -> Fault:
        member = self.rng.choice(self.ring.members)
        pid = member.pid()
        fault = Fault("pause_member", member.address, time.time())
        if pid is None:
            fault.detail = "not running (an order's restart): nothing paused"
            fault.healed_at = time.time()
            return fault
        self._hold([member])
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(self.rng.uniform(*FAULT_SECONDS))
        finally:
            os.kill(pid, signal.SIGCONT)
            self._release([member])
        fault.healed_at = time.time()
        return fault

    def drop_packets(self) -> Fault:
        host = self.rng.choice(self.hosts)
        members = self.ring.members_of(host)
        link = f"asgvn{host.number}"
        fault = Fault("drop_packets", host.name, time.time(), detail=f"{link} egress")
        self._hold(members)
        tc = [*host.exec_prefix(), "tc", "qdisc"]
        try:
            subprocess.run([*tc, "replace", "dev", link, "root", "tbf", "rate", "1kbit", "burst", "1", "latency", "1ms"],
                           check=True, capture_output=True, timeout=30)
            time.sleep(self.rng.uniform(*FAULT_SECONDS))
        finally:
            subprocess.run([*tc, "del", "dev", link, "root"], capture_output=True, timeout=30)
            self._release(members)
        fault.healed_at = time.time()
        return fault

    def restart_host(self) -> Fault:
        host = self.rng.choice(self.hosts)
        members, agent = self.ring.members_of(host), self._agent_of(host)
        fault = Fault("restart_host", host.name, time.time())
        self._hold(members)
        try:
            agent.kill()
            for member in members:
                member.kill()
            time.sleep(self.rng.uniform(*FAULT_SECONDS))
            agent.start()  # the host comes back: its agent starts its members first
        finally:
            self._release(members)
        fault.healed_at = time.time()
        return fault


def _coordinate(value: int, out: Path) -> None:
    """The retune job in this process (the coordinator), to ``value`` of :data:`KNOB`; its outcome to ``out``."""
    import dagster as dg

    from asgard.pipelines.jobs import make_job
    from asgard_dagster import CassandraResource
    from asgard_dagster.retune import make_retune_job

    app = make_job("word_count", "cassandra")
    retune = make_retune_job([app], connection=CassandraResource(
        contact_points=os.environ["ASGARD_RING_CONTACTS"].split(","), keyspace="asgard_hosts",
        username=dg.EnvVar("ASGARD_RING_USER"), password=dg.EnvVar("ASGARD_RING_PASSWORD"),
        ssl_ca_file=os.environ["ASGARD_RING_CA"]))
    config = {"ops": {"plan_workload": {"config": {
        "upcoming_jobs": [app.name], "keyspace": "asgard_hosts", "knobs": {KNOB: value}, "force": True,
        "evaluations": 50, "lookahead_seconds": 600, "probe_seconds": 0}}}}
    result = retune.execute_in_process(run_config=config, raise_on_error=False)
    outcome = result.output_for_node("reconfigure") if result.success else None
    out.write_text(json.dumps({"success": result.success, "outcome": outcome}, default=str))


def _latest_order(ring, timeout: float = 300.0) -> Any:
    """The newest order's id, asked again while the ring does not answer (a fault just healing)."""
    from asgard.resources.cassandra.orders import RingControl

    deadline = time.monotonic() + timeout
    while True:
        try:
            session = ring.session()
            try:
                order = RingControl(session).latest()
                return order.id if order else None
            finally:
                session.cluster.shutdown()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def _run_loop(instance, stop: threading.Event, tally: Tally) -> None:
    from dagster import execute_job, reconstructable

    from asgard.pipelines.ring_check import hosts_ring_job

    while not stop.is_set():
        try:
            with execute_job(reconstructable(hosts_ring_job), instance=instance) as result:
                tally.runs.append({"run_id": result.run_id, "success": result.success,
                                   "failures": [str(e.event_specific_data.error.message)[:300]
                                                for e in result.all_events if e.is_step_failure]})
        except Exception as exc:  # a run that could not even be launched counts as failed
            tally.runs.append({"run_id": None, "success": False, "failures": [f"{type(exc).__name__}: {exc}"[:300]]})


def _check_outputs(ring, runs: list[dict]) -> tuple[int, int]:
    """``(outputs read back, outputs lost)`` of the successful runs."""
    from asgard.pipelines.ring_check import PIECES
    from asgard.resources.stores import ObjectKey
    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(**ring.client_options(), keyspace="asgard_hosts")
    read = lost = 0
    for run in runs:
        if not run["success"]:
            continue
        scope = f"run/{run['run_id']}"
        paths = store.list_paths(scope)
        lost += max(0, 2 * PIECES + 1 - len(paths))  # the pieces, each doubled, the total
        for path in paths:
            try:
                store.get(ObjectKey(scope, path))
                read += 1
            except Exception:
                lost += 1
    return read, lost


def _orders(ring) -> dict[str, str]:
    """Every order of the ring and how it ended (``closed``, ``superseded by ...``, ``open``)."""
    from asgard.resources.cassandra.orders import CONTROL_KEYSPACE, RingControl

    session = ring.session()
    try:
        control = RingControl(session)
        ids = [r.id for r in session.execute(f"SELECT id FROM {CONTROL_KEYSPACE}.orders WHERE ring = 'asgard'")]
        return {str(i): control.state(i) for i in ids}
    finally:
        session.cluster.shutdown()


def nemesis_on(ring, hosts: list, instance, faults_per_kind: int = 1, reconfigurations: int = 3, seed: int = 0,
               settle_timeout: float = 900.0, workdir: Path | None = None, progress=None,
               time_limit: float | None = None) -> dict:
    """The nemesis on a running ``ring`` of one member per host in ``hosts`` (its agents are started
    here and stopped afterwards); runs go to the Dagster ``instance``; ``progress`` is given a
    line per fault and per reconfiguration. Past ``time_limit`` seconds no fault or reconfiguration
    starts and a coordinator still at its order is killed (the report's ``timed_out``). Returns the report."""
    say = progress or (lambda line: None)
    import tempfile

    rng = random.Random(seed)
    tally = Tally()
    workdir = Path(workdir or tempfile.mkdtemp(prefix="nemesis-"))
    env = {"ASGARD_RING_CONTACTS": ",".join(m.address for m in ring.members),
           "ASGARD_RING_CA": str(ring.ring_ca / "ca.pem"), "ASGARD_RING_USER": "asgard_admin",
           "ASGARD_RING_PASSWORD": ring.superuser_password().strip()}
    # the runs' steps inherit it: they fork from a server the process's first run of the ring check starts (a
    # caller that ran it before with another ring restarts that server first, as tests/test_hosts_ring.py does)
    os.environ.update(env)
    agents = [ring.agent_process(h) for h in hosts]
    for agent in agents:
        agent.start_timeout = 300.0  # a host restart: its member starts before the agent says ready
        agent.start()
    nemesis = Nemesis(ring, hosts, agents, rng, tally)
    watcher_session = ring.session()
    watcher = Watcher(watcher_session, [m.address for m in ring.members], nemesis.faulted, nemesis.lock, tally)
    stop_runs = threading.Event()
    runner = threading.Thread(target=_run_loop, args=(instance, stop_runs, tally), name="nemesis-runs")
    plan = [kind for kind in FAULT_KINDS for _ in range(faults_per_kind)]
    rng.shuffle(plan)
    started = time.monotonic()
    watcher.start()
    runner.start()
    try:
        value_index = 0
        while (plan or len(tally.coordinators) < reconfigurations) and not tally.timed_out:
            value = KNOB_VALUES[value_index % len(KNOB_VALUES)]
            value_index += 1
            before = _latest_order(ring)
            out = workdir / f"coordinator-{len(tally.coordinators)}.json"
            log = open(out.with_suffix(".log"), "wb")  # noqa: SIM115 (the child writes it; closed below)
            nemesis.coordinator = subprocess.Popen(
                [sys.executable, "-c", f"from asgard_bench.nemesis import _coordinate; from pathlib import Path; "
                                       f"_coordinate({value}, Path({str(out)!r}))"],
                env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            nemesis.order_open.clear()
            record = {"value": value, "started": time.time()}
            while nemesis.coordinator.poll() is None:
                if time_limit is not None and time.monotonic() - started > time_limit:
                    tally.timed_out = True  # an order that does not end: the agents' logs say why
                    say(f"time limit of {time_limit:.0f} s passed: the coordinator is stopped")
                    nemesis.coordinator.kill()
                    nemesis.coordinator.wait(30)
                    break
                if not nemesis.order_open.is_set():
                    try:
                        if _latest_order(ring, timeout=0) != before:
                            nemesis.order_open.set()
                    except Exception:
                        pass
                if plan and nemesis.order_open.is_set():
                    kinds = [k for k in dict.fromkeys(plan) if nemesis.possible(k)]
                    if kinds:
                        time.sleep(rng.uniform(*GAP_SECONDS))
                        kind = rng.choice(kinds)
                        if nemesis.possible(kind):
                            plan.remove(kind)
                            tally.faults.append(nemesis.inject(kind))
                            fault = tally.faults[-1]
                            say(f"fault {len(tally.faults)}: {fault.kind} {fault.target} "
                                f"({(fault.healed_at or fault.at) - fault.at:.1f} s) {fault.detail}; runs "
                                f"{len(tally.runs)}, failed {sum(1 for r in tally.runs if not r['success'])}, "
                                f"two down by orders {len(tally.two_down_by_orders)}")
                        continue
                time.sleep(1.0)
            log.close()
            record["killed"] = nemesis.coordinator.returncode != 0 and any(
                f.kind == "kill_coordinator" and f.target == f"pid {nemesis.coordinator.pid}" for f in tally.faults)
            said = json.loads(out.read_text()) if out.exists() else {}
            record.update(success=bool(said.get("success")), outcome=said.get("outcome"), ended=time.time())
            tally.coordinators.append(record)
            say(f"reconfiguration {len(tally.coordinators)} to {KNOB}={value}: "
                f"{'killed' if record['killed'] else 'applied' if record['success'] else 'failed'}")
            if not record["killed"] and not record["success"] and not plan:
                break  # a retune failed on its own with no fault left to blame: stop and report it
        for agent in agents:  # every host back with its agent before the ring settles
            if not agent.is_running():
                agent.start()
        # the ring settles: the newest order closes once every member has carried it out
        deadline = time.monotonic() + settle_timeout
        orders: dict[str, str] = {"?": "open"}
        while any(state == "open" for state in orders.values()) and time.monotonic() < deadline:
            try:
                orders = _orders(ring)
            except Exception:  # a member still coming back: asked again
                pass
            else:
                if not any(state == "open" for state in orders.values()):
                    break
            time.sleep(5)
    finally:  # on an error too: no run, watcher or agent outlives the nemesis
        if nemesis.coordinator is not None and nemesis.coordinator.poll() is None:
            nemesis.coordinator.kill()
        stop_runs.set()
        runner.join(timeout=900)
        watcher.stop.set()
        watcher.join(timeout=30)
        watcher_session.cluster.shutdown()
        for agent in agents:
            agent.stop(timeout=120)
    read, lost = _check_outputs(ring, tally.runs)
    rep = report(tally, orders, read, lost, time.monotonic() - started, faults_per_kind, reconfigurations, seed)
    if tally.timed_out or rep["outcomes"]["orders_open"]:
        rep["agent_logs"] = {agent.name: _tail(agent.log_file) for agent in agents}
    return rep


def _tail(path: Path, lines: int = 40) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except FileNotFoundError:
        return []


def report(tally: Tally, orders: dict[str, str], read: int, lost: int, seconds: float, faults_per_kind: int,
           reconfigurations: int, seed: int) -> dict:
    counts = {kind: sum(1 for f in tally.faults if f.kind == kind) for kind in FAULT_KINDS}
    ended = {"closed": sum(1 for s in orders.values() if s == "closed"),
             "superseded": sum(1 for s in orders.values() if s.startswith("superseded")),
             "open": sum(1 for s in orders.values() if s == "open")}
    return {
        "setting": {"hosts": 3, "replication_factor": 3, "consistency": "LOCAL_QUORUM",
                    "faults_per_kind": faults_per_kind, "reconfigurations_at_least": reconfigurations, "seed": seed},
        "faults": counts,
        "outcomes": {
            "runs": len(tally.runs), "runs_failed": sum(1 for r in tally.runs if not r["success"]),
            "outputs_read_back": read, "outputs_lost": lost,
            "reconfigurations": len(tally.coordinators),
            "reconfigurations_applied": sum(1 for c in tally.coordinators if c["success"]),
            "coordinators_killed": sum(1 for c in tally.coordinators if c.get("killed")),
            "orders": len(orders), "orders_closed": ended["closed"], "orders_superseded": ended["superseded"],
            "orders_open": ended["open"],
            "faults_not_healed": sum(1 for f in tally.faults if f.detail.startswith("error:")),
            "gossip_samples": tally.samples, "slow_answers": tally.slow_answers,
            "two_down_by_orders": len(tally.two_down_by_orders),
            "most_members_down_at_once": tally.most_down,
            "timed_out": int(tally.timed_out),
        },
        "seconds": round(seconds, 1),
        "failures": [r["failures"] for r in tally.runs if not r["success"]][:5],
        "two_down_moments": tally.two_down_by_orders[:5],
        "fault_log": [asdict(f) for f in tally.faults],
    }


def run_nemesis(faults_per_kind: int = 20, reconfigurations: int = 3, seed: int = 0, heap: str = "768M",
                progress=None) -> dict:
    """The nemesis on a ring of its own (3 emulated hosts; :func:`~asgard.resources.cassandra.hosts.emulated_host_ring`)."""
    import tempfile

    from dagster import DagsterInstance

    from asgard.resources.cassandra.hosts import emulated_host_ring

    with tempfile.TemporaryDirectory(prefix="nemesis-dagster-") as home, \
            DagsterInstance.local_temp(home) as instance, \
            emulated_host_ring(3, replication_factor=3, heap=heap, instances_per_host=1) as (hosts, ring):
        return nemesis_on(ring, hosts.hosts[:3], instance, faults_per_kind, reconfigurations, seed,
                          progress=progress)


def print_report(rep: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"nemesis: {rep['setting']['hosts']} hosts, RF {rep['setting']['replication_factor']} "
                        f"{rep['setting']['consistency']}, seed {rep['setting']['seed']}, {rep['seconds']:.0f} s")
    table.add_column("fault")
    table.add_column("injected", justify="right")
    for kind, count in rep["faults"].items():
        table.add_row(kind, str(count))
    outcomes = Table(title="outcomes")
    outcomes.add_column("outcome")
    outcomes.add_column("count", justify="right")
    for name, count in rep["outcomes"].items():
        outcomes.add_row(name, str(count))
    console = Console()
    console.print(table)
    console.print(outcomes)
