"""The ``asgard`` command line: run the servers, benchmarks and the tuner.

    asgard cassandra up [--nodes N] [--set knob=value ...]   install on first use, start, wait for CQL
    asgard cassandra status | down | restart [--set knob=value]
    asgard cassandra host ca-init | cert-request | cert-sign | up | agent | leave   a ring across hosts
    asgard redis|minio up | down | status                     the baseline servers
    asgard stores up | down | status [--network cloud]        all three at once (behind a network profile)
    asgard hosts up | down | status | env [--count 3]         the emulated deployment: hosts, ring, broker, workers (Dagster's and Airflow's)
    asgard workers up | down | status                         one Dagster celery worker per emulated host
    asgard bench io [--json]                                  store throughput and memory, every backend
    asgard bench apps [--json]                                Perf/$ and latency of the apps on every backend
    asgard bench dynamic [--json]                             bursts of apps: static default, static tuned, Asgard
    asgard bench scaling [--json]                             1 and N pinned Cassandra instances against one unpinned
    asgard tune ...                                           the tuner (calibrate, rank, fit, evaluate, recommend)
    asgard airflow purge [--dag-id D] [--run-id R] [--older-than 7d]   stored XCom values of runs Airflow no longer has
"""
from __future__ import annotations

import json
import sys

import click
import yaml


def _parse_sets(pairs: tuple[str, ...]) -> dict:
    overrides = {}
    for pair in pairs:
        if "=" not in pair:
            raise click.BadParameter(f"{pair!r} is not knob=value (e.g. concurrent_writes=64)", param_hint="--set")
        name, value = pair.split("=", 1)
        overrides[name.strip()] = yaml.safe_load(value)  # 64 -> int, true -> bool, 512MiB -> str
    return overrides


