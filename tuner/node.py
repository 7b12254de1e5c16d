"""The tuner's own Cassandra instance, isolated from the project's ring.

``CassandraNode(index=5)`` of ``resources`` renders ``seeds: 127.0.0.1`` and a token
``(index-1) * 2**64/nodes`` that overflows for ``index > nodes``; an instance used for
calibration must neither fail to start nor gossip its way into node 1's ring (same cluster
name, same seed). :class:`TunerNode` is the same node with its own seed, its own cluster name
and the first token.
"""
from __future__ import annotations

from typing import Any

from asgard.resources.cassandra.config import base_config, render_config
from asgard.resources.cassandra.node import CassandraNode

DEFAULT_INDEX = 5


class TunerNode(CassandraNode):
    def __init__(self, index: int = DEFAULT_INDEX, heap: str = "2G", **kw: Any):
        super().__init__(index=index, nodes=1, heap=heap, **kw)

    def config(self) -> dict[str, Any]:
        base = base_config(
            self.workdir, self.address, seeds=[self.address], index=1, nodes=1,
            native_port=self.native_port, authenticate=self.authenticate,
            cluster_name=f"asgard-tuner-{self.index}",
        )
        return render_config(base, self.overrides())
