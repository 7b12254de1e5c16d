"""Several Cassandra instances on one machine as one ring (instance i on 127.0.0.i).

The members follow a NUMA plan (:func:`asgard.resources.numa.plan_instances`): on a multi-node server
each instance is pinned to one node (ICPE'19), and its heap and memtable space are sized from
that node's memory; on a one-node machine they share it unpinned unless asked to pin each to
CPUs of its own (``cpus_per_instance`` / ``cpu_sets``, numactl ``--physcpubind``). Every pinned
launch is checked in /proc (:meth:`asgard.resources.process.ManagedServer.start`). The first instance is
the seed of every member.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import yaml

from ..process import ServerError

from ..numa import SYS_NODES, local_plan, numa_nodes
from ..paths import run_dir
from .hints import HintsPendingError  # noqa: F401  (raised by wait_hints_delivered; its old home)
from .node import CassandraNode


class CassandraCluster:
    """Instances ``first_index .. first_index + nodes - 1`` as one ring.

    Example::

        ring = CassandraCluster(nodes=2, first_index=3, heap="1G")  # 127.0.0.3 and 127.0.0.4
        ring.start()
        ring.rolling_restart({"concurrent_writes": 64})

        # one CPU each (numactl --physcpubind), checked in /proc at start
        pinned = CassandraCluster(nodes=2, first_index=14, heap="1G", cpus_per_instance=1)

    ``heap``: every member's heap (else ``ASGARD_CASSANDRA_HEAP``, else the plan's rule on the
    member's memory share). ``workdir``: member ``i`` keeps its state in ``workdir/node<i>``
    (default: the project's run directory). ``patches``: every member with the project's Cassandra
    patches (True) or on the release's classes alone (False); None leaves it to
    ``ASGARD_CASSANDRA_PATCHES``.
    """

    def __init__(self, nodes: int = 1, heap: str | None = None, pin_numa: bool | None = None, first_index: int = 1,
                 cpus_per_instance: int | None = None, cpu_sets: list | None = None, workdir: Path | None = None,
                 sysfs_root: Path = SYS_NODES, patches: bool | None = None):
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        if cpu_sets is not None and len(cpu_sets) != nodes:
            raise ValueError(f"{nodes} nodes but {len(cpu_sets)} CPU sets")
        # pin where there is more than one NUMA node to spread over, or where CPUs are asked for
        multi = len([n for n in numa_nodes(sysfs_root) if n.cpus]) > 1
        pin = pin_numa if pin_numa is not None else (multi or cpus_per_instance is not None or cpu_sets is not None)
        heap = heap or os.environ.get("ASGARD_CASSANDRA_HEAP")
        self.plan = local_plan(nodes, root=sysfs_root, pin=pin, cpus_per_instance=cpus_per_instance,
                               cpu_sets=cpu_sets, heap=heap)
        seed = f"127.0.0.{first_index}"
        self.nodes = [
            CassandraNode(index=first_index + i, nodes=nodes, seed=seed, ring_position=i + 1, placement=placement,
                          patches=patches, workdir=(Path(workdir) / f"node{first_index + i}") if workdir else None)
            for i, placement in enumerate(self.plan)
        ]

    def start(self, converge_timeout: float = 90.0) -> dict[str, float]:
        """Start every member, then wait until each sees all of them Up and Normal.

        A member answers CQL before gossip has told the others it is alive; a write at
        consistency ALL sent in that gap fails as Unavailable, so ``start`` returns only
        once the ring has converged."""
        # one at a time: a node joins more reliably once the seed is up
        times = {n.name: n.start() for n in self.nodes}
        if len(self.nodes) > 1:
            self.wait_converged(converge_timeout)
        return times

    def wait_converged(self, timeout: float = 90.0) -> None:
        """Block until ``nodetool status`` on every member shows every member ``UN``."""
        from .nodetool import ring_status

        want = {n.address for n in self.nodes}
        deadline = time.monotonic() + timeout
        pending = list(self.nodes)
        seen: dict[str, str] = {}
        while pending:
            seen = ring_status(pending[0].nodetool("status"))
            if all(seen.get(address) == "UN" for address in want):
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                raise ServerError(
                    f"ring {sorted(want)} did not converge within {timeout:.0f}s: "
                    f"{pending[0].address} sees {seen or 'no members'}; see {pending[0].log_file}")
            time.sleep(1.0)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()

    # --- reconfiguring a running ring -----------------------------------------------------
    @classmethod
    def of(cls, members: list[CassandraNode]) -> "CassandraCluster":
        """The ring made of these (running) instances, as they were launched: e.g. the members a
        client found through the cluster (:func:`local_ring`)."""
        if not members:
            raise ValueError("a cluster needs at least one node")
        ring = cls.__new__(cls)
        ring.plan = [m.placement for m in members]
        ring.nodes = list(members)
        return ring

    def set_overrides(self, overrides: dict[str, Any]) -> None:
        """Knob overrides every member uses from its next start."""
        for node in self.nodes:
            node.set_overrides(overrides)

    def nodetool_all(self, *args: str) -> dict[str, str]:
        """``nodetool args`` on every member at once (a live knob goes to the whole ring)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(self.nodes)) as pool:
            outputs = list(pool.map(lambda n: n.nodetool(*args), self.nodes))
        return {n.address: out for n, out in zip(self.nodes, outputs)}

    def cpu_seconds(self) -> float:
        return sum(n.cpu_seconds() for n in self.nodes)

    def host_ids(self) -> dict[str, str]:
        """``{address: host id}`` of the members, as the first running one sees them."""
        from .nodetool import ring_host_ids

        if not getattr(self, "_host_ids", None):
            self._host_ids = ring_host_ids(next(n for n in self.nodes if n.is_running()).nodetool("status"))
        return self._host_ids

    def pending_hint_files(self, targets: set[str]) -> dict[str, list[str]]:
        """Hint files each member holds for the members whose host ids are ``targets``.

        Read from the members' hints directories, not ``nodetool listpendinghints``: that lists
        only files closed and queued for dispatch (``HintsStore.hasFiles`` in 5.0), not the file a
        member is still writing hints into, so it reads empty while hints are pending."""
        found: dict[str, list[str]] = {}
        for node in self.nodes:
            files = sorted(f.name for f in (node.workdir / "hints").glob("*.hints") if f.name[:36] in targets)
            if files:
                found[node.address] = files
        return found

    def wait_hints_delivered(self, down_next: CassandraNode | None = None,
                             timeout: float = 120.0) -> tuple[float, int]:
        """Block until no member holds hints for any member but ``down_next``: every replica other
        than the one about to go down has every write it missed, so each partition keeps a complete
        replica while it is down. Returns ``(seconds waited, hint files pending when it began)``;
        :class:`HintsPendingError` after
        ``timeout``. Buffered hints reach their files within a flush period of a member coming back,
        so the files are trusted only once that period has passed since the last restart here."""
        from .hints import wait_no_pending_hints

        ids = self.host_ids()
        targets = {h for a, h in ids.items() if down_next is None or a != down_next.address}
        settle = max((_hints_flush_seconds(n) for n in self.nodes), default=10.0)
        # wall clock: a member restarted by an earlier run (its restarts.jsonl) counts too
        up_since = max([getattr(self, "_up_since", 0.0)] + [_last_restart_at(n) for n in self.nodes])
        names = {h: a for a, h in ids.items()}
        # the files are read directly (the one still being written included): a flush period suffices
        return wait_no_pending_hints(lambda: self.pending_hint_files(targets), up_since + settle, timeout,
                                     down_next.address if down_next else "a member",
                                     target_of=lambda f: names.get(f[:36], f[:36]))

    def restart_order(self) -> list[CassandraNode]:
        """The most recently restarted member first: hints to it may still be pending, and a
        member may go down with hints to itself pending (its peers keep them), not to others."""
        return sorted(self.nodes, key=lambda n: -_last_restart_at(n))

    def rolling_restart(self, overrides: dict[str, Any] | None = None, order: list[CassandraNode] | None = None,
                        drain: bool = True, converge_timeout: float = 90.0,
                        hints_timeout: float = 120.0) -> list[dict[str, Any]]:
        """Restart one member at a time, so that at replication factor >= 2 every partition keeps a
        replica: before a member goes down, wait until every other member has received its hints
        (:meth:`wait_hints_delivered`); ``nodetool drain`` it (clients move off, memtables flush);
        restart it with ``overrides`` and its CQL port closed; wait until every member sees every
        member UN, then open the port (:meth:`CassandraNode.start`'s ``before_clients``).

        One record per member, in the order restarted: ``member``, ``hints_wait_seconds`` and
        ``hint_files`` (pending to the other members when the wait began), ``drain_seconds``, ``restart_seconds`` (stop to CQL-ready, also in the member's
        ``restarts.jsonl``), ``converge_seconds``."""
        records = []
        for node in order or self.restart_order():
            record: dict[str, Any] = {"member": node.address}
            if len(self.nodes) > 1 and all(n.is_running() for n in self.nodes):
                try:
                    waited, files = self.wait_hints_delivered(node, hints_timeout)
                    record.update(hints_wait_seconds=round(waited, 2), hint_files=files)
                except HintsPendingError as exc:
                    exc.records = records  # the members restarted before it stopped
                    raise
            if overrides is not None:
                node.set_overrides(overrides)
            record["drain_seconds"] = round(_drain(node), 2) if drain else 0.0

            def converge() -> None:
                # the member opens its CQL port only once every member sees every member up: a
                # member back before it sees its peers would refuse QUORUM as Unavailable, and a
                # client falling to ONE would read its stale replica (the hints are not in yet)
                t0 = time.monotonic()
                self.wait_converged(converge_timeout)
                record["converge_seconds"] = round(time.monotonic() - t0, 2)

            # stop to CQL-ready, the convergence included (as in restarts.jsonl)
            record["restart_seconds"] = round(node.restart(before_clients=converge if len(self.nodes) > 1 else None), 3)
            self._up_since = time.time()
            records.append(record)
        return records

    def restart_together(self, overrides: dict[str, Any] | None = None, drain: bool = True,
                         converge_timeout: float = 90.0) -> list[dict[str, Any]]:
        """Every member down at once, then up in ring order (seed first): with replication factor 1
        a partition has one replica whichever way the ring restarts, and this is one outage, not
        one per member. Records as :meth:`rolling_restart`'s; a member's ``restart_seconds`` runs
        from its own stop to its own CQL-ready."""
        from concurrent.futures import ThreadPoolExecutor

        records = {n.address: {"member": n.address} for n in self.nodes}
        if overrides is not None:
            self.set_overrides(overrides)
        stopped_at: dict[str, float] = {}

        def down(node: CassandraNode) -> None:
            records[node.address]["drain_seconds"] = round(_drain(node), 2) if drain else 0.0
            stopped_at[node.address] = time.monotonic()
            node.stop()

        with ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(down, self.nodes))
        for node in self.nodes:
            node.start()
            seconds = time.monotonic() - stopped_at[node.address]
            node.record_restart(seconds)
            records[node.address]["restart_seconds"] = round(seconds, 3)
        if len(self.nodes) > 1:
            self.wait_converged(converge_timeout)
        self._up_since = time.time()
        return [records[n.address] for n in self.nodes]

    @property
    def contact_points(self) -> list[str]:
        return [n.address for n in self.nodes]

    def status(self) -> list[dict]:
        return [n.status() for n in self.nodes]


