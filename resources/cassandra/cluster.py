"""Several Cassandra instances on one machine as one ring (instance i on 127.0.0.i).

On a multi-socket server each instance is pinned to one NUMA node (seed 002); here, with one
node, they share it. Instance 1 is the seed.
"""
from __future__ import annotations

import time
from typing import Any

from ..numa import numa_nodes
from .node import CassandraNode


class CassandraCluster:
    def __init__(self, nodes: int = 1, heap: str | None = None, pin_numa: bool | None = None):
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        numa = numa_nodes()
        # pin only where there is more than one NUMA node to spread over
        pin = (len(numa) > 1) if pin_numa is None else pin_numa
        self.nodes = [
            CassandraNode(index=i + 1, nodes=nodes, heap=heap,
                          numa_node=numa[i % len(numa)].node_id if pin else None)
            for i in range(nodes)
        ]

    def start(self) -> dict[str, float]:
        # one at a time: a node joins more reliably once the seed is up
        return {n.name: n.start() for n in self.nodes}

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()

    def rolling_restart(self, overrides: dict[str, Any] | None = None) -> dict[str, float]:
        times = {}
        for node in self.nodes:
            if overrides is not None:
                node.set_overrides(overrides)
            times[node.name] = node.restart()
        return times

    @property
    def contact_points(self) -> list[str]:
        return [n.address for n in self.nodes]

    def status(self) -> list[dict]:
        return [n.status() for n in self.nodes]
