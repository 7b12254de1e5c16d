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
DIR`` and ``asgard cassandra host agent``; a host without ``ca.key`` in DIR gets its members'
certificates by ``host cert-request`` there and ``host cert-sign`` on the CA's host (:mod:`.ring_ca`).
Here the hosts are network namespaces (:class:`~asgard.resources.network.hosts.EmulatedHosts`),
each with a filesystem root of its own (``host.root``: its members' directories, its ``ring-ca``).
They share no file but what an operator copies (:meth:`HostRing.provision`): ``ca.pem`` and
``superuser.password`` to each host, a certificate request from it to the CA's machine, the signed
certificate back. ``ca.key`` stays in ``ring_ca`` on the operator's machine, outside every host. Each
host's agent is a process in its namespace on its root (:class:`~.host_agent.HostAgentProcess`).

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

from ..paths import asgard_home, run_dir
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
            workdir=member_workdir(host.root, address), fast_start=False, seeds=self.seeds,
            datacenter=self.datacenter, rack=f"rack{host.number}", ring_ca=str(host_ring_ca(host.root)),
            replication_factor=self.replication_factor, system_properties=dict(MEMBER_PROPERTIES))

    def provision(self, host) -> list[Path]:
        """What an operator copies to ``host`` before its members start, and nothing else: the
        ring's ``ca.pem`` and ``superuser.password`` into its ``ring-ca``; per member, the certificate
        request made there (its key never leaves it) carried to ``ring_ca``, signed, and the
        certificate carried back. Returns the files copied onto the host."""
        from .ring_ca import RingCADirectory, request_member_certificate, sign_member_request

        operator, own = RingCADirectory(self.ring_ca), RingCADirectory(host_ring_ca(host.root))
        own.directory.mkdir(parents=True, exist_ok=True)
        copied = [_copy(operator.ca_cert, own.ca_cert), _copy(operator.superuser_password, own.superuser_password)]
        inbox = self.ring_ca / "requests"
        inbox.mkdir(exist_ok=True)
        for member in self.members_of(host):
            if own.member_cert(member.address).exists():
                continue
            request = _copy(request_member_certificate(own.directory, member.address),
                            inbox / own.member_request(member.address).name)
            copied.append(_copy(sign_member_request(self.ring_ca, request), own.member_cert(member.address)))
        return copied

    def members_of(self, host) -> list[CassandraNode]:
        return [m for m in self.members if m.netns == host.netns]

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> dict[str, float]:
        """Start every member, the first seed first, then one at a time (Cassandra joins one
        bootstrapping member at a time), and replicate ``system_auth`` across the hosts."""
        seconds = {}
        for host in self.hosts:
            self.provision(host)
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
        """The :class:`~.host_agent.HostAgent` of ``host`` (its members) in this process, connected with the ring's login."""
        from .host_agent import HostAgent

        return HostAgent(host.name, self.members_of(host), self.session)

    def agent_process(self, host):
        """``asgard cassandra host agent`` of ``host``: a process in its namespace, on its root."""
        from .host_agent import HostAgentProcess

        return HostAgentProcess(host.name, host.root, netns=host.netns)

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
        joined = [self._member(len(self.hosts), host, n, address)
                  for n, address in enumerate(host.addresses[: self._per_host(host)])]
        self.hosts.append(host)
        self.members.extend(joined)
        self.provision(host)
        for member in joined:
            member.set_overrides(overrides)
            member.start()
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
        # a member that checked a role before the repair may keep that answer ("not a superuser") up to
        # AUTH_CACHES' validity: every member drops its cached roles and permissions
        for member in self.members:
            for cache in ("invalidaterolescache", "invalidatepermissionscache"):
                member.nodetool(cache, timeout=timeout)