class RingMemberError(ServerError):
    """A member of the ring cannot be reconfigured here: not an instance this project runs, down,
    or started without a launch record (it could not be restarted as it runs)."""


def _drain(node: CassandraNode) -> float:
    """Seconds ``nodetool drain`` took (0 for a member that is not running, and for a lone node:
    it has no clients to move to other replicas, and its stop() flushes every table itself)."""
    if not node.is_running() or (node.nodes == 1 and node.fast_start):
        return 0.0
    t0 = time.monotonic()
    node.nodetool("drain", timeout=300)
    return time.monotonic() - t0


def _last_restart_at(node: CassandraNode) -> float:
    import json

    try:
        return float(json.loads(node.restart_log.read_text().splitlines()[-1])["at"])
    except (FileNotFoundError, IndexError, ValueError, KeyError, TypeError):
        return 0.0


def _hints_flush_seconds(node: CassandraNode) -> float:
    """The member's ``hints_flush_period`` as launched (Cassandra's default 10 s if unset)."""
    try:
        text = str((yaml.safe_load((node.conf_dir / "cassandra.yaml").read_text()) or {}).get("hints_flush_period", ""))
    except FileNotFoundError:
        text = ""
    if text.endswith("ms") and text[:-2].isdigit():
        return int(text[:-2]) / 1000
    return 10.0


