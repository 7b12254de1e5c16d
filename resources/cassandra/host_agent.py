"""A host's agent (``asgard cassandra host agent``) as the process it is on a host: it carries out the
ring's orders for the members this host runs (:class:`~.orders.HostAgent`), found by their launch
records under the host's ``ASGARD_HOME``.

On an emulated host (:class:`~asgard.resources.network.hosts.EmulatedHost`) it runs in the host's
network namespace with the host's root as its ``ASGARD_HOME``: it sees only that host's members and
``ring-ca``, as on a machine of its own. It is ready once it has heartbeaten its members into the
ring (its log says so); SIGTERM stops it after the order in hand.

Example::

    agent = HostAgentProcess("asgard-h1", host.root, netns="asgard-h1")
    agent.start()      # seconds until its first heartbeat
    agent.kill()       # kill -9: a host's agent dying (its lease lapses once its member is back up)
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..process import ManagedServer

#: the line the agent's CLI prints once its members' first heartbeat is in the ring
READY_LINE = "heartbeating"


class HostAgentProcess(ManagedServer):
    """The agent of host ``host`` (its name in the ring's ``agents`` and done records), on the host
    whose ``ASGARD_HOME`` is ``root``, in network namespace ``netns``."""

    start_timeout = 120.0

    def __init__(self, host: str, root: Path, netns: str | None = None, interval: float = 1.0):
        super().__init__(f"agent-{host}", Path(root) / "run" / "agent", netns=netns)
        self.host, self.root, self.interval = host, Path(root), interval

    @property
    def endpoint(self) -> str:
        return f"host {self.host}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "asgard.cli", "cassandra", "host", "agent", "--name", self.host,
                "--interval", str(self.interval)]

    def environment(self) -> dict[str, str]:
        # the host's root, not this machine's: it finds its members and ring CA there only
        return {**os.environ, "ASGARD_HOME": str(self.root), "PYTHONUNBUFFERED": "1"}

    def is_ready(self) -> bool:
        if not self.is_running():
            return False
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return False
        # this start's lines only (the log is appended to across starts)
        return READY_LINE in text.rsplit("\n=== start ", 1)[-1]

    def status(self) -> dict:
        info = super().status()
        info.update(host=self.host, root=str(self.root), netns=self.netns)
        return info
