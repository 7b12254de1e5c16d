"""One server's network namespace and the veth pair that reaches it (iproute2: ``ip``, ``tc``).

Slot ``s`` is the namespace ``asgard-s<s>``: the veth end ``asgh<s>`` stays on this host with
10.211.s.1/30, ``asgn<s>`` moves into the namespace with 10.211.s.2/30, the server's address.
With a rate, both ends get a tc HTB class at that rate (the host's bandwidth, each way).
Deleting the namespace deletes the pair and its qdiscs with it.
"""
from __future__ import annotations

import re
import shutil
import subprocess

NAME_PREFIX = "asgard-s"
HOST_IF, NS_IF = "asgh", "asgn"


class NamespaceError(RuntimeError):
    """iproute2 refused a step (not root, no iproute2, a clash with another interface)."""


def _ip() -> str:
    found = shutil.which("ip") or ("/usr/sbin/ip" if shutil.which("/usr/sbin/ip") else None)
    if not found:
        raise NamespaceError("iproute2's `ip` is not installed: run scripts/setup.sh (apt-get install iproute2)")
    return found


def _tc() -> str:
    return shutil.which("tc") or "/usr/sbin/tc"


def netns_exec_prefix(name: str) -> list[str]:
    return [_ip(), "netns", "exec", name]


def _run(*argv: str, check: bool = True) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if check and proc.returncode != 0:
        hint = " (network namespaces need root or CAP_NET_ADMIN)" if "Operation not permitted" in proc.stderr else ""
        raise NamespaceError(f"`{' '.join(argv)}` failed: {proc.stderr.strip() or proc.stdout.strip()}{hint}")
    return proc.stdout


def shape_link(prefix: list[str], dev: str, rate_mbit: float | None) -> None:
    """``dev``'s egress capped at ``rate_mbit`` (a tc HTB class), replacing what was set; unshaped with
    ``None`` or 0. ``prefix``: the namespace's ``ip netns exec`` (``[]`` for this machine's)."""
    tc = _tc()
    _run(*prefix, tc, "qdisc", "del", "dev", dev, "root", check=False)  # none set is fine
    if rate_mbit:
        rate = f"{int(rate_mbit)}mbit"
        _run(*prefix, tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
        _run(*prefix, tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb",
             "rate", rate, "ceil", rate)


class NetNamespace:
    """The namespace of slot ``slot`` (1..250)."""

    def __init__(self, slot: int, prefix: str = "10.211"):
        if not 1 <= slot <= 250:
            raise ValueError(f"slot must be 1..250, got {slot}")
        self.slot = slot
        self.name = f"{NAME_PREFIX}{slot}"
        self.host_if, self.ns_if = f"{HOST_IF}{slot}", f"{NS_IF}{slot}"
        self.host_address = f"{prefix}.{slot}.1"
        self.address = f"{prefix}.{slot}.2"  # the server's

    def exists(self) -> bool:
        return self.name in namespaces()

    def create(self, rate_mbit: float | None = None) -> None:
        """Make the namespace and its link afresh (a leftover of the same slot is removed first)."""
        self.delete()
        ip = _ip()
        _run(ip, "netns", "add", self.name)
        try:
            _run(ip, "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            _run(ip, "link", "set", self.ns_if, "netns", self.name)
            _run(ip, "addr", "add", f"{self.host_address}/30", "dev", self.host_if)
            _run(ip, "link", "set", self.host_if, "up")
            inside = netns_exec_prefix(self.name)
            _run(*inside, ip, "addr", "add", f"{self.address}/30", "dev", self.ns_if)
            _run(*inside, ip, "link", "set", self.ns_if, "up")
            _run(*inside, ip, "link", "set", "lo", "up")  # JMX and the like bind to its loopback
            if rate_mbit:
                shape_link([], self.host_if, rate_mbit)
                shape_link(inside, self.ns_if, rate_mbit)
        except BaseException:
            self.delete()
            raise

    def delete(self) -> None:
        """Remove the namespace (with its veth pair and qdiscs); nothing if it is absent."""
        if self.exists():
            _run(_ip(), "netns", "delete", self.name)
        # the host end goes with its peer; a pair left by a crash between steps is removed here
        if self.host_if in links():
            _run(_ip(), "link", "delete", self.host_if, check=False)

    def qdiscs(self) -> str:
        """``tc qdisc show`` of both ends (for status and tests)."""
        host = _run(_tc(), "qdisc", "show", "dev", self.host_if, check=False)
        inside = _run(*netns_exec_prefix(self.name), _tc(), "qdisc", "show", "dev", self.ns_if, check=False) \
            if self.exists() else ""
        return host + inside


def namespaces() -> list[str]:
    """Names of every network namespace (``ip netns list``)."""
    return [line.split()[0] for line in _run(_ip(), "netns", "list", check=False).splitlines() if line.strip()]


def links() -> list[str]:
    """Names of the interfaces in this namespace."""
    return re.findall(r"^\d+:\s+([^:@\s]+)", _run(_ip(), "-o", "link", "show", check=False), re.M)


def leftovers() -> dict[str, list[str]]:
    """The project's namespaces and host-side interfaces that exist now (empty after a tear-down)."""
    return {"namespaces": [n for n in namespaces() if n.startswith(NAME_PREFIX)],
            "interfaces": [i for i in links() if re.fullmatch(rf"{HOST_IF}\d+", i)]}


def current_netns() -> str | None:
    """The name of the namespace (``ip netns``) this process runs in; None in the root namespace or
    one without a name. Compares ``/proc/self/ns/net`` with the bind mounts under ``/run/netns``,
    as ``ip netns identify`` does, without running it."""
    import os

    mine = os.stat("/proc/self/ns/net")
    try:
        names = os.listdir("/run/netns")
    except FileNotFoundError:
        return None
    for name in names:
        try:
            theirs = os.stat(f"/run/netns/{name}")
        except OSError:
            continue
        if (theirs.st_dev, theirs.st_ino) == (mine.st_dev, mine.st_ino):
            return name
    return None
