"""One Cassandra instance: instance ``i`` listens on 127.0.0.i with its own directory.

Start-up is trimmed for a local node: no gossip-settle wait, no ring delay, one precomputed
token, no bootstrap streaming, no heap pre-touch. Knob overrides persist in the instance's
``conf/overrides.yaml``, so ``restart`` keeps them until changed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from ..paths import run_dir
from ..process import ManagedServer, ServerError, port_open
from .config import LOGBACK_XML, base_config, render_config, write_config
from .install import CASSANDRA_VERSION, install

# From Cassandra's conf/jvm17-server.options (JPMS section): what Cassandra needs on Java 17.
JVM17_FLAGS = [
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports", "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports", "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports", "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports", "jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens", "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
]
# G1 settings of the same file
GC_FLAGS = [
    "-XX:+UseG1GC", "-XX:+ParallelRefProcEnabled", "-XX:MaxTenuringThreshold=1",
    "-XX:G1HeapRegionSize=16m", "-XX:G1RSetUpdatingPauseTimePercent=5",
    "-XX:MaxGCPauseMillis=300", "-XX:InitiatingHeapOccupancyPercent=70",
]
# What a local, freshly created node does not need to wait for.
FAST_START_PROPERTIES = [
    "-Dcassandra.skip_wait_for_gossip_to_settle=0",
    "-Dcassandra.ring_delay_ms=0",
    "-Dcassandra.superuser_setup_delay_ms=0",
    "-Dcassandra.skip_schema_check=true",
    "-Dcassandra.migration_task_wait_in_seconds=0",
]

JMX_BASE_PORT = 7199


class CassandraNode(ManagedServer):
    """Instance ``index`` (1-based) of a local ring of ``nodes`` instances.

    Example::

        node = CassandraNode()          # 127.0.0.1:9042, JMX 7199
        node.start()                    # installs on first use; seconds to CQL-ready
        node.restart_with({"concurrent_writes": 64})
        node.settings(["concurrent_writes"])   # {'concurrent_writes': '64'}
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
    ):
        if not 1 <= index <= 254:
            raise ValueError(f"instance index must be 1..254 (address 127.0.0.index), got {index}")
        super().__init__(f"cassandra-{index}", workdir or run_dir("cassandra", f"node{index}"), numa_node)
        self.index, self.nodes, self.version = index, nodes, version
        self.heap = heap or os.environ.get("ASGARD_CASSANDRA_HEAP", "2G")
        self.address = f"127.0.0.{index}"
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
        )
        if not self.fast_start:
            base.update(num_tokens=16, allocate_tokens_for_local_replication_factor=3)
            for key in ("initial_token", "auto_bootstrap"):
                base.pop(key)
        return render_config(base, self.overrides())

    def prepare(self) -> None:
        install(self.version)
        write_config(self.conf_dir / "cassandra.yaml", self.config())
        (self.conf_dir / "logback.xml").write_text(LOGBACK_XML)
        for sub in ("data", "commitlog", "hints", "saved_caches", "logs"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)

    # --- process ----------------------------------------------------------------------
    def command(self) -> list[str]:
        lib = install(self.version)
        java = shutil.which("java") or "java"
        jamm = next(lib.glob("jamm-*.jar"), None)
        return [
            java,
            f"-Xms{self.heap}", f"-Xmx{self.heap}", "-Xss256k",
            *GC_FLAGS,
            "-XX:+UseNUMA",  # seed 002: NUMA-aware allocation, with numactl binding per instance
            "-XX:+PerfDisableSharedMem", "-XX:+ExitOnOutOfMemoryError",
            "-XX:StringTableSize=1000003", "-Djava.net.preferIPv4Stack=true",
            *JVM17_FLAGS,
            *([f"-javaagent:{jamm}"] if jamm else []),
            *(FAST_START_PROPERTIES if self.fast_start else []),
            f"-Dcassandra.config=file://{self.conf_dir / 'cassandra.yaml'}",
            f"-Dlogback.configurationFile=file://{self.conf_dir / 'logback.xml'}",
            f"-Dcassandra.logdir={self.workdir / 'logs'}",
            f"-Dcassandra.storagedir={self.workdir}",
            f"-Dcassandra.jmx.local.port={self.jmx_port}",
            "-Dcassandra-foreground=yes",
            "-cp", f"{lib}/*",
            "org.apache.cassandra.service.CassandraDaemon",
        ]

    def is_ready(self) -> bool:
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

    def restart(self, timeout: float | None = None) -> float:
        """Stop and start; the stop-to-ready seconds are recorded in ``restarts.jsonl`` (the
        cost-benefit analysis charges the recent measured value, not a constant)."""
        seconds = super().restart(timeout)
        self.record_restart(seconds)
        return seconds

    def record_restart(self, seconds: float) -> None:
        import json

        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.restart_log, "a") as f:
            f.write(json.dumps({"at": time.time(), "endpoint": self.endpoint, "seconds": round(seconds, 3)}) + "\n")

    def restart_seconds(self, recent: int = 5) -> float | None:
        """Median stop-to-ready seconds of this instance's last ``recent`` restarts (None: never
        restarted by the project)."""
        import json
        import statistics

        try:
            lines = self.restart_log.read_text().splitlines()
        except FileNotFoundError:
            return None
        seconds = []
        for line in lines[-recent:]:
            try:
                seconds.append(float(json.loads(line)["seconds"]))
            except (ValueError, KeyError, TypeError):
                continue  # a line torn by a crash mid-write
        return statistics.median(seconds) if seconds else None

    # No explicit `nodetool drain` before SIGTERM: Cassandra's shutdown hook drains (flushes
    # memtables, closes the commitlog) itself, and a nodetool JVM would add 2-3 s to every restart.

    def wipe(self) -> None:
        """Stop and delete the instance's data (keeps its overrides)."""
        self.stop()
        for sub in ("data", "commitlog", "hints", "saved_caches"):
            shutil.rmtree(self.workdir / sub, ignore_errors=True)

    # --- introspection ----------------------------------------------------------------
    def nodetool(self, *args: str, timeout: float = 120) -> str:
        from .nodetool import nodetool

        return nodetool(self.jmx_port, *args, version=self.version, timeout=timeout)

    def settings(self, names: list[str] | None = None) -> dict[str, str]:
        """Effective settings from ``system_views.settings`` (all, or just ``names``)."""
        from cassandra.cluster import Cluster

        cluster = Cluster([self.address], port=self.native_port, connect_timeout=10)
        try:
            session = cluster.connect()
            rows = session.execute("SELECT name, value FROM system_views.settings")
            found = {r.name: r.value for r in rows}
        finally:
            cluster.shutdown()
        return found if names is None else {n: found.get(n) for n in names}

    def status(self) -> dict:
        info = super().status()
        info.update(address=self.address, native_port=self.native_port, jmx_port=self.jmx_port,
                    heap=self.heap, numa_node=self.numa_node, overrides=self.overrides(), version=self.version)
        return info


def wait_port_closed(host: str, port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while port_open(host, port) and time.monotonic() < deadline:
        time.sleep(0.2)
    if port_open(host, port):
        raise ServerError(f"{host}:{port} is still open after stop")
