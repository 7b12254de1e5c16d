"""``nodetool`` without a Cassandra tarball: ``org.apache.cassandra.tools.NodeTool`` from the
same jars, talking JMX on loopback."""
from __future__ import annotations

import shutil
import subprocess

from .install import CASSANDRA_VERSION, install
from .node import JVM17_FLAGS


class NodetoolError(RuntimeError):
    """nodetool exited non-zero."""


def nodetool(jmx_port: int, *args: str, version: str = CASSANDRA_VERSION, timeout: float = 120) -> str:
    lib = install(version)
    cmd = [
        shutil.which("java") or "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        *JVM17_FLAGS, "-Dcassandra.logdir=/tmp",
        "-cp", f"{lib}/*", "org.apache.cassandra.tools.NodeTool",
        "-h", "127.0.0.1", "-p", str(jmx_port), *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise NodetoolError(f"nodetool {' '.join(args)} (JMX 127.0.0.1:{jmx_port}) failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout
