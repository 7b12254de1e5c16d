"""Starting and stopping one :class:`~asgard.resources.cassandra.node.CassandraNode`: a start that
may keep clients out until the caller is ready, a lone node's fast stop (flush, then SIGKILL),
and a restart that records its cost.
"""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from ..process import ServerError, port_open
from .install import tools_dir


class NodeProcess:
    """Start, readiness, restart and stop of a node's process; mixed into CassandraNode before
    :class:`~asgard.resources.process.ManagedServer`, whose start and stop it wraps."""

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

    # No `nodetool drain` in stop(): a lone node flushes and is killed (above), a ring member's
    # shutdown hook drains. A ring's rolling restart drains first (CassandraCluster.rolling_restart),
    # so that clients have moved to the other replicas before the stop-to-ready clock starts.


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