def ring_members(session, timeout: float = 60.0) -> list[tuple[str, str]]:
    """``(native address, host id)`` of every member of the ring a driver session is connected to:
    ``system.local`` and ``system.peers_v2`` of one member (both asked of the same one, so each
    member is listed once). A member the driver has just marked down (a ring that has just
    started or restarted) is passed over for another, and all are tried again for ``timeout``
    seconds before :class:`RingMemberError`."""
    from cassandra import OperationTimedOut
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionException

    deadline = time.monotonic() + timeout
    while True:
        last: Exception | None = None
        for host in [h for h in session.cluster.metadata.all_hosts() if h.is_up]:
            try:
                local = session.execute("SELECT rpc_address, host_id FROM system.local", host=host).one()
                peers = session.execute("SELECT peer, native_address, host_id FROM system.peers_v2", host=host)
            except (NoHostAvailable, ConnectionException, OperationTimedOut) as exc:
                last = exc
                continue
            return [(str(local.rpc_address), str(local.host_id))] + [
                (str(row.native_address or row.peer), str(row.host_id)) for row in peers]
        if time.monotonic() > deadline:
            raise RingMemberError(f"no member of the ring answered for {timeout:.0f}s ({last or 'none seen up'}): "
                                  "check the members with `asgard cassandra status`")
        time.sleep(0.5)


