"""``nodetool`` without a Cassandra tarball: ``org.apache.cassandra.tools.NodeTool`` from the
same jars, talking JMX on loopback."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

from ..paths import cache_dir
from .install import cassandra_version, install, nodetool_cds_archive
from .jvm import JVM17_FLAGS

# nodetool has no logback.xml of its own on this classpath, so logback logs netty at DEBUG
# into stdout, in front of what the command prints
QUIET_LOGBACK = """<configuration><appender name="E" class="ch.qos.logback.core.ConsoleAppender">
<target>System.err</target><encoder><pattern>%-5level %msg%n</pattern></encoder></appender>
<root level="WARN"><appender-ref ref="E"/></root></configuration>
"""


class NodetoolError(RuntimeError):
    """nodetool exited non-zero."""


def nodetool(jmx_port: int, *args: str, version: str | None = None, timeout: float = 120,
             credentials: tuple[str, Path] | None = None, prefix: list[str] | None = None,
             host: str = "127.0.0.1", ssl: bool = False, truststore: str | None = None,
             truststore_password: str | None = None) -> str:
    """Run ``nodetool args`` against the JMX port; ``credentials`` (user, file of ``user password``
    lines) for a node with JMX authentication: the password goes by file, never on the command line.
    ``prefix``: run it so (``ip netns exec NS`` for a node in a namespace, whose JMX is on its loopback).
    ``host``: a remote member's JMX (a cluster the project does not run); ``ssl``: JMX over TLS,
    trusting ``truststore``."""
    version = version or cassandra_version()
    lib = install(version)
    logback = cache_dir("cassandra") / "nodetool-logback.xml"
    if not logback.exists() or logback.read_text() != QUIET_LOGBACK:
        logback.write_text(QUIET_LOGBACK)
    # its classes mapped from an archive the first run writes: a third of each call's CPU (1.2 -> 0.8 s
    # for `status`: docs/results/ci-time.txt), and the suite makes hundreds; the JVM's own warnings go to stderr,
    # never into the output parsed
    archive = nodetool_cds_archive(version)
    partial = None if archive.exists() else archive.with_name(
        f"{archive.name}.{os.getpid()}.{threading.get_ident()}.partial")
    cmd = [
        *(prefix or []),
        shutil.which("java") or "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        "-Xlog:disable", "-Xlog:all=warning:stderr",
        f"-XX:ArchiveClassesAtExit={partial}" if partial else f"-XX:SharedArchiveFile={archive}",
        *JVM17_FLAGS, "-Dcassandra.logdir=/tmp",
        f"-Dlogback.configurationFile=file://{logback}",
        *([f"-Djavax.net.ssl.trustStore={truststore}"] if truststore else []),
        *([f"-Djavax.net.ssl.trustStorePassword={truststore_password}"] if truststore_password else []),
        # JMX over TLS: NodeProbe reads this property (``--ssl`` is bin/nodetool's, which sets it)
        *(["-Dssl.enable=true"] if ssl else []),
        "-cp", f"{lib}/*", "org.apache.cassandra.tools.NodeTool",
        "-h", host, "-p", str(jmx_port),
        *(["-u", credentials[0], "-pwf", str(credentials[1])] if credentials else []), *args,
    ]
    if partial is not None:
        partial.parent.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if partial is not None and partial.exists():  # whole: the JVM wrote it as it exited
            os.replace(partial, archive)
    finally:
        if partial is not None:
            partial.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise NodetoolError(f"nodetool {' '.join(args)} (JMX {host}:{jmx_port}) failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def ring_status(output: str) -> dict[str, str]:
    """``{address: state}`` from ``nodetool status`` output (state ``UN`` is up and normal)."""
    return {m.group(2): m.group(1) for m in re.finditer(r"^([UD][NLJM])\s+(\d+\.\d+\.\d+\.\d+)", output, re.M)}


def pool_completed(output: str) -> dict[str, int]:
    """``{pool: completed tasks}`` from ``nodetool tpstats`` output: tasks each pool's workers ran
    (a task run on its caller's thread, e.g. on a connection's event loop, is not counted)."""
    done = {}
    for line in output.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1].isdigit() and fields[2].isdigit() and fields[3].isdigit():
            done[fields[0]] = int(fields[3])
    return done


def ring_host_ids(output: str) -> dict[str, str]:
    """``{address: host id}`` from ``nodetool status`` output (the id names a member's hint files)."""
    return {m.group(1): m.group(2) for m in re.finditer(
        r"^[UD][NLJM]\s+(\d+\.\d+\.\d+\.\d+)\s.*?\b([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b",
        output, re.M)}


def table_stats(output: str) -> dict[str, int]:
    """Live bytes and the largest partition (Cassandra's histogram bucket) from ``nodetool
    tablestats <keyspace.table>`` output; 0 where a figure is absent."""

    def field(label: str) -> int:
        match = re.search(rf"{re.escape(label)}:\s*([0-9]+)", output)
        return int(match.group(1)) if match else 0

    return {"live_bytes": field("Space used (live)"),
            "largest_partition_bytes": field("Compacted partition maximum bytes")}
