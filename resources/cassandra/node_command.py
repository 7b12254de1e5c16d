"""The command line that runs one :class:`~asgard.resources.cassandra.node.CassandraNode`: its JVM
flags and the start-up shortcuts of a local node (no gossip-settle wait, ring delay, heap pinning or
row-overhead estimate; an AppCDS archive), and how client requests are threaded.
:class:`NodeCommandLine` is the node's ``command_line``, built from its
:class:`~asgard.resources.cassandra.node_spec.NodeSpec` and JMX flags; the class-list recording
of a first start is its own state.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .install import cds_archive, cds_classlist, install, server_classpath
from .jvm import GC_FLAGS, JVM17_FLAGS, extra_jvm_options
from .node_spec import NodeSpec

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

# idle request-pool workers park after 50 us, not 10 ms, on a small host (patch sep-worker-spin;
# figures: docs/results/issue13-sep-spin.txt); ASGARD_CASSANDRA_SEP_STOP_CHECK_NS sets it on any host
SMALL_HOST_CPUS = 4
SMALL_HOST_SEP_STOP_CHECK_NS = 50_000

# a local read or mutation runs on the request's thread (CASSANDRA-21429), and a small request on
# its event loop up to SMALL_HOST_CPUS (ASGARD_CASSANDRA_NATIVE_INLINE); docs/results/issue13-run-to-completion.txt
RUN_IMMEDIATELY_PROPERTY = "-Dasgard.sep_run_immediately=true"
NATIVE_INLINE_PROPERTY = "-Dasgard.native_inline=true"

# the server's approximate clock (request timeouts, message expiry) is sampled every 2 ms by default:
# 500 wake-ups a second, about 1 of the 1.7 CPU-seconds a minute an idle lone node spends here (of a ring
# member's 2.7; docs/results/ci-time.txt). Every 20 ms instead: a timeout fires at most 20 ms late
APPROX_CLOCK_PROPERTY = "-Dcassandra.approximate_time_precision_ms=20"

# a lone node has no peer to announce its shutdown to, so it skips the 2 s announce sleep
# (where a restart's time goes: docs/results/issue10-restart-breakdown.txt)


class NodeCommandLine:
    """The JVM command line of a node and the measurements its later starts reuse."""

    def __init__(self, spec: NodeSpec, jmx_flags: list[str]):
        self.spec = spec
        self.jmx_flags = list(jmx_flags)  # the security's: JMX behind a login on a secure node
        # the class list a start is recording (-XX:DumpLoadedClassList), published once it is ready
        self.classlist_partial: Path | None = None

    def exec_wrappers(self) -> list[str]:
        """``setpriv`` without CAP_IPC_LOCK, for a server run by root: Cassandra mlockall()s its
        memory at start, which for root (the capability overrides RLIMIT_MEMLOCK) faults in and
        pins the whole heap first: 0.3-1.5 s of a 1 GiB heap's start on this machine, more for
        larger heaps, and a pre-touch the project leaves out by choice (there is no swap to pin
        against here). Without the capability Cassandra logs "Unable to lock JVM memory (ENOMEM)"
        and goes on, as it does for any unprivileged user."""
        setpriv = shutil.which("setpriv")
        if setpriv is None or not self.spec.fast_start or not _has_ipc_lock():
            return []
        return [setpriv, "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"]

    @property
    def row_overhead_file(self) -> Path:
        return self.spec.workdir / "row_overhead.json"

    def _row_overhead_flag(self) -> list[str]:
        """Cassandra estimates the SkipListMemtable row overhead at every start by building and
        measuring 100,000 rows (about 1 CPU-second here); the figure depends on the JVM and its
        heap only, so the instance's first start measures it and later starts pass it back."""
        import json

        try:
            record = json.loads(self.row_overhead_file.read_text())
        except (FileNotFoundError, ValueError):
            return []
        if not self.spec.fast_start or record.get("heap") != self.spec.heap or record.get("java") != _java_version():
            return []
        return [f"-Dcassandra.memtable.row_overhead_size={int(record['row_overhead'])}"]

    def record_row_overhead(self) -> None:
        """After a start: the row overhead it measured, for the next starts (see _row_overhead_flag)."""
        import json
        import re

        if self._row_overhead_flag() or not self.spec.fast_start:
            return
        try:
            text = (self.spec.workdir / "logs" / "system.log").read_text(errors="replace")
        except FileNotFoundError:
            return
        found = re.findall(r"Estimated SkipListMemtable row overhead: (\d+)", text)
        if found:
            self.row_overhead_file.write_text(json.dumps(
                {"row_overhead": int(found[-1]), "heap": self.spec.heap, "java": _java_version()}))

    def _cds_flags(self) -> list[str]:
        """The install step's AppCDS archive when there is one (``install.build_cds_archive``);
        until then the first start records the class list it is built from. A stock start (the
        bench's baseline) goes without."""
        self.classlist_partial = None
        if not self.spec.fast_start:
            return []
        archive = cds_archive(self.spec.version, self.spec.patches)
        if archive.exists():
            return [f"-XX:SharedArchiveFile={archive}"]
        classlist = cds_classlist(self.spec.version, self.spec.patches)
        if classlist.exists():
            return []  # the archive is being built
        classlist.parent.mkdir(parents=True, exist_ok=True)
        self.classlist_partial = classlist.with_name(f"{classlist.name}.{self.spec.index}.{os.getpid()}.partial")
        return [f"-XX:DumpLoadedClassList={self.classlist_partial}"]

    def publish_classlist(self) -> None:
        """Once a start that records the class list is ready (the list then holds what a start
        loads), publish it and build the archive in the background, off every start's clock."""
        import sys

        partial = self.classlist_partial
        if partial is None or not partial.exists():
            return
        self.classlist_partial = None
        classlist = cds_classlist(self.spec.version, self.spec.patches)
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
                              "{'1': True, '0': False}.get(sys.argv[2])))", self.spec.version,
                              {True: "1", False: "0"}.get(self.spec.patches, "")],
                             cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)

    def _sep_spin_flags(self) -> list[str]:
        """How long the request pool's idle workers spin (SMALL_HOST_SEP_STOP_CHECK_NS)."""
        if "asgard.sep_stop_check_ns" in self.spec.system_properties:
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
        flags = [] if "asgard.sep_run_immediately" in self.spec.system_properties else [RUN_IMMEDIATELY_PROPERTY]
        if "asgard.native_inline" in self.spec.system_properties:
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

    def command(self, clients_held: bool = False) -> list[str]:
        """The argv; ``clients_held``: the CQL port stays closed until ``nodetool enablebinary``."""
        spec = self.spec
        lib = install(spec.version)
        java = shutil.which("java") or "java"
        jamm = next(lib.glob("jamm-*.jar"), None)
        return [
            *self.exec_wrappers(),
            java,
            *self._cds_flags(),
            f"-Xms{spec.heap}", f"-Xmx{spec.heap}", "-Xss256k",
            *GC_FLAGS,
            "-XX:+UseNUMA",  # ICPE'19: NUMA-aware allocation, with numactl binding per instance
            "-XX:+PerfDisableSharedMem", "-XX:+ExitOnOutOfMemoryError",
            "-XX:StringTableSize=1000003", "-Djava.net.preferIPv4Stack=true",
            *JVM17_FLAGS,
            *([f"-javaagent:{jamm}"] if jamm else []),
            APPROX_CLOCK_PROPERTY,
            *(FAST_START_PROPERTIES if spec.fast_start else []),
            *([f"-Dcassandra.shutdown_announce_in_ms={0 if spec.nodes == 1 else 200}",
               f"-Dcassandra.superuser_setup_delay_ms={0 if spec.nodes == 1 else RING_SUPERUSER_SETUP_DELAY_MS}"]
              if spec.fast_start else []),
            *self._row_overhead_flag(),
            *self._sep_spin_flags(),
            *self._request_thread_flags(),
            f"-Dcassandra.config=file://{spec.conf_dir / 'cassandra.yaml'}",
            f"-Dlogback.configurationFile=file://{spec.conf_dir / 'logback.xml'}",
            f"-Dcassandra.logdir={spec.workdir / 'logs'}",
            f"-Dcassandra.storagedir={spec.workdir}",
            f"-Dcassandra.jmx.local.port={spec.jmx_port}",
            *([f"-Dcassandra-rackdc.properties=file://{spec.rackdc_file}"] if spec.datacenter else []),
            *self.jmx_flags,
            "-Dcassandra-foreground=yes",
            *(f"-D{k}={v}" for k, v in spec.system_properties.items()),
            *(["-Dcassandra.start_native_transport=false"] if clients_held else []),
            *extra_jvm_options(),  # last: the operator's flag wins over ours, as in cassandra-env.sh
            "-cp", server_classpath(spec.version, spec.patches),
            "org.apache.cassandra.service.CassandraDaemon",
        ]


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