def local_ring(session) -> CassandraCluster:
    """The ring a driver session reaches, as the local instances the project runs (127.0.0.i is
    ``CassandraNode.launched(i)``). Raises :class:`RingMemberError` for a member that is not such
    an instance, is not running (it is never started here), or has no launch record."""
    import re

    members = ring_members(session)
    nodes = []
    for address, _ in members:
        match = re.fullmatch(r"127\.0\.0\.(\d{1,3})", address)
        if not match:
            raise RingMemberError(
                f"ring member {address} is not a local instance of this project (127.0.0.i): the retune job "
                "restarts only instances it runs. Reconfigure that cluster with its own tooling, or point the "
                "job's connection at a local ring.")
        try:
            node = CassandraNode.launched(int(match.group(1)))
        except ServerError as exc:
            raise RingMemberError(f"ring member {address}: {exc}") from exc
        if not node.is_running():
            raise RingMemberError(
                f"ring member {address} is down (no running server in {node.workdir}); the retune job never starts "
                "a node that was down. Start it (`asgard cassandra up`), or remove it from the ring "
                "(`nodetool removenode`), then retune.")
        if len(members) > 1 and not node.launch_file.exists():
            raise RingMemberError(
                f"ring member {address} was started without a launch record ({node.launch_file}), so a restart "
                "here could not keep its token and seed. Restart it once with this version (`asgard cassandra "
                "restart`), then retune.")
        nodes.append(node)
    ring = CassandraCluster.of(sorted(nodes, key=lambda n: n.index))
    ring._host_ids = dict(members)
    return ring


def local_cluster(nodes: int | None = None) -> CassandraCluster:
    """The cluster ``asgard cassandra up`` manages; its size is remembered between commands."""
    state = run_dir("cassandra") / "cluster.yaml"
    if nodes is None:
        nodes = (yaml.safe_load(state.read_text()) or {}).get("nodes", 1) if state.exists() else 1
    else:
        state.write_text(yaml.safe_dump({"nodes": nodes}))
    return CassandraCluster(nodes=nodes)


def managed_ring(session) -> tuple[CassandraCluster | None, list[str], list[str]]:
    """``(ring, members, not ours)``: the ring a driver session reaches as the local instances the
    project runs (what :func:`local_ring` gives), or ``None`` with the members that are not such
    an instance when any is not -- a cluster someone else runs (their addresses, or 127.0.0.i with
    no server of this project's behind it), which the retune job tunes from outside and never
    restarts. A member of the project's that is down still raises :class:`RingMemberError` (it is
    never started here); a member that answers is never called down."""
    import re

    members = ring_members(session)
    up = {h.address for h in session.cluster.metadata.all_hosts() if h.is_up}
    foreign = []
    for address, _ in members:
        match = re.fullmatch(r"127\.0\.0\.(\d{1,3})", address)
        node = None
        if match:
            try:
                node = CassandraNode.launched(int(match.group(1)))
            except ServerError:
                node = None
        if node is not None and node.is_running():
            continue
        if node is not None and address not in up and node.launch_file.exists():
            continue  # the project's own member, down: local_ring says so (and never starts it)
        foreign.append(address)
    addresses = [a for a, _ in members]
    if foreign:
        return None, addresses, foreign
    return local_ring(session), addresses, []
