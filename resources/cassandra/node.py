"""One Cassandra instance: instance ``i`` listens on 127.0.0.i with its own directory.

Start-up is trimmed for a local node: no gossip-settle wait, no ring delay, one precomputed
token, no bootstrap streaming, no heap pre-touch (neither ``AlwaysPreTouch`` nor Cassandra's
``mlockall``), no re-measuring of the memtable row overhead. A lone node stops by a flush of
every table and SIGKILL (:meth:`CassandraNode.stop`). Knob overrides persist in the instance's
``conf/overrides.yaml``, so ``restart`` keeps them until changed.

The class is put together from one module per job: ``node_command`` (the JVM command line),
``node_process`` (start and stop), ``node_security`` (TLS and the superuser) and ``node_records``
(launch record, placement, measured restart and live-change costs); this module keeps the
instance's configuration, its directory and introspection.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from ..numa import InstancePlan
from ..paths import run_dir
from ..process import ManagedServer
from .config import LOGBACK_XML, base_config, host_ring_settings, render_config, write_config
from .install import cassandra_version, install
from .node_command import (FAST_START_PROPERTIES, NATIVE_INLINE_PROPERTY, RING_SUPERUSER_SETUP_DELAY_MS,
                           RUN_IMMEDIATELY_PROPERTY, SMALL_HOST_CPUS, SMALL_HOST_SEP_STOP_CHECK_NS, NodeCommandLine)
from .node_process import NATIVE_TRANSPORT_HELD, NodeProcess, wait_port_closed
from .node_records import NodeRecords
from .node_security import SUPERUSER, NodeSecurity
from .nodetool import nodetool

# what other modules import from here; all but CassandraNode and JMX_BASE_PORT are defined in a job module
__all__ = ["CassandraNode", "JMX_BASE_PORT", "SUPERUSER", "FAST_START_PROPERTIES", "RING_SUPERUSER_SETUP_DELAY_MS",
           "SMALL_HOST_CPUS", "SMALL_HOST_SEP_STOP_CHECK_NS", "RUN_IMMEDIATELY_PROPERTY", "NATIVE_INLINE_PROPERTY",
           "NATIVE_TRANSPORT_HELD", "wait_port_closed"]

JMX_BASE_PORT = 7199


# one mixin per job, ManagedServer last: NodeProcess's start and stop wrap its own
class CassandraNode(NodeSecurity, NodeRecords, NodeCommandLine, NodeProcess, ManagedServer):
    """Instance ``index`` (1-based) of a local ring of ``nodes`` instances.

    Example::

        node = CassandraNode()          # 127.0.0.1:9042, JMX 7199
        node.start()                    # installs on first use; seconds to CQL-ready
        node.restart_with({"concurrent_writes": 64})
        node.settings(["concurrent_writes"])   # {'concurrent_writes': '64'}

        secure = CassandraNode(index=8, secure=True)   # TLS-only CQL, PasswordAuthenticator, JMX login
        secure.start()                                  # first start: makes its CA, certificate, superuser
        CassandraObjectStore(**secure.client_options())  # CA, user and password of the node
    """

    start_timeout = 240.0

    def __init__(
        self,
        index: int = 1,
        nodes: int = 1,
        heap: str | None = None,
        numa_node: int | None = None,
        version: str | None = None,
        native_port: int = 9042,
        workdir: Path | None = None,
        authenticate: bool = False,
        seed: str | None = None,
        ring_position: int = 1,
        fast_start: bool = True,
        secure: bool | None = None,
        system_properties: dict[str, str] | None = None,
        address: str | None = None,
        netns: str | None = None,
        placement: InstancePlan | None = None,
        patches: bool | None = None,
        seeds: list[str] | None = None,
        datacenter: str | None = None,
        rack: str | None = None,
        ring_ca: str | None = None,
        replication_factor: int = 3,
    ):
        version = version or cassandra_version()
        if not 1 <= index <= 254:
            raise ValueError(f"instance index must be 1..254 (address 127.0.0.index), got {index}")
        super().__init__(f"cassandra-{index}", workdir or run_dir("cassandra", f"node{index}"), numa_node, netns)
        self.index, self.nodes, self.version = index, nodes, version
        # extra -D flags for the JVM, e.g. a monitor's interval in a test
        self.system_properties = dict(system_properties or {})
        # the project's Cassandra patches first on the classpath (True) or the release's classes
        # alone (False); None: ASGARD_CASSANDRA_PATCHES decides at each launch (0 is the release).
        # Per node, so that one process can run both side by side (tests/test_patches_differential.py)
        self.patches = patches
        # its slot of a NUMA plan (asgard.resources.numa.plan_instances): binding, heap, memtable space
        self.placement = placement
        if placement is not None:
            if numa_node is not None:
                raise ValueError("give numa_node or placement, not both (a placement says where the instance runs)")
            if heap is not None and heap != placement.heap:
                raise ValueError(f"heap {heap} differs from the placement's {placement.heap}: plan with heap=")
            self.heap = placement.heap
        else:
            self.heap = heap or os.environ.get("ASGARD_CASSANDRA_HEAP", "2G")
        # another address than 127.0.0.index: a node in a network namespace (asgard.resources.network)
        self.address = address or f"127.0.0.{index}"
        self.native_port = native_port
        self.jmx_port = JMX_BASE_PORT + index - 1
        self.authenticate = authenticate
        # a standalone node seeds itself, so it never joins another local ring by accident;
        # CassandraCluster passes instance 1 as the seed of every member
        self.seed = seed or self.address
        self.ring_position = ring_position  # 1..nodes within its ring: picks the token
        # False gives a stock start (16 allocated tokens, gossip settle wait, ring delay): the
        # baseline `asgard bench startup` compares against
        self.fast_start = fast_start
        # secure persists in the node's directory: a later restart (a retune's, or `asgard cassandra
        # restart`) of a node made secure never brings it back up open. False turns it off.
        if secure is None:
            secure = self.secure_marker.exists()
        self.secure = secure
        # a member of a ring across hosts (asgard.resources.cassandra.hosts): the seeds of several
        # hosts, its datacenter and rack (GossipingPropertyFileSnitch), tokens allocated for the
        # keyspaces' replication factor, bootstrap on join, and TLS on the ring's one CA (whose key
        # stays in ring_ca, on the operator's machine)
        self.seeds = list(seeds) if seeds else None
        self.datacenter, self.rack = datacenter, rack
        self.ring_ca = str(ring_ca) if ring_ca else None
        self.replication_factor = replication_factor
        if self.ring_ca:
            self.secure = True

    # --- configuration ----------------------------------------------------------------
    @property
    def conf_dir(self) -> Path:
        return self.workdir / "conf"

    @property
    def overrides_file(self) -> Path:
        return self.conf_dir / "overrides.yaml"

    def overrides(self) -> dict[str, Any]:
        if self.overrides_file.exists():
            return yaml.safe_load(self.overrides_file.read_text()) or {}
        return {}

    def set_overrides(self, overrides: dict[str, Any], replace: bool = False) -> dict[str, Any]:
        """Merge (or with ``replace``, set) the knob overrides used from the next start."""
        merged = {} if replace else self.overrides()
        merged.update(overrides)
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.overrides_file.write_text(yaml.safe_dump(merged, sort_keys=True))
        return merged

    def config(self) -> dict[str, Any]:
        base = base_config(
            self.workdir, self.address, seeds=[self.seed], index=self.ring_position, nodes=self.nodes,
            native_port=self.native_port, authenticate=self.authenticate,
            tls=self.tls if self.secure else None,
        )
        if self.placement is not None:
            # the plan's memtable space, written out so it is on record (Cassandra's own default
            # is the same heap/4); a knob override still wins
            base["memtable_heap_space"] = f"{self.placement.memtable_mib}MiB"
        if not self.fast_start:
            base.update(num_tokens=16, allocate_tokens_for_local_replication_factor=3)
            for key in ("initial_token", "auto_bootstrap"):
                base.pop(key)
        if self.seeds:
            seeds = self.seeds
            if self.address in seeds[1:] and not (self.workdir / "data" / "system").exists():
                # a seed never bootstraps: a fresh member joining a running ring leaves itself out
                # of its seed list for its first start, so it streams the ranges its tokens take
                # (the roles the first seed made among them); from its next start on it is a seed
                seeds = [s for s in seeds if s != self.address]
            base = render_config(base, host_ring_settings(seeds, 7000, self.replication_factor,
                                                          self.tls if self.secure else None))
        return render_config(base, self.overrides())

    @property
    def rackdc_file(self) -> Path:
        return self.conf_dir / "cassandra-rackdc.properties"

    def prepare(self) -> None:
        import json

        install(self.version)
        self.launch_file.write_text(json.dumps(self.launch_record(), sort_keys=True))
        if self.placement is not None:
            self.placement_file.write_text(json.dumps(self.placement.to_dict()))
        else:
            self.placement_file.unlink(missing_ok=True)
        self._prepare_security()
        write_config(self.conf_dir / "cassandra.yaml", self.config())
        if self.datacenter:
            self.rackdc_file.write_text(f"dc={self.datacenter}\nrack={self.rack or 'rack1'}\nprefer_local=true\n")
        (self.conf_dir / "logback.xml").write_text(LOGBACK_XML)
        for sub in ("data", "commitlog", "hints", "saved_caches", "logs"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.native_port}"

    def restart_with(self, overrides: dict[str, Any], replace: bool = False, timeout: float | None = None) -> float:
        """Persist ``overrides`` and restart; returns seconds from stop to CQL-ready."""
        self.set_overrides(overrides, replace=replace)
        return self.restart(timeout)

    def wipe(self) -> None:
        """Stop and delete the instance's data (keeps its overrides)."""
        self.stop()
        for sub in ("data", "commitlog", "hints", "saved_caches"):
            shutil.rmtree(self.workdir / sub, ignore_errors=True)
        self._superuser_ready.unlink(missing_ok=True)

    # --- introspection ----------------------------------------------------------------
    def nodetool(self, *args: str, timeout: float = 120) -> str:
        credentials = (SUPERUSER, self.nodetool_password_file) if self.secure else None
        return nodetool(self.jmx_port, *args, version=self.version, timeout=timeout, credentials=credentials,
                        prefix=self.netns_prefix())

    def settings(self, names: list[str] | None = None) -> dict[str, str]:
        """Effective settings from ``system_views.settings`` (all, or just ``names``)."""
        cluster = self.cql_cluster()
        try:
            session = cluster.connect()
            rows = session.execute("SELECT name, value FROM system_views.settings")
            found = {r.name: r.value for r in rows}
        finally:
            cluster.shutdown()
        return found if names is None else {n: found.get(n) for n in names}

    def status(self) -> dict:
        info = super().status()
        # a running instance shows the plan it was launched with; a stopped one the plan it would get
        placement = self.launched_placement() if info["running"] else self.placement
        info.update(address=self.address, native_port=self.native_port, jmx_port=self.jmx_port,
                    heap=self.heap, numa_node=self.numa_node, overrides=self.overrides(), version=self.version,
                    secure=self.secure, patches=self.patches, placement=placement.to_dict() if placement else None,
                    placement_text=placement.describe() if placement else None,
                    placement_next=self.placement.describe() if self.placement else None)
        if self.secure:
            info.update(user=SUPERUSER, password_file=str(self.password_file), ca_file=str(self.tls.ca_cert))
        return info
