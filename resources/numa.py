"""NUMA topology from ``/sys/devices/system/node`` and ``numactl`` pinning.

The ICPE'19 study (seed 002) scales Cassandra on many-core servers by running one instance
per NUMA node, bound with ``numactl --cpunodebind=N --membind=N`` and ``-XX:+UseNUMA``.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

SYS_NODES = Path("/sys/devices/system/node")


@dataclass(frozen=True)
class NumaNode:
    node_id: int
    cpus: tuple[int, ...]
    mem_total_kb: int


def _parse_cpulist(text: str) -> tuple[int, ...]:
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-")
            cpus.extend(range(int(lo), int(hi) + 1))
        else:
            cpus.append(int(part))
    return tuple(cpus)


def numa_nodes(root: Path = SYS_NODES) -> list[NumaNode]:
    """The machine's NUMA nodes; one pseudo-node with every CPU when sysfs shows none."""
    nodes: list[NumaNode] = []
    for node_dir in sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        cpus = _parse_cpulist((node_dir / "cpulist").read_text())
        mem_kb = 0
        meminfo = node_dir / "meminfo"
        if meminfo.exists():
            for line in meminfo.read_text().splitlines():
                if "MemTotal" in line:
                    mem_kb = int(line.split()[-2])
        nodes.append(NumaNode(int(node_dir.name[4:]), cpus, mem_kb))
    if not nodes:
        import os

        nodes.append(NumaNode(0, tuple(range(os.cpu_count() or 1)), 0))
    return nodes


def numactl_prefix(node_id: int | None) -> list[str]:
    """``numactl`` arguments that bind a process to one node's CPUs and memory.

    Empty when no node is asked for, or when the machine has a single node (binding changes
    nothing there) and numactl is missing.
    """
    if node_id is None:
        return []
    known = {n.node_id for n in numa_nodes()}
    if node_id not in known:
        raise ValueError(f"NUMA node {node_id} does not exist here (nodes: {sorted(known)})")
    numactl = shutil.which("numactl")
    if numactl is None:
        if len(known) == 1:
            return []
        raise RuntimeError("numactl is not installed: run scripts/setup.sh (apt-get install numactl)")
    return [numactl, f"--cpunodebind={node_id}", f"--membind={node_id}"]
