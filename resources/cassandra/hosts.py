"""The project's Cassandra as one ring across hosts.

Each host runs one instance per NUMA node (its own addresses, one per instance), and every
instance joins the same ring:

* the seeds are the first instance of each of the first three hosts (:attr:`HostRing.seeds`);
* listen, broadcast and RPC addresses are the instance's own address on its host;
* ``GossipingPropertyFileSnitch`` with the ring's datacenter and one rack per host, so the
  replicas of a partition go to different hosts (NetworkTopologyStrategy);
* 16 tokens per instance, allocated for the keyspaces' replication factor
  (``allocate_tokens_for_local_replication_factor``), and bootstrap on: a host that joins a
  running ring streams its ranges; one that leaves is decommissioned (:meth:`HostRing.leave`),
  streaming them back out, not just stopped;
* one CA for the whole ring, made once by the operator (:func:`~.ring_ca.create_ring_ca`, ``asgard
  cassandra host ca-init``), its key kept in ``ring_ca`` on that machine and never in a node's
  directory: internode encryption ``all`` (mutual TLS), client TLS, ``PasswordAuthenticator`` with
  one superuser made once by the first seed (its password made with the CA), and ``system_auth``
  replicated across hosts (:meth:`HostRing.replicate_auth`). A member never makes a CA or a
  password: where its host lacks them it refuses to start, naming the files (:mod:`.ring_ca`).

On real hosts each runs ``asgard cassandra host up --address ... --seeds ... --rack ... --ring-ca
DIR``; a host without ``ca.key`` in DIR gets its members' certificates by ``host cert-request``
there and ``host cert-sign`` on the CA's host (:mod:`.ring_ca`). Here the hosts are network
namespaces (:class:`~asgard.resources.network.hosts.EmulatedHosts`) sharing one filesystem, so
every member finds ``ca.key`` in the one ``ring_ca``.

Example::

    hosts = EmulatedHosts(3, addresses_per_host=1).up()
    create_ring_ca(run_dir("ring-ca"))  # once: the ring's CA and superuser password
    ring = HostRing(hosts.hosts, ring_ca=run_dir("ring-ca"), heap="1G", instances_per_host=1)
    ring.start()
    CassandraObjectStore(**ring.client_options(), replication_factor=3)
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from ..paths import run_dir
from ..process import ServerError
from .node import SUPERUSER, CassandraNode
from .ring_ca import create_ring_ca

#: ring_delay_ms of a member joining: the stock 30 s waits for gossip to settle before it takes
#: tokens; a handful of hosts on one bridge settle within seconds (assumption: measured joins
#: here saw every peer within 2-3 s of gossip start)
JOIN_RING_DELAY_MS = 5000

#: How long a member waits for gossip to settle, at every start and twice more while it takes
#: tokens: Cassandra's stock wait is a 5 s floor then three steady 1 s polls (8 s each time, made
#: for rings of hundreds). A handful of hosts learn every endpoint from the seed's shadow round
#: before the wait begins: every wait in a 3-host ring here ended on the first three polls ("No
#: gossip backlog", 0 extra polls; tests/test_hosts_ring.py). A 1 s floor and 0.5 s polls keep
#: the same three-steady-polls rule. (Assumption for rings of up to a few dozen members.)
GOSSIP_SETTLE_PROPERTIES = {"cassandra.gossip_settle_min_wait_ms": "1000",
                            "cassandra.gossip_settle_interval_ms": "500"}
MEMBER_PROPERTIES = {"cassandra.ring_delay_ms": str(JOIN_RING_DELAY_MS), **GOSSIP_SETTLE_PROPERTIES}


class HostRing:
    """``hosts`` (objects with ``number``, ``addresses``, ``netns``, ``sysfs_nodes``) as one ring,
    on the CA in ``ring_ca`` (made beforehand: :func:`~.ring_ca.create_ring_ca`)."""

    def __init__(self, hosts: list, ring_ca: Path, datacenter: str = "dc1", replication_factor: int = 3,
                 heap: str = "1G", instances_per_host: int | None = None, first_index: int = 101):
        self.hosts, self.ring_ca = list(hosts), Path(ring_ca)
        self.datacenter, self.replication_factor, self.heap = datacenter, replication_factor, heap
        self.instances_per_host = instances_per_host
        self.first_index = first_index
        self.members: list[CassandraNode] = []
        for h, host in enumerate(self.hosts):
            for n, address in enumerate(host.addresses[: self._per_host(host)]):
                self.members.append(self._member(h, host, n, address))

    def _per_host(self, host) -> int:
        """One per NUMA node of the host (its sysfs), capped by ``instances_per_host``."""
        from ..numa import numa_nodes

        per = len([n for n in numa_nodes(host.sysfs_nodes) if n.cpus]) if getattr(host, "sysfs_nodes", None) else 1
        return min(per, self.instances_per_host or per, len(host.addresses))

    @property
    def seeds(self) -> list[str]:
        return [host.addresses[0] for host in self.hosts[:3]]

    def _member(self, h: int, host, n: int, address: str) -> CassandraNode:
        index = self.first_index + 10 * h + n  # instance n of the h-th host (0-based)
        return CassandraNode(
            index=index, nodes=max(2, len(self.hosts)), heap=self.heap, address=address, netns=host.netns,
            workdir=run_dir("hosts", f"h{host.number}", "cassandra", f"node{n + 1}"), fast_start=False,
            seeds=self.seeds, datacenter=self.datacenter, rack=f"rack{host.number}", ring_ca=str(self.ring_ca),
            replication_factor=self.replication_factor,
            system_properties=dict(MEMBER_PROPERTIES))

    def members_of(self, host) -> list[CassandraNode]:
        return [m for m in self.members if m.netns == host.netns]

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> dict[str, float]:
        """Start every member, the first seed first, then one at a time (Cassandra joins one
        bootstrapping member at a time), and replicate ``system_auth`` across the hosts."""
        seconds = {}
        for member in self.members:
            seconds[member.name] = member.start()
        self.replicate_auth()
        from .orders import ensure_control_schema

        session = self.session()
        try:  # where the hosts' agents take their orders (resources/cassandra/orders.py)
            ensure_control_schema(session, self.datacenter, min(self.replication_factor, len(self.members)))
        finally:
            session.cluster.shutdown()
        return seconds

    def agent(self, host):
        """The :class:`~.orders.HostAgent` of ``host`` (its members), connected with the ring's login."""
        from .orders import HostAgent

        return HostAgent(host.name, self.members_of(host), self.session)

    def join(self, host) -> list[CassandraNode]:
        """Start the members of ``host`` (added to the ring after it started): each bootstraps,
        streaming the ranges its tokens take from the members that held them, on the ring's
        desired configuration (the newest order's overrides: it replays no older order)."""
        from .orders import desired_overrides

        session = self.session()
        try:
            overrides = desired_overrides(session)
        finally:
            session.cluster.shutdown()
        joined = []
        for n, address in enumerate(host.addresses[: self._per_host(host)]):
            member = self._member(len(self.hosts), host, n, address)
            member.set_overrides(overrides)
            member.start()
            joined.append(member)
        self.hosts.append(host)
        self.members.extend(joined)
        return joined

    def leave(self, host) -> None:
        """Decommission ``host``'s members (each streams its ranges to the members that take
        them over, then leaves the ring), then stop them."""
        for member in self.members_of(host):
            member.nodetool("decommission", timeout=600)
            member.stop()
            self.members.remove(member)
        self.hosts.remove(host)

    def stop(self) -> None:
        for member in reversed(self.members):
            member.stop()

    def kill(self, host) -> None:
        """Kill ``host``'s members at once (SIGKILL: a host that fails, not one that stops)."""
        for member in self.members_of(host):
            member.kill()

    # --- the ring's one login -----------------------------------------------------------------
    def superuser_password(self) -> str:
        return self.members[0].superuser_password()

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~asgard.resources.stores.cql.CassandraObjectStore` for the ring."""
        return {"contact_points": [m.address for m in self.members], "username": SUPERUSER,
                "password": self.superuser_password(), "ssl_ca_file": str(self.ring_ca / "ca.pem"),
                "ssl_verify_hostname": True}

    def session(self):
        from ..stores.cql import build_cluster

        options = self.client_options()
        cluster = build_cluster(options["contact_points"], username=SUPERUSER, password=options["password"],
                                tls=(options["ssl_ca_file"], None, None, True), connect_timeout=10, admin=True)
        return cluster.connect()

    def replicate_auth(self, timeout: float = 120) -> None:
        """``system_auth`` on every host (NetworkTopologyStrategy, min(RF, members) replicas), then
        repaired: a login or role check no longer depends on the one member that made the role."""
        session = self.session()
        try:
            factor = min(self.replication_factor, len(self.members))
            session.execute("ALTER KEYSPACE system_auth WITH replication = {'class': 'NetworkTopologyStrategy', "
                            f"'{self.datacenter}': {factor}}}", timeout=60)
        finally:
            session.cluster.shutdown()
        deadline = time.monotonic() + timeout
        for member in self.members:
            while True:
                try:
                    member.nodetool("repair", "--full", "system_auth", timeout=timeout)
                    break
                except Exception as exc:  # a member just joined: gossip still settling
                    if time.monotonic() > deadline:
                        raise ServerError(f"system_auth repair on {member.name} failed: {exc}") from exc
                    time.sleep(2)


def stop_leftovers() -> list[str]:
    """Kill the members a previous ring across emulated hosts left running (their launch records
    under ``$ASGARD_HOME/run/hosts``): their namespaces are gone with a tear-down, but a process
    outlives the namespace's name, and a new member in the same directory would take it for itself."""
    import json

    killed = []
    for record in sorted(run_dir("hosts").glob("h*/cassandra/node*/launch.json")):
        try:
            index = json.loads(record.read_text())["index"]
            member = CassandraNode.launched(index, workdir=record.parent)
        except (ValueError, KeyError, ServerError):
            continue
        if member.kill():
            killed.append(member.name)
    return killed


def this_host_members(addresses: list[str], seeds: list[str], ring_ca: str, datacenter: str = "dc1",
                      rack: str = "rack1", replication_factor: int = 3, heap: str | None = None,
                      first_index: int = 101) -> list[CassandraNode]:
    """The members this machine runs in a ring across hosts (``asgard cassandra host up``): one
    per NUMA node, each on its own address of this host (``addresses``, one per instance: IP
    aliases on real hosts), planned and pinned as ``asgard cassandra up`` plans them."""
    from ..numa import local_plan

    plans = local_plan(len(addresses), heap=heap)
    return [CassandraNode(index=first_index + n, nodes=max(2, len(seeds)), placement=plan, address=address,
                          workdir=run_dir("cassandra", f"host-{address}"), fast_start=False, seeds=seeds,
                          datacenter=datacenter, rack=rack, ring_ca=ring_ca, replication_factor=replication_factor,
                          system_properties=dict(MEMBER_PROPERTIES))
            for n, (address, plan) in enumerate(zip(addresses, plans))]


def launched_host_members() -> list[CassandraNode]:
    """The members of a ring across hosts this machine was started with (their launch records)."""
    import json

    members = []
    for record in sorted(run_dir("cassandra").glob("host-*/launch.json")):
        try:
            members.append(CassandraNode.launched(json.loads(record.read_text())["index"], workdir=record.parent))
        except (ValueError, KeyError, ServerError):
            continue
    return members


@contextlib.contextmanager
def emulated_host_ring(count: int = 3, replication_factor: int = 3, heap: str = "768M",
                       instances_per_host: int | None = 1, extra_hosts: int = 0):
    """``count`` emulated hosts (network namespaces with two fake NUMA nodes each) running one ring
    of the project's Cassandra; yields ``(hosts, ring)`` and tears both down afterwards. The ring's
    CA is made in ``run/hosts-ring-ca`` (its key there, never on a member). ``extra_hosts`` more
    namespaces are made but left out of the ring (for a host that joins later).
    ``instances_per_host`` caps the one-per-NUMA-node plan (1 on a 2-core machine)."""
    import shutil

    from ..network.hosts import EmulatedHosts

    stop_leftovers()
    shutil.rmtree(run_dir("hosts"), ignore_errors=True)
    hosts = EmulatedHosts(count + extra_hosts, numa_nodes=2, addresses_per_host=instances_per_host).up()
    ring = None
    try:
        ca = run_dir("hosts-ring-ca")
        shutil.rmtree(ca)
        ca.mkdir()
        create_ring_ca(ca)  # the operator's first step: members never make a CA or password of their own
        ring = HostRing(hosts.hosts[:count], ring_ca=ca, heap=heap, instances_per_host=instances_per_host,
                        replication_factor=replication_factor)
        ring.start()
        yield hosts, ring
    finally:
        if ring is not None:
            ring.stop()
        hosts.down()
        shutil.rmtree(run_dir("hosts"), ignore_errors=True)
