"""Several Cassandra instances on one machine as one ring (instance i on 127.0.0.i).

The members follow a NUMA plan (:func:`resources.numa.plan_instances`): on a multi-node server
each instance is pinned to one node (seed 002), and its heap and memtable space are sized from
that node's memory; on a one-node machine they share it unpinned unless asked to pin each to
CPUs of its own (``cpus_per_instance`` / ``cpu_sets``, numactl ``--physcpubind``). Every pinned
launch is checked in /proc (:meth:`resources.process.ManagedServer.start`). The first instance is
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
    (default: the project's run directory).
    """

    def __init__(self, nodes: int = 1, heap: str | None = None, pin_numa: bool | None = None, first_index: int = 1,
                 cpus_per_instance: int | None = None, cpu_sets: list | None = None, workdir: Path | None = None,
                 sysfs_root: Path = SYS_NODES):
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
                          workdir=(Path(workdir) / f"node{first_index + i}") if workdir else None)
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

    def rolling_restart(self, overrides: dict[str, Any] | None = None) -> dict[str, float]:
        """Restart one node at a time (the others keep serving at RF >= 2)."""
        times = {}
        for node in self.nodes:
            if overrides is not None:
                node.set_overrides(overrides)
            times[node.name] = node.restart()
            if len(self.nodes) > 1:
                # the next member goes down only once this one is back in everyone's view
                self.wait_converged()
        return times

    @property
    def contact_points(self) -> list[str]:
        return [n.address for n in self.nodes]

    def status(self) -> list[dict]:
        return [n.status() for n in self.nodes]


def local_cluster(nodes: int | None = None) -> CassandraCluster:
    """The cluster ``asgard cassandra up`` manages; its size is remembered between commands."""
    state = run_dir("cassandra") / "cluster.yaml"
    if nodes is None:
        nodes = (yaml.safe_load(state.read_text()) or {}).get("nodes", 1) if state.exists() else 1
    else:
        state.write_text(yaml.safe_dump({"nodes": nodes}))
    return CassandraCluster(nodes=nodes)
