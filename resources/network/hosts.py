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
import re
from dataclasses import dataclass
from pathlib import Path

from ..paths import cache_dir, run_dir
from .namespace import _ip, _run, _tc, links, namespaces, netns_exec_prefix, shape_link

BRIDGE = "asgbr0"
SUBNET = "10.213.0"
HOST_PREFIX = "asgard-h"
#: an EC2 i3.large's sustained bandwidth, the instance the day's Perf/$ charges for the ring (Amazon EC2
#: Instance Types guide, storage optimized, network specifications: baseline 0.75 Gbps, burst 10 Gbps;
#: "burst bandwidth for a limited time, typically from 5 to 60 minutes", EC2 instance network bandwidth)
I3_LARGE_BASELINE_MBIT = 750


class HostLinkError(ValueError):
    """A host link rate that cannot be set (``rate_mbit`` is what was given)."""

    def __init__(self, rate_mbit):
        self.rate_mbit = rate_mbit
        super().__init__(f"host link rate {rate_mbit!r}: give a whole number of Mbit/s of at least 1 (an i3.large "
                         f"sustains {I3_LARGE_BASELINE_MBIT}), or 0 / None for the unshaped bridge")


def link_rate(rate_mbit) -> int | None:
    """``rate_mbit`` as a host link takes it: a whole number of Mbit/s, ``None`` for unshaped (0 too);
    anything else raises :class:`HostLinkError`."""
    if rate_mbit is not None and (isinstance(rate_mbit, bool) or not isinstance(rate_mbit, int) or rate_mbit < 0):
        raise HostLinkError(rate_mbit)
    return rate_mbit or None


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

    @property
    def link_ends(self) -> tuple[str, str]:
        """The veth pair's ends: the bridge's port (this machine's side) and the host's own."""
        return f"asgvh{self.number}", f"asgvn{self.number}"

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
        outside, inside_if = host.link_ends
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

    def shape_links(self, rate_mbit: int | None) -> None:
        """Each host's link capped at ``rate_mbit`` each way (an HTB class on both ends of its veth pair:
        what leaves the host and what reaches it), or unshaped with ``None`` or 0. Traffic within a host
        (a worker and its host's ring member) never crosses it. Replaces what was set; the hosts must be up."""
        rate_mbit = link_rate(rate_mbit)
        for host in self.hosts:
            for prefix, dev in zip(([], host.exec_prefix()), host.link_ends):
                shape_link(prefix, dev, rate_mbit)

    def link_rates(self) -> dict[str, int | None]:
        """``{host name: Mbit/s each way}`` as tc has it on both ends (``None``: unshaped); a host whose
        two ends differ raises, since only :meth:`shape_links` sets them."""
        tc, rates = _tc(), {}
        for host in self.hosts:
            found = set()
            for prefix, dev in zip(([], host.exec_prefix()), host.link_ends):
                shown = _run(*prefix, tc, "class", "show", "dev", dev, check=False)
                found.add(_mbit(shown))
            if len(found) != 1:
                raise HostLinkError(f"{host.name}'s two link ends differ: {sorted(found, key=str)}")
            rates[host.name] = found.pop()
        return rates

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
            if host.link_ends[0] in links():
                _run(ip, "link", "delete", host.link_ends[0], check=False)
        if BRIDGE in links():
            _run(ip, "link", "delete", BRIDGE, check=False)


def _mbit(tc_class_show: str) -> int | None:
    """The HTB rate of ``tc class show`` in Mbit/s (tc prints 750Mbit, 10Gbit, 200Kbit), ``None`` for none."""
    match = re.search(r"\brate (\d+(?:\.\d+)?)([KMG]?)bit", tc_class_show)
    if not match:
        return None
    scale = {"K": 1e-3, "": 1e-6, "M": 1.0, "G": 1e3}[match.group(2)]
    return int(round(float(match.group(1)) * scale))