def _print_status(rows: list[dict], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    for row in rows:
        state = "ready" if row.get("ready") else ("running" if row.get("running") else "stopped")
        extra = f" overrides={row['overrides']}" if row.get("overrides") else ""
        where = f"pid={row.get('pid')} log={row['log']}" if "link_mbit" not in row else row["log"]
        click.echo(f"{row['name']:<14} {state:<8} {row.get('endpoint', ''):<18} {where}{extra}")
        for line in _placement_lines(row):
            click.echo(f"{'':<14} {line}")


def _placement_lines(row: dict) -> list[str]:
    """A server's NUMA plan (Cassandra: cpus, mems, heap, memtable space) and its binding as
    /proc shows it, checked against the plan it was launched with."""
    lines = []
    if row.get("placement_text"):
        when = "launched with" if row.get("running") else "plan"
        lines.append(f"{when}: {row['placement_text']}")
    elif "placement" in row and row.get("running"):
        # started by an older version, or as a standalone node: its heap is not on record here
        nxt = f"; a restart here plans: {row['placement_next']}" if row.get("placement_next") else ""
        lines.append(f"launched without a NUMA plan{nxt}")
    binding = row.get("binding")
    if binding:
        if binding["planned"] is None:
            verdict = "not pinned"
        elif binding["ok"]:
            verdict = "as planned"
        else:
            verdict = "MISMATCH: " + "; ".join(binding["problems"])
        lines.append(f"/proc/{row.get('pid')}: {binding['text']} ({verdict})")
    return lines


@click.group()
def main():
    """asgard-dagster: ephemeral Dagster op outputs in a self-tuning Apache Cassandra."""


# --- Cassandra ---------------------------------------------------------------------------
@main.group()
def cassandra():
    """The embedded Cassandra (one instance per NUMA node on big servers)."""


def _cluster(nodes: int | None):
    from asgard.resources.cassandra.cluster import local_cluster

    return local_cluster(nodes)


@cassandra.command("up")
@click.option("--nodes", type=int, default=None, help="Instances on 127.0.0.1..N (default: as before, or 1).")
@click.option("--set", "sets", multiple=True, help="cassandra.yaml override knob=value, kept for later starts.")
@click.option("--secure", is_flag=True,
              help="TLS-only CQL with a local CA, a generated superuser (password in a 0600 file) instead of "
              "cassandra/cassandra, and JMX authentication. Kept for later starts. One node only.")
def cassandra_up(nodes, sets, secure):
    """Install (first use), start and wait until CQL answers. Idempotent."""
    cluster = _cluster(nodes)
    if secure:
        if len(cluster.nodes) > 1:
            # each node would get its own CA and superuser, and internode traffic stays plain
            raise click.UsageError("--secure sets up one node; run `asgard cassandra down` and "
                                   "`asgard cassandra up --nodes 1 --secure`")
        cluster.nodes[0].secure = True
    if sets:
        for node in cluster.nodes:
            node.set_overrides(_parse_sets(sets))
    for name, seconds in cluster.start().items():
        click.echo(f"{name} ready in {seconds:.1f}s")
    _print_status(cluster.status(), False)
    from asgard.resources.cassandra.node import SUPERUSER

    for node in cluster.nodes:
        if node.secure:
            click.echo(f"{node.name} is secure: TLS with CA {node.tls.ca_cert}; superuser {SUPERUSER}, "
                       f"password in {node.password_file} (mode 0600). For the IO manager:\n"
                       f"  export CASSANDRA_USER={SUPERUSER}\n"
                       f"  export CASSANDRA_PASSWORD=\"$(cat {node.password_file})\"\n"
                       f"  CassandraIOManager(cassandra=CassandraResource(contact_points=[\"{node.address}\"], "
                       f"ssl_ca_file=\"{node.tls.ca_cert}\", "
                       "username=EnvVar(\"CASSANDRA_USER\"), password=EnvVar(\"CASSANDRA_PASSWORD\")))")


@cassandra.command("down")
def cassandra_down():
    """Stop every local instance (drain first). Idempotent."""
    cluster = _cluster(None)
    cluster.stop()
    _print_status(cluster.status(), False)


@cassandra.command("status")
@click.option("--json", "as_json", is_flag=True)
def cassandra_status(as_json):
    _print_status(_cluster(None).status(), as_json)


@cassandra.command("restart")
@click.option("--set", "sets", multiple=True, help="cassandra.yaml override knob=value to apply.")
@click.option("--reset", is_flag=True, help="Drop all overrides (back to the project's defaults).")
def cassandra_restart(sets, reset):
    """Rolling restart, optionally with changed knobs."""
    cluster = _cluster(None)
    if reset:
        for node in cluster.nodes:
            node.set_overrides({}, replace=True)
    overrides = _parse_sets(sets) if sets else None
    for record in cluster.rolling_restart(overrides):
        click.echo(f"{record['member']} restarted in {record['restart_seconds']:.1f}s "
                   f"(drain {record['drain_seconds']:.1f}s)")
    _print_status(cluster.status(), False)


@cassandra.group("host")
def cassandra_host():
    """This machine as one host of a ring across hosts (one instance per NUMA node, one ring)."""


@cassandra_host.command("up")
@click.option("--address", "addresses", multiple=True, required=True,
              help="This host's address for each instance (one per NUMA node: IP aliases).")
@click.option("--seeds", required=True, help="Comma-separated seed addresses: the first instance of up to three hosts.")
@click.option("--ring-ca", required=True, type=click.Path(file_okay=False),
              help="The ring's CA directory: ca.pem and superuser.password, and either ca.key (the host that ran "
              "`host ca-init`: it issues this host's certificates) or a signed member-<address>.pem per address "
              "(`host cert-request` here, `host cert-sign` there). The key never goes to a node's own directory.")
@click.option("--datacenter", default="dc1", show_default=True)
@click.option("--rack", default="rack1", show_default=True, help="This host's rack: replicas go to other racks.")
@click.option("--replication-factor", type=int, default=3, show_default=True,
              help="The keyspaces' replication factor, for which tokens are allocated.")
@click.option("--heap", default=None, help="Heap per instance (default: the NUMA plan's rule).")
def cassandra_host_up(addresses, seeds, ring_ca, datacenter, rack, replication_factor, heap):
    """Start this host's members and join the ring (a member new to a running ring bootstraps)."""
    from asgard.resources.cassandra.hosts import ring_desired_overrides, this_host_members
    from asgard.resources.cassandra.ring_ca import RingFileMissing
    from asgard.resources.cassandra.tls import CertificateError

    seed_list = [s for s in seeds.split(",") if s]
    others = [s for s in seed_list if s not in addresses]
    try:  # a member joining a running ring starts on its desired configuration, replaying no older order
        overrides = ring_desired_overrides(others, ring_ca) if others else None
    except (RingFileMissing, CertificateError) as exc:
        raise click.ClickException(str(exc)) from exc
    if overrides:
        click.echo(f"the ring's desired configuration: {overrides}")
    for member in this_host_members(list(addresses), seed_list, ring_ca, datacenter,
                                    rack, replication_factor, heap):
        try:
            if overrides:
                member.set_overrides(overrides)
            seconds = member.start()
        except (RingFileMissing, CertificateError) as exc:
            raise click.ClickException(str(exc)) from exc  # what to copy or run, without a traceback
        click.echo(f"{member.name} at {member.address} ready in {seconds:.1f}s")


_RING_CA_OPTION = click.option("--ring-ca", required=True, type=click.Path(file_okay=False),
                               help="The ring's CA directory on this host.")


@cassandra_host.command("ca-init")
@_RING_CA_OPTION
def cassandra_host_ca_init(ring_ca):
    """Make the ring's one CA and superuser password (once, on the first host; refuses a directory with a CA)."""
    from pathlib import Path

    from asgard.resources.cassandra.ring_ca import create_ring_ca
    from asgard.resources.cassandra.tls import CertificateError

    try:
        ring = create_ring_ca(Path(ring_ca))
    except CertificateError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"the ring's CA: {ring.ca_cert} (every host and client), {ring.ca_key} (this host only, 0600)")
    click.echo(f"the ring's superuser password: {ring.superuser_password} (copy to every host's --ring-ca, 0600)")
    click.echo("another host: copy ca.pem and superuser.password to its --ring-ca, then run `asgard cassandra host "
               "cert-request` there and `asgard cassandra host cert-sign` here for each of its addresses")


