"""One Cassandra instance: instance ``i`` listens on 127.0.0.i with its own directory.

Start-up is trimmed for a local node: no gossip-settle wait, no ring delay, one precomputed
token, no bootstrap streaming, no heap pre-touch (neither ``AlwaysPreTouch`` nor Cassandra's
``mlockall``), no re-measuring of the memtable row overhead. A lone node stops by a flush of
every table and SIGKILL (:meth:`CassandraNode.stop`). Knob overrides persist in the instance's
``conf/overrides.yaml``, so ``restart`` keeps them until changed.

:class:`CassandraNode` is a :class:`~asgard.resources.process.ManagedServer` and nothing else. Its
facts are one frozen :class:`~asgard.resources.cassandra.node_spec.NodeSpec` (``node.spec``), and
each job is an object built from that spec alone: ``node.command_line`` (``node_command``: the JVM
command line and the class list a first start records), ``node.security`` (``node_security``: TLS
and the superuser) and ``node.records`` (``node_records``: launch record, placement, measured
restart and live-change costs). The node keeps its configuration, its directory, its process
(start, stop, restart, with ``node_process``'s helpers) and introspection, and delegates the rest
of its public API to those objects.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from ..numa import Binding, InstancePlan
from ..paths import run_dir
from ..process import ManagedServer, ServerError, port_open
from .config import LOGBACK_XML, base_config, host_ring_settings, render_config, write_config
from .install import cassandra_version, install
from .node_command import (FAST_START_PROPERTIES, NATIVE_INLINE_PROPERTY, RING_SUPERUSER_SETUP_DELAY_MS,
                           RUN_IMMEDIATELY_PROPERTY, SMALL_HOST_CPUS, SMALL_HOST_SEP_STOP_CHECK_NS, NodeCommandLine)
from .node_process import NATIVE_TRANSPORT_HELD, flush_for_kill, log_has, log_size, wait_port_closed
from .node_records import NodeRecords
from .node_security import SUPERUSER, NodeSecurity, secure_marker
from .node_spec import NodeSpec
from .nodetool import nodetool
from .tls import NodeTLS

#: a member's shadow round heard from no seed in time: a seed starved of CPU for seconds (seen in
#: CI on this 2-core machine, "local pause of 8 s" in the seed's log, at a ring's start and at a
#: killed member's restart); Cassandra's remedy is to start the member again
NO_GOSSIP_PEERS = "Unable to gossip with any peers"

#: ring_delay_ms of that second start: it bounds the shadow round's wait for a seed (a fast start's
#: 0 gives the seed about 1 s, and a second start at 0 failed too in CI at load 10 on 2 cores); the
#: round ends at the seed's first answer (assumption: twice the 8 s pause seen)
SECOND_START_RING_DELAY_MS = 16_000

# what other modules import from here; all but CassandraNode and JMX_BASE_PORT are defined in a job module
__all__ = ["CassandraNode", "JMX_BASE_PORT", "SUPERUSER", "FAST_START_PROPERTIES", "RING_SUPERUSER_SETUP_DELAY_MS",
           "SMALL_HOST_CPUS", "SMALL_HOST_SEP_STOP_CHECK_NS", "RUN_IMMEDIATELY_PROPERTY", "NATIVE_INLINE_PROPERTY",
           "NATIVE_TRANSPORT_HELD", "wait_port_closed"]

JMX_BASE_PORT = 7199


def _fact(name: str) -> property:
    """A read-only attribute of the node read from its spec, so the node and its jobs never disagree."""
    return property(lambda self: getattr(self.spec, name), doc=f"``spec.{name}`` (:class:`NodeSpec`).")


class CassandraNode(ManagedServer):
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
        if placement is not None:
            if numa_node is not None:
                raise ValueError("give numa_node or placement, not both (a placement says where the instance runs)")
            if heap is not None and heap != placement.heap:
                raise ValueError(f"heap {heap} differs from the placement's {placement.heap}: plan with heap=")
            heap = placement.heap
        else:
            heap = heap or os.environ.get("ASGARD_CASSANDRA_HEAP", "2G")
        # secure persists in the node's directory: a later restart (a retune's, or `asgard cassandra
        # restart`) of a node made secure never brings it back up open. False turns it off; a ring
        # across hosts (ring_ca: TLS on the ring's one CA) is always secure.
        if secure is None:
            secure = secure_marker(self.workdir).exists()
        address = address or f"127.0.0.{index}"
        self.spec = NodeSpec(
            name=self.name, index=index, nodes=nodes, version=version, workdir=self.workdir, address=address,
            native_port=native_port, jmx_port=JMX_BASE_PORT + index - 1, heap=heap, authenticate=authenticate,
            # a standalone node seeds itself, so it never joins another local ring by accident;
            # CassandraCluster passes instance 1 as the seed of every member
            seed=seed or address, ring_position=ring_position, fast_start=fast_start,
            secure=True if ring_ca else secure, system_properties=dict(system_properties or {}), patches=patches,
            placement=placement, numa_node=numa_node, netns=netns, seeds=list(seeds) if seeds else None,
            datacenter=datacenter, rack=rack, ring_ca=str(ring_ca) if ring_ca else None,
            replication_factor=replication_factor)
        # one object per job, each given the spec (and the security's JMX flags) and nothing of the node
        self.security = NodeSecurity(self.spec)
        self.records = NodeRecords(self.spec, kind=type(self).__name__)
        self.command_line = NodeCommandLine(self.spec, jmx_flags=self.security.jmx_flags())
        #: how the last stop() went: "flush+kill", "sigterm" or None (nothing was running)
        self.last_stop: str | None = None
        # where system.log stood when a start with the CQL port held closed began (else None)
        self._clients_held_since: int | None = None

    # --- the node's facts (NodeSpec), read-only ------------------------------------------
    index = _fact("index")
    nodes = _fact("nodes")
    version = _fact("version")
    address = _fact("address")
    native_port = _fact("native_port")
    jmx_port = _fact("jmx_port")
    heap = _fact("heap")
    authenticate = _fact("authenticate")
    seed = _fact("seed")
    ring_position = _fact("ring_position")
    fast_start = _fact("fast_start")
    secure = _fact("secure")
    system_properties = _fact("system_properties")
    patches = _fact("patches")
    placement = _fact("placement")
    seeds = _fact("seeds")
    datacenter = _fact("datacenter")
    rack = _fact("rack")
    ring_ca = _fact("ring_ca")
    replication_factor = _fact("replication_factor")

    # --- configuration ----------------------------------------------------------------
    @property
    def conf_dir(self) -> Path:
        return self.spec.conf_dir

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
        return self.spec.rackdc_file

    def prepare(self) -> None:
        install(self.version)
        self.records.save_launch()
        self.security.prepare()
        write_config(self.conf_dir / "cassandra.yaml", self.config())
        if self.datacenter:
            self.rackdc_file.write_text(f"dc={self.datacenter}\nrack={self.rack or 'rack1'}\nprefer_local=true\n")
        (self.conf_dir / "logback.xml").write_text(LOGBACK_XML)
        for sub in ("data", "commitlog", "hints", "saved_caches", "logs"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)

    @property
    def endpoint(self) -> str:
        return self.spec.endpoint

    def restart_with(self, overrides: dict[str, Any], replace: bool = False, timeout: float | None = None) -> float:
        """Persist ``overrides`` and restart; returns seconds from stop to CQL-ready."""
        self.set_overrides(overrides, replace=replace)
        return self.restart(timeout)

    def wipe(self) -> None:
        """Stop and delete the instance's data (keeps its overrides)."""
        self.stop()
        for sub in ("data", "commitlog", "hints", "saved_caches"):
            shutil.rmtree(self.workdir / sub, ignore_errors=True)
        self.security.superuser_ready.unlink(missing_ok=True)

    # --- the process: start, readiness, restart, stop ------------------------------------
    def command(self) -> list[str]:
        return self.command_line.command(clients_held=self._clients_held_since is not None)

    def exec_wrappers(self) -> list[str]:
        return self.command_line.exec_wrappers()

    def binding(self) -> Binding | None:
        if self.placement is not None:
            return self.placement.binding
        return super().binding()

    def start(self, timeout: float | None = None, before_clients: Callable[[], Any] | None = None) -> float:
        """Start (or find running) and wait until CQL answers; seconds spent.

        ``before_clients``: start with the CQL port closed (``cassandra.start_native_transport=false``),
        call it once the node has finished starting, then open the port (``nodetool enablebinary``).
        A ring member restarted under load uses it to wait until it sees its peers up: until then
        it would refuse QUORUM as Unavailable, and a client that falls to ONE would read its own
        stale replica, which has not yet received the writes it missed while down (RF 2 rolling
        restart, ``CassandraCluster.rolling_restart``)."""
        if before_clients is None or self.is_running():
            seconds = self._launch(timeout)
        else:
            t0 = time.monotonic()
            self._clients_held_since = log_size(self.system_log)
            try:
                self._launch(timeout)
            finally:
                self._clients_held_since = None
            try:
                before_clients()
            except Exception as exc:
                # clients stay out: a member that cannot see its peers would serve a stale replica
                raise ServerError(
                    f"{self.name} started with its CQL port closed, and it stays closed: {exc}. Once that is "
                    f"fixed, let clients in with `nodetool -p {self.jmx_port} enablebinary`, or restart it.") from exc
            self.nodetool("enablebinary")
            self.wait_ready(timeout)
            seconds = time.monotonic() - t0
        self.command_line.record_row_overhead()
        self.command_line.publish_classlist()
        if self.secure:
            t0 = time.monotonic()
            self.security.ensure_superuser()
            seconds += time.monotonic() - t0
        return seconds

    def _launch(self, timeout: float | None) -> float:
        """Seconds the process took to start, started once more, with a longer shadow round, where
        its first shadow round found no seed (a member of a ring; a seed of its own never asks)."""
        try:
            return super().start(timeout)
        except ServerError as exc:
            if NO_GOSSIP_PEERS not in str(exc):
                raise
        delay = int(self.system_properties.get("cassandra.ring_delay_ms", 0))
        # the node's launch properties, so its later restarts keep the same window
        self.system_properties["cassandra.ring_delay_ms"] = str(max(delay, SECOND_START_RING_DELAY_MS))
        return super().start(timeout)

    @property
    def system_log(self) -> Path:
        return self.workdir / "logs" / "system.log"

    def is_ready(self) -> bool:
        if self._clients_held_since is not None:
            # started with the CQL port closed: ready once it says it left the port closed, the
            # last step of a start
            return log_has(self.system_log, self._clients_held_since, NATIVE_TRANSPORT_HELD)
        return port_open(self.address, self.native_port)

    def restart(self, timeout: float | None = None, before_clients: Callable[[], Any] | None = None) -> float:
        """Stop and start; the stop-to-ready seconds are recorded in ``restarts.jsonl`` (the
        cost-benefit analysis charges the recent measured value, not a constant), with the stop's
        share and how it stopped. ``before_clients`` as for :meth:`start` (its time counts: the
        node is not ready for clients before it returns)."""
        t0 = time.monotonic()
        self.stop()
        stop_seconds = time.monotonic() - t0
        self.start(timeout, before_clients=before_clients)
        seconds = time.monotonic() - t0
        self.record_restart(seconds, stop_seconds=stop_seconds, stopped_by=self.last_stop)
        return seconds

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the instance, keeping its data.

        A lone node (``nodes == 1``) is readied over JMX by the project's ``AsgardStop`` tool (CQL
        server stopped: no request is acknowledged after that; every table of every keyspace
        flushed, ``durable_writes=false`` ones included) and then SIGKILLed: 1.0-1.2 s where the
        SIGTERM path (Cassandra's drain) takes 2.6-2.9 s, 2.1 s of which is a fixed quiet period
        of its inter-node messaging shutdown, of no use to a node without peers. What a kill
        skips is crash-safe by design (an unfinished compaction's transaction log, the commit
        log of the system tables after the flush) and is replayed or cleaned at the next start.

        A ring member, a stock-start node, or a lone node the tool cannot reach (no compiler
        at install, JMX down) stops by SIGTERM: Cassandra drains (announces the shutdown to its
        peers, flushes, writes its hints) and exits."""
        self.last_stop = None
        if not self.is_running():
            return super().stop(timeout)
        if self.nodes == 1 and self.fast_start and flush_for_kill(
                self.version, self.jmx_port, self.log_file, prefix=self.netns_prefix(),
                password_file=self.nodetool_password_file if self.secure else None):
            self.last_stop = "flush+kill"
            return self.kill()
        self.last_stop = "sigterm"
        return super().stop(timeout)

    # No `nodetool drain` in stop(): a lone node flushes and is killed (above), a ring member's
    # shutdown hook drains. A ring's rolling restart drains first (CassandraCluster.rolling_restart),
    # so that clients have moved to the other replicas before the stop-to-ready clock starts.

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

    # --- the jobs' public API, kept on the node (callers need not know which object does it) ----------
    @property
    def row_overhead_file(self) -> Path:
        return self.command_line.row_overhead_file

    @property
    def secure_marker(self) -> Path:
        return self.security.secure_marker

    @property
    def tls(self) -> NodeTLS:
        return self.security.tls

    @property
    def password_file(self) -> Path:
        """The generated superuser's password (mode 0600); the user is :data:`SUPERUSER`."""
        return self.security.password_file

    @property
    def jmx_password_file(self) -> Path:
        return self.security.jmx_password_file

    @property
    def nodetool_password_file(self) -> Path:
        return self.security.nodetool_password_file

    def superuser_password(self) -> str:
        return self.security.superuser_password()

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~asgard.resources.stores.cql.CassandraObjectStore` that reach
        this node: its address and port and, for a secure node, its CA and superuser."""
        return self.security.client_options()

    def cql_cluster(self, username: str | None = None, password: str | None = None, timeout: float = 10):
        """A driver ``Cluster`` for this node alone (admin work: settings, ALTER TABLE): over TLS
        and logged in as :data:`SUPERUSER` on a secure node, unless ``username`` is given."""
        return self.security.cql_cluster(username, password, timeout)

    @property
    def placement_file(self) -> Path:
        return self.records.placement_file

    def launched_placement(self) -> InstancePlan | None:
        """The plan the running instance was launched with (None: launched without one)."""
        return self.records.launched_placement()

    @property
    def launch_file(self) -> Path:
        return self.records.launch_file

    def launch_record(self) -> dict[str, Any]:
        return self.records.launch_record()

    @classmethod
    def launched(cls, index: int, workdir: Path | None = None) -> "CassandraNode":
        """Instance ``index`` as it was last started (its ``launch.json`` and NUMA placement), so that
        a restart from another process (the retune job) keeps its ring, token, heap and pinning.

        An instance started before launch records existed is taken as a standalone node (what
        ``CassandraNode(index)`` is); :class:`~asgard.resources.cassandra.cluster.RingMemberError` is raised
        by the ring discovery when such an instance is one of several members."""
        import json

        probe = cls(index=index, workdir=workdir)
        try:
            record = json.loads(probe.launch_file.read_text())
        except FileNotFoundError:
            return probe
        kind = record.pop("kind", cls.__name__)
        if kind != cls.__name__:  # e.g. the tuner's TunerNode: another cluster name, its own tooling
            raise ServerError(f"{probe.name} was launched as a {kind}, not a {cls.__name__}: restart it with the "
                              "tooling that started it (a TunerNode: `asgard tune`)")
        placement = probe.launched_placement()
        record.pop("index", None)
        if placement is not None:  # heap and NUMA node come with the placement
            record.pop("heap", None)
            record.pop("numa_node", None)
        return cls(index=index, workdir=workdir, placement=placement, **record)

    @property
    def restart_log(self) -> Path:
        return self.records.restart_log

    def record_restart(self, seconds: float, **detail: Any) -> None:
        self.records.record_restart(seconds, **detail)

    def restart_seconds(self, recent: int = 5) -> float | None:
        """Median stop-to-ready seconds of this instance's last ``recent`` restarts (None: never
        restarted by the project)."""
        return self.records.restart_seconds(recent)

    @property
    def live_change_log(self) -> Path:
        return self.records.live_change_log

    def record_live_change(self, seconds: float, slowdown: float | None) -> None:
        """A live change (nodetool, ALTER TABLE/KEYSPACE) applied to this instance: how long it
        took, and the fraction of the store's throughput lost meanwhile (None: not probed)."""
        self.records.record_live_change(seconds, slowdown)

    def live_change_cost(self, recent: int = 5) -> tuple[float | None, float | None]:
        """(seconds, slowdown): medians over this instance's last ``recent`` measured live changes."""
        return self.records.live_change_cost(recent)
