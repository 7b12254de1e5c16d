"""What starting and stopping one :class:`~asgard.resources.cassandra.node.CassandraNode` needs besides
:class:`~asgard.resources.process.ManagedServer`: a lone node's flush before its SIGKILL (the
``AsgardStop`` tool), and the log watch of a start that keeps clients out until the caller is ready.
The node's own ``start``, ``stop`` and ``restart`` call these with what they need.
"""
from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from ..process import ServerError, port_open
from .install import tools_dir

# what CassandraDaemon logs at the end of a start with cassandra.start_native_transport=false
NATIVE_TRANSPORT_HELD = b"Not starting native transport as requested"


def flush_for_kill(version: str, jmx_port: int, log_file: Path, password_file: Path | None = None,
                   prefix: Sequence[str] = (), timeout: float = 120.0) -> bool:
    """Run ``AsgardStop`` against the instance's JMX port (``password_file``: its JMX login, ``prefix``:
    its network namespace's ``ip netns exec``); True when every flush returned. How it went is
    appended to the server's ``log_file``."""
    tools = tools_dir(version)
    if not (tools / "AsgardStop.class").exists():
        return False
    java = shutil.which("java") or "java"
    # a short-lived client: C1 only and a small serial heap start it fastest (the server's
    # own flags are untouched)
    cmd = [*prefix, java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx64m",
           "-cp", str(tools), "AsgardStop", str(jmx_port),
           *([str(password_file)] if password_file is not None else [])]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc = None
    with open(log_file, "a") as log:
        if proc is not None and proc.returncode == 0:
            log.write(f"=== stop: AsgardStop {proc.stdout.strip()}; SIGKILL\n")
            return True
        reason = "timed out" if proc is None else (proc.stderr.strip() or proc.stdout.strip())[-500:]
        log.write(f"=== stop: AsgardStop failed ({reason}); SIGTERM\n")
    return False


def log_size(log: Path) -> int:
    """Where ``log`` ends now (0: not there yet): a later :func:`log_has` looks past it."""
    try:
        return log.stat().st_size
    except FileNotFoundError:
        return 0


def log_has(log: Path, since: int, needle: bytes) -> bool:
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