def stop_leftovers() -> list[str]:
    """Kill the members a previous ring across emulated hosts left running (their launch records
    under ``$ASGARD_HOME/run/hosts``): their namespaces are gone with a tear-down, but a process
    outlives the namespace's name, and a new member in the same directory would take it for itself."""
    import json

    from .host_agent import HostAgentProcess

    killed = []
    for root in sorted(run_dir("hosts").glob("h*/")):  # agents first: one would restart what is killed
        agent = HostAgentProcess(root.name, root)
        if agent.kill():
            killed.append(agent.name)
    for record in sorted(run_dir("hosts").glob("h*/run/cassandra/host-*/launch.json")):
        try:
            index = json.loads(record.read_text())["index"]
            member = CassandraNode.launched(index, workdir=record.parent)
        except (ValueError, KeyError, ServerError):
            continue
        if member.kill():
            killed.append(member.name)
    return killed


def member_workdir(root: Path, address: str) -> Path:
    """The directory of the member at ``address`` on the host whose ``ASGARD_HOME`` is ``root``
    (where ``asgard cassandra host up`` puts it, and ``host agent`` finds it)."""
    return Path(root) / "run" / "cassandra" / f"host-{address}"


def host_ring_ca(root: Path) -> Path:
    """The ``--ring-ca`` directory of the host whose ``ASGARD_HOME`` is ``root``."""
    return Path(root) / "ring-ca"


def _copy(source: Path, target: Path) -> Path:
    """``source`` copied to ``target`` with its mode (0600 stays 0600), as an operator's ``scp -p``."""
    import shutil

    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)
    return target


def this_host_members(addresses: list[str], seeds: list[str], ring_ca: str, datacenter: str = "dc1",
                      rack: str = "rack1", replication_factor: int = 3, heap: str | None = None,
                      first_index: int = 101) -> list[CassandraNode]:
    """The members this machine runs in a ring across hosts (``asgard cassandra host up``): one
    per NUMA node, each on its own address of this host (``addresses``, one per instance: IP
    aliases on real hosts), planned and pinned as ``asgard cassandra up`` plans them."""
    from ..numa import local_plan

    plans = local_plan(len(addresses), heap=heap)
    return [CassandraNode(index=first_index + n, nodes=max(2, len(seeds)), placement=plan, address=address,
                          workdir=member_workdir(asgard_home(), address), fast_start=False, seeds=seeds,
                          datacenter=datacenter, rack=rack, ring_ca=ring_ca, replication_factor=replication_factor,
                          system_properties=dict(MEMBER_PROPERTIES))
            for n, (address, plan) in enumerate(zip(addresses, plans))]


def ring_desired_overrides(seeds: list[str], ring_ca: str | Path) -> dict[str, Any] | None:
    """The ring's desired configuration (:func:`~.orders.desired_overrides`), read from its seeds
    with the ring's login: what a member that (re)starts on a host takes. None where no seed
    answers (the ring's first start); empty where no order was ever given."""
    from cassandra.cluster import NoHostAvailable

    from ..stores.cql import build_cluster
    from .orders import RingControl, desired_overrides
    from .ring_ca import RingCADirectory, ring_superuser_password

    ring = RingCADirectory(Path(ring_ca))
    cluster = build_cluster(list(seeds), username=SUPERUSER,
                            password=ring_superuser_password(ring.directory, ",".join(seeds)).strip(),
                            tls=(str(ring.ca_cert), None, None, True), connect_timeout=5, admin=True)
    try:
        session = cluster.connect()
    except NoHostAvailable:
        cluster.shutdown()
        return None
    try:
        return desired_overrides(session) if RingControl(session).exists() else {}
    finally:
        cluster.shutdown()


def launched_host_members(root: Path | None = None) -> list[CassandraNode]:
    """The members of a ring across hosts this machine was started with (their launch records
    under ``root``, this process's ``ASGARD_HOME`` by default)."""
    import json

    members = []
    for record in sorted(member_workdir(root or asgard_home(), "*").parent.glob("host-*/launch.json")):
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
