"""The facts of one :class:`~asgard.resources.cassandra.node.CassandraNode`, fixed when it is built:
what its collaborators (command line, security, records) are given in place of the node itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..numa import InstancePlan


@dataclass(frozen=True)
class NodeSpec:
    """Who the instance is, where it lives and how it runs; ``CassandraNode`` reads these back as
    its read-only attributes of the same names."""

    name: str                      # cassandra-<index>: the server's name in messages and logs
    index: int                     # 1..254: address 127.0.0.index, JMX port JMX_BASE_PORT + index - 1
    nodes: int                     # instances of its local ring
    version: str                   # the Cassandra release it runs
    workdir: Path                  # its own directory: conf/, data/, logs/, records
    address: str                   # 127.0.0.index, or another one (a node in a network namespace)
    native_port: int
    jmx_port: int
    heap: str                      # -Xms = -Xmx (the placement's, when it has one)
    authenticate: bool
    seed: str                      # the seed of a local ring (itself, standalone)
    ring_position: int             # 1..nodes within its ring: picks the token
    fast_start: bool               # False: a stock start, the baseline `asgard bench startup` compares against
    secure: bool                   # TLS-only CQL, PasswordAuthenticator, JMX login
    system_properties: dict[str, str]  # extra -D flags for the JVM
    # the project's Cassandra patches first on the classpath (True) or the release's classes alone
    # (False); None: ASGARD_CASSANDRA_PATCHES decides at each launch (0 is the release). Per node, so
    # that one process can run both side by side (tests/test_patches_differential.py)
    patches: bool | None
    placement: InstancePlan | None  # its slot of a NUMA plan (numa.plan_instances): binding, heap, memtable space
    numa_node: int | None
    netns: str | None              # a Linux network namespace it runs in
    # a member of a ring across hosts (cassandra.hosts): the seeds of several hosts, its datacenter and
    # rack (GossipingPropertyFileSnitch), tokens allocated for the keyspaces' replication factor,
    # bootstrap on join, and TLS on the ring's one CA (whose key stays in ring_ca, on the operator's machine)
    seeds: list[str] | None
    datacenter: str | None
    rack: str | None
    ring_ca: str | None
    replication_factor: int

    @property
    def conf_dir(self) -> Path:
        return self.workdir / "conf"

    @property
    def rackdc_file(self) -> Path:
        return self.conf_dir / "cassandra-rackdc.properties"

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.native_port}"