@cassandra_host.command("cert-request")
@_RING_CA_OPTION
@click.option("--address", "addresses", multiple=True, required=True,
              help="A member's address on this host (one request each).")
def cassandra_host_cert_request(ring_ca, addresses):
    """On a host without the ring's ca.key: a key (kept here, 0600) and a certificate request per member."""
    from pathlib import Path

    from asgard.resources.cassandra.ring_ca import request_member_certificate
    from asgard.resources.cassandra.tls import CertificateError

    for address in addresses:
        try:
            request = request_member_certificate(Path(ring_ca), address)
        except CertificateError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(f"{request}: copy it to the host with the ring's ca.key and run `asgard cassandra host cert-sign "
                   f"--ring-ca <its ring CA directory> {request.name}` there; copy the {request.stem}.pem it writes "
                   f"back to {Path(ring_ca) / (request.stem + '.pem')}")


@cassandra_host.command("cert-sign")
@_RING_CA_OPTION
@click.argument("requests", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
def cassandra_host_cert_sign(ring_ca, requests):
    """On the host with the ring's ca.key: sign members' certificate requests (member-<address>.csr),
    each certificate written beside its request as member-<address>.pem."""
    from pathlib import Path

    from asgard.resources.cassandra.ring_ca import sign_member_request
    from asgard.resources.cassandra.tls import CertificateError

    for request in requests:
        try:
            cert = sign_member_request(Path(ring_ca), Path(request))
        except CertificateError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(f"{cert}: copy it back to the requesting host's --ring-ca directory as {cert.name}")


@cassandra_host.command("agent")
@click.option("--once", is_flag=True, help="Carry out the open orders once and exit (default: loop).")
@click.option("--name", default=None, help="This host's name in the ring's records (default: its hostname).")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds between polls of the orders.")
def cassandra_host_agent(once, name, interval):
    """Take this host's orders from the ring (resources/cassandra/host_agent.py) and carry them out;
    first start any member of this host that is down, on the ring's desired configuration.
    SIGTERM stops it after the order in hand."""
    import signal
    import socket
    import threading
    import time

    from asgard.resources.cassandra.hosts import launched_host_members
    from asgard.resources.cassandra.host_agent import READY_LINE
    from asgard.resources.cassandra.host_agent import HostAgent
    from asgard.resources.stores.cql import build_cluster

    members = launched_host_members()
    if not members:
        raise click.ClickException("no member of a ring across hosts runs here: `asgard cassandra host up` first")
    first = members[0]
    # its own members and the seeds: with every member of this host down, the ring still answers
    contacts = list(dict.fromkeys([m.address for m in members] + list(first.seeds or [])))

    def connect():
        cluster = build_cluster(contacts, username="asgard_admin", password=first.superuser_password(),
                                tls=(str(first.tls.ca_cert), None, None, True), connect_timeout=10, admin=True)
        return cluster.connect()

    agent = HostAgent(name or socket.gethostname(), members, connect)
    try:
        started, how = agent.start_members(), "on the ring's desired configuration"
    except Exception as exc:  # e.g. NoHostAvailable
        # no member answers (this host's are down, the others out of reach or down): the ring
        # cannot come back without this host's members, so they start as they last ran; a newer
        # order reaches them at the next poll
        agent.reset_session()
        click.echo(f"the ring does not answer ({type(exc).__name__}: {str(exc)[:200]})")
        started, how = agent.start_members(overrides={}), "as it last ran"
    for member in started:
        click.echo(f"{member.name} at {member.address} was down: started {how}")
    deadline = time.monotonic() + 300
    while True:  # ready once the ring has its heartbeat
        try:
            agent.heartbeat()
            break
        except Exception as exc:
            agent.reset_session()
            if time.monotonic() > deadline:
                raise click.ClickException(f"the ring took no heartbeat for 300 s: {exc}") from exc
            time.sleep(2)
    click.echo(f"agent of {agent.host} {READY_LINE} {', '.join(m.address for m in members)}")
    if once:
        for record in agent.poll_once():
            click.echo(record)
        return
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    agent.run(stop, interval=interval, report=click.echo)


@cassandra_host.command("leave")
def cassandra_host_leave():
    """Decommission this host's members (their ranges stream to the others), then stop them."""
    from asgard.resources.cassandra.hosts import launched_host_members

    for member in launched_host_members():
        member.nodetool("decommission", timeout=1800)
        member.stop()
        click.echo(f"{member.name} at {member.address} decommissioned and stopped")


# --- baseline servers --------------------------------------------------------------------
def _baseline(kind: str):
    if kind == "redis":
        from asgard.resources.redis import RedisServer

        return RedisServer()
    from asgard.resources.minio import MinioServer

    return MinioServer()


def _server_group(kind: str):
    @main.group(name=kind, help=f"The local {kind} server used as a baseline.")
    def group():
        pass

    @group.command("up")
    def up():
        server = _baseline(kind)
        click.echo(f"{server.name} ready in {server.start():.1f}s")
        _print_status([server.status()], False)

    @group.command("down")
    def down():
        server = _baseline(kind)
        server.stop()
        _print_status([server.status()], False)

    @group.command("status")
    @click.option("--json", "as_json", is_flag=True)
    def status(as_json):
        _print_status([_baseline(kind).status()], as_json)

    return group


_server_group("redis")
_server_group("minio")


@main.group()
def stores():
    """Cassandra, Redis and MinIO together."""


def _network_option(help_extra: str = ""):
    from asgard.resources.network import profile_names

    return click.option("--network", "network", default="loopback", show_default=True,
                        type=click.Choice(profile_names()),
                        help="Network profile (resources/network/profiles.yaml): under one other than loopback each "
                        "server runs in a namespace of its own behind the profile's link." + help_extra)


@stores.command("up")
@_network_option()
def stores_up(network):
    if network != "loopback":
        from asgard.resources.network import Deployment

        deployment = Deployment(network)
        for name, seconds in deployment.up().items():
            click.echo(f"{name} ready in {seconds:.1f}s")
        _print_status(deployment.status(), False)
        for row in deployment.status():
            click.echo(f"{row['name']:<14} {row['namespace']}: {row['link']}")
        return
    cluster = _cluster(None)
    cluster.start()
    servers = [_baseline("redis"), _baseline("minio")]
    for server in servers:
        server.start()
    _print_status(cluster.status() + [s.status() for s in servers], False)


@stores.command("down")
@_network_option()
def stores_down(network):
    if network != "loopback":
        from asgard.resources.network import Deployment, leftovers

        Deployment(network).down()
        left = leftovers()
        click.echo(f"stopped; namespaces and links removed (left: {left})")
        return
    _cluster(None).stop()
    for kind in ("redis", "minio"):
        _baseline(kind).stop()
    click.echo("stopped")


@stores.command("status")
@_network_option()
@click.option("--json", "as_json", is_flag=True)
def stores_status(network, as_json):
    if network != "loopback":
        from asgard.resources.network import Deployment

        _print_status(Deployment(network).status(), as_json)
        return
    _print_status(_cluster(None).status() + [_baseline(k).status() for k in ("redis", "minio")], as_json)


# --- the emulated deployment of a distributed executor -----------------------------------------
@main.group()
def hosts():
    """Emulated hosts (network namespaces), each with its ring member and its Dagster and Airflow
    celery workers, and the broker (Redis on this machine's bridge address) and Airflow's API server
    beside it: one run's steps or tasks across the hosts."""


def _deployment(**kwargs):
    from asgard.resources.workers.deployment import EmulatedDeployment

    return EmulatedDeployment(**kwargs)


@hosts.command("up")
@click.option("--count", type=int, default=None, help="Hosts (default: as before, or 3).")
@click.option("--heap", default=None, help="Heap of each host's ring member (default: as before, or 768M).")
@click.option("--code-path", "code_paths", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="A directory the workers import the jobs' code from (repeatable; default: as before, or none).")
@click.option("--worker-concurrency", type=int, default=None, help="Steps each worker runs at once (default 1).")
@click.option("--airflow-dags", type=click.Path(exists=True, file_okay=False), default=None,
              help="The Airflow workers' DAGs folder (default: as before, or the project's pipelines/airflow_dags).")
@click.option("--link-mbit", type=click.IntRange(0), default=None,
              help="Each host's link, Mbit/s each way (tc HTB on its veth pair; 750: an EC2 i3.large's sustained "
                   "bandwidth; 0: unshaped; default: as before, or unshaped). Traffic within a host is not shaped.")
def hosts_up(count, heap, code_paths, worker_concurrency, airflow_dags, link_mbit):
    """Bring up the whole deployment; what already runs is kept. Idempotent."""
    deployment = _deployment(count=count, heap=heap, code_paths=list(code_paths) or None,
                             worker_concurrency=worker_concurrency, airflow_dags=airflow_dags,
                             link_mbit=link_mbit).up()
    for name, seconds in deployment.seconds.items():
        click.echo(f"{name} ready in {seconds:.1f}s")
    _print_status(deployment.status(), False)
    click.echo("for a run coordinator here: eval \"$(asgard hosts env)\"; the job's executor: celery_executor "
               "with broker {env: ASGARD_CELERY_BROKER} and backend {env: ASGARD_CELERY_BACKEND} (or "
               "asgard_dagster.step_routing's host_routed_celery_executor, host_queues: $ASGARD_CELERY_HOST_QUEUES)")


@hosts.command("down")
def hosts_down():
    """Stop the workers, the ring, the broker; remove the hosts and the ring's data. Idempotent."""
    _deployment().down()
    from asgard.resources.network.namespace import namespaces

    left = [n for n in namespaces() if n.startswith("asgard-h")]
    click.echo(f"stopped; hosts removed (left: {left})")


@hosts.command("status")
@click.option("--json", "as_json", is_flag=True)
def hosts_status(as_json):
    _print_status(_deployment().status(), as_json)


@hosts.command("env")
@click.option("--airflow", is_flag=True, help="Airflow's settings too (AIRFLOW__*: the CeleryExecutor on the hosts, "
              "the deployment's database and API server), for `airflow dags test --use-executor` or a scheduler here.")
def hosts_env(airflow):
    """Shell exports of the ring's login and the broker (they hold passwords: for this machine's shell)."""
    import shlex

    deployment = _deployment()
    exports = {**deployment.client_environment(), **(deployment.airflow_coordinator_environment() if airflow else {})}
    for name, value in exports.items():
        click.echo(f"export {name}={shlex.quote(value)}")


@main.group()
def workers():
    """One Dagster celery worker per emulated host (`asgard hosts up` starts them with the hosts)."""


@workers.command("up")
def workers_up():
    """Start every host's worker (the hosts and the broker must be up). Idempotent."""
    from asgard.resources.workers.deployment import DeploymentError

    deployment = _deployment()
    try:
        for name, seconds in deployment.workers_up().items():
            click.echo(f"{name} ready in {seconds:.1f}s")
    except DeploymentError as exc:
        raise click.ClickException(str(exc)) from exc
    _print_status([w.status() for w in deployment.workers()], False)


@workers.command("down")
def workers_down():
    """Stop every host's worker (a step running finishes first). Idempotent."""
    deployment = _deployment()
    deployment.workers_down()
    _print_status([w.status() for w in deployment.workers()], False)


@workers.command("status")
@click.option("--json", "as_json", is_flag=True)
def workers_status(as_json):
    _print_status([w.status() for w in _deployment().workers()], as_json)


def _mount_optional(parent: click.Group, module: str, attr: str) -> None:
    """Attach a command from another module, if it is installed here."""
    import importlib

    try:
        command = getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        if exc.name != module:  # a missing dependency inside it is a real error
            raise
        return
    parent.add_command(command)


_mount_optional(main, "asgard.tuner.cli", "tune")
_mount_optional(main, "asgard_bench.cli", "bench")
_mount_optional(main, "asgard_airflow.cli", "airflow")

if __name__ == "__main__":
    sys.exit(main())
