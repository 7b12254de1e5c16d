"""One Cassandra instance: instance ``i`` listens on 127.0.0.i with its own directory.

Start-up is trimmed for a local node: no gossip-settle wait, no ring delay, one precomputed
token, no bootstrap streaming, no heap pre-touch (neither ``AlwaysPreTouch`` nor Cassandra's
``mlockall``), no re-measuring of the memtable row overhead. A lone node stops by a flush of
every table and SIGKILL (:meth:`CassandraNode.stop`). Knob overrides persist in the instance's
``conf/overrides.yaml``, so ``restart`` keeps them until changed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from ..numa import Binding, InstancePlan
from ..paths import run_dir, write_private
from ..process import ManagedServer, ServerError, port_open
from .config import LOGBACK_XML, base_config, host_ring_settings, render_config, write_config
from .install import CASSANDRA_VERSION, cds_archive, cds_classlist, install, server_classpath, tools_dir
from .jvm import GC_FLAGS, JVM17_FLAGS
from .nodetool import nodetool
from .tls import NodeTLS, ensure_node_certificate, issue_node_certificate

# What a local, freshly created node does not need to wait for.
FAST_START_PROPERTIES = [
    "-Dcassandra.skip_wait_for_gossip_to_settle=0",
    "-Dcassandra.ring_delay_ms=0",
    "-Dcassandra.skip_schema_check=true",
    "-Dcassandra.migration_task_wait_in_seconds=0",
]

# The default role is set up by a task that reschedules itself after superuser_setup_delay_ms
# while "some nodes were not ready" (CassandraRoleManager.scheduleSetupTask). At 0 a ring member
# whose peers were not up yet spun on it: one instance wrote 32 million such lines (5 GB of
# server.log) and kept a core busy. A lone instance is ready at once, so 0 costs it nothing.
RING_SUPERUSER_SETUP_DELAY_MS = 500

# Idle workers of Cassandra's shared request pool sleep-spin, waking every 10 us, for up to 10 ms
# before parking: a client that sends one request at a time keeps one spinning between requests.
# With the project's patch (patches/5.0.9/sep-worker-spin.patch) a small host parks them after
# 50 us of spinning instead. Two instances side by side, 12 rounds alternating
# (docs/results/issue13-sep-spin.txt; A/A in brackets): JVM context switches per 10 KiB put+get
# 15.2 vs 28.3, server CPU per op 0.83x [0.99], ops/s 1.18x [1.01]; 64 MiB reads 1.23x MB/s
# [1.03], server CPU per GB 0.65x [0.99]. Hosts above SMALL_HOST_CPUS keep upstream's spin, which
# trades CPU for latency under many concurrent clients. ASGARD_CASSANDRA_SEP_STOP_CHECK_NS sets it
# for any host ("" for upstream's).
SMALL_HOST_CPUS = 4
SMALL_HOST_SEP_STOP_CHECK_NS = 50_000

# Where a client request runs (patches sep-run-immediately and native-inline). Upstream, a
# coordinator's own "immediate" local read or mutation is queued to a pool worker whenever no
# other task is queued (SEPExecutor.takeWorkPermit(false) wants a queued task; CASSANDRA-21429,
# fixed on trunk), and every request is handed from the connection's event loop to the request
# pool and back: four wake-ups per request. Two instances side by side, 10 rounds alternating
# (docs/results/issue13-run-to-completion.txt), both fixes against neither: JVM context switches per
# 10 KiB put+get 2.3 vs 13.9, ops/s 1.48x, server CPU per op 0.71x; 64 MiB reads 1.12x MB/s,
# server CPU per GB 0.68x. The first fix is a bug fix and always on. Running requests on the
# event loop holds up that loop's other connections while one waits (for a remote replica,
# a full memtable); a small host has few of either, so it is on up to SMALL_HOST_CPUS, and
# ASGARD_CASSANDRA_NATIVE_INLINE=1 or 0 sets it on any host.
RUN_IMMEDIATELY_PROPERTY = "-Dasgard.sep_run_immediately=true"
NATIVE_INLINE_PROPERTY = "-Dasgard.native_inline=true"

# A stop announces the shutdown to the peers by gossip, then sleeps shutdown_announce_in_ms
# (2000 by default) so the message gets there before messaging closes. A lone instance has no
# one to tell; on loopback a peer gets it in well under 200 ms. Stop at 127.0.0.6 on a loaded
# machine, interleaved: 5.5 s with the default, 2.6-3.4 s with 0. (A lone node no longer stops by
# SIGTERM at all: CassandraNode.stop.)
#
# Where a restart of a lone node went (127.0.0.24, 1 GiB heap, 2 shared cores, system.log and
# wall clock; docs/results/issue10-restart-breakdown.txt): the SIGTERM stop took 2.6-2.9 s, 2.1 s of it the
# drain's "Waiting for messaging service to quiesce" (netty's fixed 2 s quiet period on the
# inbound messaging executor, also in `nodetool drain`), the flushes 0.4 s. Start: JVM to the
# first log line 0.5-1 s, mlockall of the heap 0.3-1.5 s, the memtable row-overhead estimate
# about 1 s, system keyspaces and commit log 1.5 s, gossip and CQL 0.5 s.
JMX_BASE_PORT = 7199
# the superuser a secure node is given in place of the stock cassandra/cassandra (which is dropped)
SUPERUSER = "asgard_admin"


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
        version: str = CASSANDRA_VERSION,
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

    # --- security (secure=True) ------------------------------------------------------------
    @property
    def secure_marker(self) -> Path:
        return self.conf_dir / "secure"

    @property
    def tls(self) -> NodeTLS:
        return NodeTLS(self.conf_dir / "tls")

    @property
    def password_file(self) -> Path:
        """The generated superuser's password (mode 0600); the user is :data:`SUPERUSER`."""
        return self.workdir / "superuser.password"

    @property
    def jmx_password_file(self) -> Path:
        """``<user> <password>`` for the JMX server (the JDK may rewrite it with hashes)."""
        return self.conf_dir / "jmxremote.password"

    @property
    def nodetool_password_file(self) -> Path:
        """``<user> <password>`` for ``nodetool -pwf`` (kept apart: the server's copy gets hashed)."""
        return self.conf_dir / "nodetool.password"

    @property
    def _superuser_ready(self) -> Path:
        return self.workdir / "superuser.ready"  # removed by wipe(): fresh data has only the stock role

    def superuser_password(self) -> str:
        """The generated superuser's password, made (random, 0600 file) on first use; on a ring across
        hosts, the ring's one (kept beside its CA) copied to the member."""
        if self.ring_ca and not self.password_file.exists():
            shared = Path(self.ring_ca) / "superuser.password"
            if not shared.exists():
                import secrets

                write_private(shared, secrets.token_urlsafe(24) + "\n")
            write_private(self.password_file, shared.read_text())
        try:
            return self.password_file.read_text().strip()
        except FileNotFoundError:
            import secrets

            password = secrets.token_urlsafe(24)  # URL-safe: no quoting issue in CQL or a shell
            write_private(self.password_file, password + "\n")
            return password

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~asgard.resources.stores.cql.CassandraObjectStore` that reach
        this node: its address and port and, for a secure node, its CA and superuser."""
        options: dict[str, Any] = {"contact_points": [self.address], "port": self.native_port}
        if self.secure:
            options.update(username=SUPERUSER, password=self.superuser_password(),
                           ssl_ca_file=str(self.tls.ca_cert), ssl_verify_hostname=True)
        return options

    def _prepare_security(self) -> None:
        if not self.secure:
            self.secure_marker.unlink(missing_ok=True)
            return
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.secure_marker.write_text("TLS-only CQL, PasswordAuthenticator, JMX authentication\n")
        if self.ring_ca:
            issue_node_certificate(Path(self.ring_ca), self.tls.directory, self.address)
        else:
            ensure_node_certificate(self.tls.directory, self.address)
        line = f"{SUPERUSER} {self.superuser_password()}\n"
        write_private(self.jmx_password_file, line)
        write_private(self.nodetool_password_file, line)

    def _jmx_flags(self) -> list[str]:
        if not self.secure:
            return []
        # Cassandra 5.0 reads these at start; JMX stays bound to loopback (jmx.local.port)
        # the add-exports line is Cassandra's conf/jvm17-server.options': its JMX authenticator wraps the JDK's
        return ["--add-exports", "java.management/com.sun.jmx.remote.security=ALL-UNNAMED",
                "-Dcom.sun.management.jmxremote.authenticate=true",
                f"-Dcom.sun.management.jmxremote.password.file={self.jmx_password_file}"]

    def cql_cluster(self, username: str | None = None, password: str | None = None, timeout: float = 10):
        """A driver ``Cluster`` for this node alone (admin work: settings, ALTER TABLE): over TLS
        and logged in as :data:`SUPERUSER` on a secure node, unless ``username`` is given."""
        from ..stores.cql import build_cluster

        if self.secure and username is None:
            username, password = SUPERUSER, self.superuser_password()
        return build_cluster([self.address], self.native_port, username=username, password=password,
                             connect_timeout=timeout, admin=True,
                             tls=(str(self.tls.ca_cert), None, None, True) if self.secure else None)

    def _ensure_superuser(self, timeout: float = 120) -> None:
        """Give a fresh secure node its own superuser (random password, in :attr:`password_file`)
        and drop the stock ``cassandra``/``cassandra`` one, which every scanner tries first."""
        if self._superuser_ready.exists():
            return
        from cassandra import AuthenticationFailed
        from cassandra.cluster import NoHostAvailable

        def login(user: str, password: str):
            cluster = self.cql_cluster(user, password)
            try:
                return cluster.connect()
            except BaseException:
                cluster.shutdown()
                raise

        def auth_failed(exc: NoHostAvailable) -> bool:
            return any(isinstance(e, AuthenticationFailed) for e in (exc.errors or {}).values())

        password = self.superuser_password()
        deadline = time.monotonic() + timeout
        founder = not self.seeds or self.address == self.seeds[0]
        while True:
            try:
                session = login(SUPERUSER, password)  # done before (the marker went with a wipe of data/)
                break
            except NoHostAvailable as exc:
                if (not auth_failed(exc) or not founder) and time.monotonic() < deadline:
                    # a member joining a ring logs in as the role its first seed made, once the
                    # ring's system_auth answers; it never makes one of its own
                    time.sleep(0.5)
                    continue
                if not auth_failed(exc) or not founder:
                    raise ServerError(f"{self.name}: no CQL login as {SUPERUSER} over TLS within {timeout:.0f}s: "
                                      f"{exc}") from exc
            try:
                # the stock role appears shortly after CQL opens (superuser_setup_delay_ms)
                stock = login("cassandra", "cassandra")
            except NoHostAvailable as exc:
                if time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                raise ServerError(
                    f"{self.name}: neither {SUPERUSER} (password in {self.password_file}) nor the stock superuser "
                    f"can log in ({exc}). If the password file was replaced, restore it, or wipe the node's data "
                    "(`asgard cassandra down`, delete its data/ directory) to set it up again.") from exc
            try:
                stock.execute(f"CREATE ROLE IF NOT EXISTS {SUPERUSER} WITH SUPERUSER = true AND LOGIN = true "
                              "AND PASSWORD = %s", (password,))
            finally:
                stock.cluster.shutdown()
        try:
            # a superuser cannot drop the role it is logged in as: done as the new one
            session.execute("DROP ROLE IF EXISTS cassandra")
        finally:
            session.cluster.shutdown()
        self._superuser_ready.parent.mkdir(parents=True, exist_ok=True)
        self._superuser_ready.write_text(f"{SUPERUSER}\n")

    def start(self, timeout: float | None = None, before_clients: Callable[[], Any] | None = None) -> float:
        """Start (or find running) and wait until CQL answers; seconds spent.

        ``before_clients``: start with the CQL port closed (``cassandra.start_native_transport=false``),
        call it once the node has finished starting, then open the port (``nodetool enablebinary``).
        A ring member restarted under load uses it to wait until it sees its peers up: until then
        it would refuse QUORUM as Unavailable, and a client that falls to ONE would read its own
        stale replica, which has not yet received the writes it missed while down (RF 2 rolling
        restart, ``CassandraCluster.rolling_restart``)."""
        if before_clients is None or self.is_running():
            seconds = super().start(timeout)
        else:
            t0 = time.monotonic()
            self._clients_held_since = _log_size(self.system_log)
            try:
                super().start(timeout)
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
        self._record_row_overhead()
        self._publish_classlist()
        if self.secure:
            t0 = time.monotonic()
            self._ensure_superuser()
            seconds += time.monotonic() - t0
        return seconds

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

    # --- placement (NUMA plan) -------------------------------------------------------------
    @property
    def placement_file(self) -> Path:
        return self.workdir / "placement.json"

    def binding(self) -> Binding | None:
        if self.placement is not None:
            return self.placement.binding
        return super().binding()

    def launched_placement(self) -> InstancePlan | None:
        """The plan the running instance was launched with (None: launched without one)."""
        import json

        try:
            return InstancePlan.from_dict(json.loads(self.placement_file.read_text()))
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    # --- launch record: what a later process needs to restart this instance as it runs ---------
    @property
    def launch_file(self) -> Path:
        return self.workdir / "launch.json"

    def launch_record(self) -> dict[str, Any]:
        """The constructor arguments that shape the instance's configuration: a ring member
        rebuilt with the defaults would render another token and seed, and restart outside its ring."""
        record = {"kind": type(self).__name__, "index": self.index, "nodes": self.nodes, "seed": self.seed,
                  "ring_position": self.ring_position, "heap": self.heap, "numa_node": self.numa_node,
                  "version": self.version, "native_port": self.native_port, "authenticate": self.authenticate,
                  "fast_start": self.fast_start, "system_properties": self.system_properties, "patches": self.patches}
        if self.seeds:  # a member of a ring across hosts: where and in which ring it runs
            record.update(seeds=self.seeds, datacenter=self.datacenter, rack=self.rack, ring_ca=self.ring_ca,
                          replication_factor=self.replication_factor, address=self.address, netns=self.netns)
        return record

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

    # --- process ----------------------------------------------------------------------
    def exec_wrappers(self) -> list[str]:
        """``setpriv`` without CAP_IPC_LOCK, for a server run by root: Cassandra mlockall()s its
        memory at start, which for root (the capability overrides RLIMIT_MEMLOCK) faults in and
        pins the whole heap first: 0.3-1.5 s of a 1 GiB heap's start on this machine, more for
        larger heaps, and a pre-touch the project leaves out by choice (there is no swap to pin
        against here). Without the capability Cassandra logs "Unable to lock JVM memory (ENOMEM)"
        and goes on, as it does for any unprivileged user."""
        setpriv = shutil.which("setpriv")
        if setpriv is None or not self.fast_start or not _has_ipc_lock():
            return []
        return [setpriv, "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"]

    @property
    def row_overhead_file(self) -> Path:
        return self.workdir / "row_overhead.json"

    def _row_overhead_flag(self) -> list[str]:
        """Cassandra estimates the SkipListMemtable row overhead at every start by building and
        measuring 100,000 rows (about 1 CPU-second here); the figure depends on the JVM and its
        heap only, so the instance's first start measures it and later starts pass it back."""
        import json

        try:
            record = json.loads(self.row_overhead_file.read_text())
        except (FileNotFoundError, ValueError):
            return []
        if not self.fast_start or record.get("heap") != self.heap or record.get("java") != _java_version():
            return []
        return [f"-Dcassandra.memtable.row_overhead_size={int(record['row_overhead'])}"]

    def _record_row_overhead(self) -> None:
        import json
        import re

        if self._row_overhead_flag() or not self.fast_start:
            return
        try:
            text = (self.workdir / "logs" / "system.log").read_text(errors="replace")
        except FileNotFoundError:
            return
        found = re.findall(r"Estimated SkipListMemtable row overhead: (\d+)", text)
        if found:
            self.row_overhead_file.write_text(json.dumps(
                {"row_overhead": int(found[-1]), "heap": self.heap, "java": _java_version()}))

    def _cds_flags(self) -> list[str]:
        """The install step's AppCDS archive when there is one (``install.build_cds_archive``);
        until then the first start records the class list it is built from. A stock start (the
        bench's baseline) goes without."""
        self._classlist_partial = None
        if not self.fast_start:
            return []
        archive = cds_archive(self.version, self.patches)
        if archive.exists():
            return [f"-XX:SharedArchiveFile={archive}"]
        classlist = cds_classlist(self.version, self.patches)
        if classlist.exists():
            return []  # the archive is being built
        classlist.parent.mkdir(parents=True, exist_ok=True)
        self._classlist_partial = classlist.with_name(f"{classlist.name}.{self.index}.{os.getpid()}.partial")
        return [f"-XX:DumpLoadedClassList={self._classlist_partial}"]

    def _publish_classlist(self) -> None:
        """Once a start that records the class list is ready (the list then holds what a start
        loads), publish it and build the archive in the background, off every start's clock."""
        import sys

        partial = getattr(self, "_classlist_partial", None)
        if partial is None or not partial.exists():
            return
        self._classlist_partial = None
        classlist = cds_classlist(self.version, self.patches)
        lines = partial.read_text(errors="replace").splitlines(keepends=True)
        partial.unlink()  # the JVM goes on appending to its open file, now nameless
        staging = partial.with_suffix(".ready")
        staging.write_text("".join(lines[:-1]))  # the last line may be half written
        staging.rename(classlist)
        root = Path(__file__).resolve().parents[2]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
        with open(classlist.parent / "build.log", "ab") as log:
            # the archive of this node's classpath: with the patches or without (argv[2]: 1, 0, or "" for the env's)
            subprocess.Popen([sys.executable, "-c", "import sys; from asgard.resources.cassandra.install import "
                              "build_cds_archive; print(build_cds_archive(sys.argv[1], "
                              "{'1': True, '0': False}.get(sys.argv[2])))", self.version,
                              {True: "1", False: "0"}.get(self.patches, "")],
                             cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)

    def _sep_spin_flags(self) -> list[str]:
        """How long the request pool's idle workers spin (SMALL_HOST_SEP_STOP_CHECK_NS)."""
        if "asgard.sep_stop_check_ns" in self.system_properties:
            return []
        value = os.environ.get("ASGARD_CASSANDRA_SEP_STOP_CHECK_NS")
        if value is None:
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            value = str(SMALL_HOST_SEP_STOP_CHECK_NS) if cpus <= SMALL_HOST_CPUS else ""
        if not value.strip():
            return []
        try:
            return [f"-Dasgard.sep_stop_check_ns={int(value)}"]
        except ValueError:
            raise ValueError(f"ASGARD_CASSANDRA_SEP_STOP_CHECK_NS must be nanoseconds (an integer), or empty for "
                             f"Cassandra's own spin; got {value!r}") from None

    def _request_thread_flags(self) -> list[str]:
        """Which thread runs a client request (RUN_IMMEDIATELY_PROPERTY, NATIVE_INLINE_PROPERTY)."""
        flags = [] if "asgard.sep_run_immediately" in self.system_properties else [RUN_IMMEDIATELY_PROPERTY]
        if "asgard.native_inline" in self.system_properties:
            return flags
        value = os.environ.get("ASGARD_CASSANDRA_NATIVE_INLINE", "").strip()
        if value not in ("", "0", "1"):
            raise ValueError(f"ASGARD_CASSANDRA_NATIVE_INLINE must be 1 (requests run on their connection's event "
                             f"loop), 0 (on Cassandra's request pool) or unset (1 on hosts of up to "
                             f"{SMALL_HOST_CPUS} CPUs); got {value!r}")
        if not value:
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            value = "1" if cpus <= SMALL_HOST_CPUS else "0"
        return flags + ([NATIVE_INLINE_PROPERTY] if value == "1" else [])

    def command(self) -> list[str]:
        lib = install(self.version)
        java = shutil.which("java") or "java"
        jamm = next(lib.glob("jamm-*.jar"), None)
        return [
            *self.exec_wrappers(),
            java,
            *self._cds_flags(),
            f"-Xms{self.heap}", f"-Xmx{self.heap}", "-Xss256k",
            *GC_FLAGS,
            "-XX:+UseNUMA",  # seed 002: NUMA-aware allocation, with numactl binding per instance
            "-XX:+PerfDisableSharedMem", "-XX:+ExitOnOutOfMemoryError",
            "-XX:StringTableSize=1000003", "-Djava.net.preferIPv4Stack=true",
            *JVM17_FLAGS,
            *([f"-javaagent:{jamm}"] if jamm else []),
            *(FAST_START_PROPERTIES if self.fast_start else []),
            *([f"-Dcassandra.shutdown_announce_in_ms={0 if self.nodes == 1 else 200}",
               f"-Dcassandra.superuser_setup_delay_ms={0 if self.nodes == 1 else RING_SUPERUSER_SETUP_DELAY_MS}"]
              if self.fast_start else []),
            *self._row_overhead_flag(),
            *self._sep_spin_flags(),
            *self._request_thread_flags(),
            f"-Dcassandra.config=file://{self.conf_dir / 'cassandra.yaml'}",
            f"-Dlogback.configurationFile=file://{self.conf_dir / 'logback.xml'}",
            f"-Dcassandra.logdir={self.workdir / 'logs'}",
            f"-Dcassandra.storagedir={self.workdir}",
            f"-Dcassandra.jmx.local.port={self.jmx_port}",
            *([f"-Dcassandra-rackdc.properties=file://{self.rackdc_file}"] if self.datacenter else []),
            *self._jmx_flags(),
            "-Dcassandra-foreground=yes",
            *(f"-D{k}={v}" for k, v in self.system_properties.items()),
            *(["-Dcassandra.start_native_transport=false"] if self._clients_held_since is not None else []),
            "-cp", server_classpath(self.version, self.patches),
            "org.apache.cassandra.service.CassandraDaemon",
        ]

    #: where ``system.log`` stood when a start with the CQL port held closed began (else None)
    _clients_held_since: int | None = None

    @property
    def system_log(self) -> Path:
        return self.workdir / "logs" / "system.log"

    def is_ready(self) -> bool:
        if self._clients_held_since is not None:
            # started with the CQL port closed: ready once it says it left the port closed, the
            # last step of a start
            return _log_has(self.system_log, self._clients_held_since, NATIVE_TRANSPORT_HELD)
        return port_open(self.address, self.native_port)

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.native_port}"

    def restart_with(self, overrides: dict[str, Any], replace: bool = False, timeout: float | None = None) -> float:
        """Persist ``overrides`` and restart; returns seconds from stop to CQL-ready."""
        self.set_overrides(overrides, replace=replace)
        return self.restart(timeout)

    # --- measured restart cost ----------------------------------------------------------
    @property
    def restart_log(self) -> Path:
        return self.workdir / "restarts.jsonl"

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

    def record_restart(self, seconds: float, **detail: Any) -> None:
        self._append_record(self.restart_log, seconds=round(seconds, 3), **{
            k: round(v, 3) if isinstance(v, float) else v for k, v in detail.items() if v is not None})

    def _append_record(self, log: Path, **fields: Any) -> None:
        """One JSON line (when, this instance, ``fields``) appended to one of its measurement logs."""
        import json

        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            f.write(json.dumps({"at": time.time(), "endpoint": self.endpoint, **fields}) + "\n")

    # --- stop ---------------------------------------------------------------------------
    #: how the last stop() went: "flush+kill", "sigterm" or None (nothing was running)
    last_stop: str | None = None

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
        if self.nodes == 1 and self.fast_start and self._flush_for_kill():
            self.last_stop = "flush+kill"
            return self.kill()
        self.last_stop = "sigterm"
        return super().stop(timeout)

    def _flush_for_kill(self, timeout: float = 120.0) -> bool:
        """Run ``AsgardStop`` against the instance's JMX port; True when every flush returned."""
        tools = tools_dir(self.version)
        if not (tools / "AsgardStop.class").exists():
            return False
        java = shutil.which("java") or "java"
        # a short-lived client: C1 only and a small serial heap start it fastest (the server's
        # own flags are untouched)
        cmd = [*self.netns_prefix(), java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx64m",
               "-cp", str(tools), "AsgardStop", str(self.jmx_port),
               *([str(self.nodetool_password_file)] if self.secure else [])]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc = None
        with open(self.log_file, "a") as log:
            if proc is not None and proc.returncode == 0:
                log.write(f"=== stop: AsgardStop {proc.stdout.strip()}; SIGKILL\n")
                return True
            reason = "timed out" if proc is None else (proc.stderr.strip() or proc.stdout.strip())[-500:]
            log.write(f"=== stop: AsgardStop failed ({reason}); SIGTERM\n")
        return False

    def restart_seconds(self, recent: int = 5) -> float | None:
        """Median stop-to-ready seconds of this instance's last ``recent`` restarts (None: never
        restarted by the project)."""
        return _recent_median(self.restart_log, "seconds", recent)

    # --- measured live-change cost ------------------------------------------------------
    @property
    def live_change_log(self) -> Path:
        return self.workdir / "live_changes.jsonl"

    def record_live_change(self, seconds: float, slowdown: float | None) -> None:
        """A live change (nodetool, ALTER TABLE/KEYSPACE) applied to this instance: how long it
        took, and the fraction of the store's throughput lost meanwhile (None: not probed)."""
        self._append_record(self.live_change_log, seconds=round(seconds, 3),
                            slowdown=None if slowdown is None else round(slowdown, 4))

    def live_change_cost(self, recent: int = 5) -> tuple[float | None, float | None]:
        """(seconds, slowdown): medians over this instance's last ``recent`` measured live changes;
        None for what was never measured."""
        return (_recent_median(self.live_change_log, "seconds", recent),
                _recent_median(self.live_change_log, "slowdown", recent))

    # No `nodetool drain` in stop(): a lone node flushes and is killed (above), a ring member's
    # shutdown hook drains. A ring's rolling restart drains first (CassandraCluster.rolling_restart),
    # so that clients have moved to the other replicas before the stop-to-ready clock starts.

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


def _has_ipc_lock() -> bool:
    """Whether this process (and so a server it starts) holds CAP_IPC_LOCK (bit 14)."""
    try:
        with open("/proc/self/status") as f:
            eff = next(line.split()[1] for line in f if line.startswith("CapEff:"))
        return bool(int(eff, 16) & (1 << 14))
    except (OSError, StopIteration, ValueError):
        return False


_JAVA_VERSION: str | None = None


def _java_version() -> str:
    """The java on PATH, as its resolved path (a JDK upgrade moves or replaces it)."""
    global _JAVA_VERSION
    if _JAVA_VERSION is None:
        java = shutil.which("java") or "java"
        real = os.path.realpath(java)
        try:
            stamp = os.stat(real).st_mtime_ns
        except OSError:
            stamp = 0
        _JAVA_VERSION = f"{real}@{stamp}"
    return _JAVA_VERSION


# what CassandraDaemon logs at the end of a start with cassandra.start_native_transport=false
NATIVE_TRANSPORT_HELD = b"Not starting native transport as requested"


def _log_size(log: Path) -> int:
    try:
        return log.stat().st_size
    except FileNotFoundError:
        return 0


def _log_has(log: Path, since: int, needle: bytes) -> bool:
    """True if ``log`` holds ``needle`` past byte ``since`` (from the start if it rolled over)."""
    try:
        with open(log, "rb") as f:
            if f.seek(0, 2) >= since:
                f.seek(since)
            else:
                f.seek(0)
            return needle in f.read()
    except FileNotFoundError:
        return False


def wait_port_closed(host: str, port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while port_open(host, port) and time.monotonic() < deadline:
        time.sleep(0.2)
    if port_open(host, port):
        raise ServerError(f"{host}:{port} is still open after stop")


def _recent_median(log: Path, field: str, recent: int) -> float | None:
    """Median of ``field`` over the last ``recent`` records of a JSON-lines log that has it."""
    import json
    import statistics

    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return None
    values = []
    for line in lines:
        try:
            value = json.loads(line).get(field)
        except (ValueError, AttributeError):
            continue  # a line torn by a crash mid-write
        if isinstance(value, (int, float)):
            values.append(float(value))
    return statistics.median(values[-recent:]) if values else None
