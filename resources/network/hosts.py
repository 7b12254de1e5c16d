"""Hosts emulated on this machine: network namespaces on one bridge, each with an address of its
own and a NUMA topology of its own (a fake sysfs), for a Cassandra ring spread across "hosts".

Host ``h`` (1-based) is the namespace ``asgard-h<h>``; its veth end ``asgvh<h>`` is a port of the
bridge ``asgbr0`` (10.213.0.1/24 on this machine), ``asgvn<h>`` moves into the namespace with
10.213.0.<10 h + n> for each instance address ``n`` (one per NUMA node of the host: 11, 12 on host
1; 21, 22 on host 2; ...). The hosts reach each other over the bridge and this machine by its
address on it; nothing routes further.

Each host has a filesystem root of its own, ``$ASGARD_HOME/run/hosts/h<h>`` (:attr:`EmulatedHost.root`):
the ``ASGARD_HOME`` of the project's processes there (``run/`` its servers' state, ``ring-ca/`` what
the operator copied to it), with ``cache/`` linked to this machine's (the installed software, as a
package would be on every host). Its NUMA topology lives under ``<root>/sys/devices/system/node``
(:func:`asgard.resources.numa.numa_nodes` reads it with ``root=``): ``nodes`` nodes, this machine's
CPUs dealt out among them.

Example::

    hosts = EmulatedHosts(3)
    hosts.up()
    hosts[0].address            # '10.213.0.11'
    hosts[0].exec_prefix()      # ['ip', 'netns', 'exec', 'asgard-h1']
    hosts.down()
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..paths import cache_dir, run_dir
from .namespace import _ip, _run, links, namespaces, netns_exec_prefix

BRIDGE = "asgbr0"
SUBNET = "10.213.0"
HOST_PREFIX = "asgard-h"


@dataclass(frozen=True)
class EmulatedHost:
    number: int
    instances: int = 1  # addresses: one per instance (per NUMA node) the host runs

    @property
    def name(self) -> str:
        return f"{HOST_PREFIX}{self.number}"

    @property
    def netns(self) -> str:
        return self.name

    @property
    def addresses(self) -> list[str]:
        return [f"{SUBNET}.{10 * self.number + n}" for n in range(1, self.instances + 1)]

    @property
    def address(self) -> str:
        return self.addresses[0]

    @property
    def root(self) -> Path:
        """This host's filesystem root: the ``ASGARD_HOME`` of the project's processes on it."""
        return run_dir("hosts", f"h{self.number}")

    @property
    def sysfs_nodes(self) -> Path:
        """This host's ``/sys/devices/system/node``."""
        return self.root / "sys" / "devices" / "system" / "node"

    def environment(self) -> dict[str, str]:
        """What a process of the project on this host runs with (beside this machine's environment)."""
        return {"ASGARD_HOME": str(self.root)}

    def exec_prefix(self) -> list[str]:
        return netns_exec_prefix(self.netns)


class EmulatedHosts:
    """``count`` hosts on one bridge; ``numa_nodes`` fake NUMA nodes each (``instances`` addresses)."""

    def __init__(self, count: int = 3, numa_nodes: int = 2, memory_mib_per_node: int = 4096,
                 addresses_per_host: int | None = None):
        if not 1 <= count <= 20:
            raise ValueError(f"count must be 1..20 hosts, got {count}")
        self.numa_nodes, self.memory_mib_per_node = numa_nodes, memory_mib_per_node
        per_host = addresses_per_host or numa_nodes
        self.hosts = [EmulatedHost(h, per_host) for h in range(1, count + 1)]

    def __getitem__(self, i: int) -> EmulatedHost:
        return self.hosts[i]

    def __len__(self) -> int:
        return len(self.hosts)

    @property
    def bridge_address(self) -> str:
        return f"{SUBNET}.1"

    def up(self) -> "EmulatedHosts":
        """Make the bridge and every host afresh (leftovers of the same names removed first)."""
        ip = _ip()
        self.down()
        _run(ip, "link", "add", BRIDGE, "type", "bridge")
        _run(ip, "addr", "add", f"{self.bridge_address}/24", "dev", BRIDGE)
        _run(ip, "link", "set", BRIDGE, "up")
        try:
            for host in self.hosts:
                self._host_up(host)
                self._write_sysfs(host)
                self._link_software(host)
        except BaseException:
            self.down()
            raise
        return self

    def _host_up(self, host: EmulatedHost) -> None:
        ip = _ip()
        outside, inside_if = f"asgvh{host.number}", f"asgvn{host.number}"
        _run(ip, "netns", "add", host.netns)
        _run(ip, "link", "add", outside, "type", "veth", "peer", "name", inside_if)
        _run(ip, "link", "set", inside_if, "netns", host.netns)
        _run(ip, "link", "set", outside, "master", BRIDGE)
        _run(ip, "link", "set", outside, "up")
        inside = host.exec_prefix()
        for address in host.addresses:
            _run(*inside, ip, "addr", "add", f"{address}/24", "dev", inside_if)
        _run(*inside, ip, "link", "set", inside_if, "up")
        _run(*inside, ip, "link", "set", "lo", "up")  # JMX binds to the host's own loopback

    @staticmethod
    def _link_software(host: EmulatedHost) -> None:
        """The host's ``cache/`` is this machine's: jars and binaries installed once, read-only to it."""
        link = host.root / "cache"
        if not link.is_symlink():
            link.symlink_to(cache_dir(), target_is_directory=True)

    def _write_sysfs(self, host: EmulatedHost) -> None:
        """``numa_nodes`` nodes, this machine's CPUs dealt round-robin (each node gets at least one,
        shared when there are fewer CPUs than nodes), ``memory_mib_per_node`` each."""
        cpus = sorted(os.sched_getaffinity(0))
        root = host.sysfs_nodes
        for n in range(self.numa_nodes):
            mine = cpus[n::self.numa_nodes] or [cpus[n % len(cpus)]]
            node = root / f"node{n}"
            node.mkdir(parents=True, exist_ok=True)
            (node / "cpulist").write_text(",".join(str(c) for c in mine) + "\n")
            (node / "meminfo").write_text(f"Node {n} MemTotal:       {self.memory_mib_per_node * 1024} kB\n")

    def down(self) -> None:
        """Remove every host namespace and the bridge; nothing if absent."""
        ip = _ip()
        for host in self.hosts:
            if host.netns in namespaces():
                _run(ip, "netns", "delete", host.netns)
            if f"asgvh{host.number}" in links():
                _run(ip, "link", "delete", f"asgvh{host.number}", check=False)
        if BRIDGE in links():
            _run(ip, "link", "delete", BRIDGE, check=False)
