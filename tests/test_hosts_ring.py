"""The project's Cassandra as one ring across hosts, emulated on this machine: network namespaces
on a bridge, each with its own address and a fake sysfs of two NUMA nodes, one CA for the ring,
internode and client TLS, one superuser. Shared by every test here (a ring takes minutes to form);
tests through real Dagster runs on the multiprocess executor, whose steps reach the ring by the
hosts' addresses."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from asgard.resources.cassandra.hosts import emulated_host_ring
from asgard.resources.numa import numa_nodes
from asgard.resources.stores import ObjectKey, StoreUnavailableError

pytestmark = pytest.mark.usefixtures("forked_steps")


@pytest.fixture(scope="module")
def hosts_and_ring():
    # one instance per host on this 2-core machine (each host's NUMA plan has two: test below);
    # a 4th host is made but joins later
    with emulated_host_ring(3, replication_factor=3, heap="768M", instances_per_host=1, extra_hosts=1) as (hosts, ring):
        os.environ.update(ASGARD_RING_CONTACTS=",".join(m.address for m in ring.members),
                          ASGARD_RING_CA=str(ring.ring_ca / "ca.pem"), ASGARD_RING_USER="asgard_admin",
                          ASGARD_RING_PASSWORD=ring.superuser_password())
        yield hosts, ring
        addresses = [h.address for h in hosts.hosts]  # the 4th host's too: it joins and leaves here
    # this process's driver sessions to the ring go with it (one kept reconnecting to the gone ring's
    # addresses through the next module, its certificate now refused by the next ring's CA)
    from asgard.resources.stores.cql import close_sessions

    close_sessions(addresses)


@pytest.fixture(scope="module")
def hosts(hosts_and_ring):
    return hosts_and_ring[0]


@pytest.fixture(scope="module")
def ring(hosts_and_ring):
    return hosts_and_ring[1]


def _events(instance):
    from dagster import DagsterEventType, EventRecordsFilter

    records = instance.get_event_records(EventRecordsFilter(event_type=DagsterEventType.STEP_SUCCESS))
    return [r.event_log_entry.dagster_event for r in records]


def _run_job(instance, outcome: dict):
    from dagster import execute_job, reconstructable

    from asgard.pipelines.ring_check import hosts_ring_job
    from tests.forkserver_steps import forkserver_with_this_environment

    forkserver_with_this_environment()  # a test sets ASGARD_RING_STEP_SLEEP for its runs
    with execute_job(reconstructable(hosts_ring_job), instance=instance) as result:
        outcome["success"] = result.success
        outcome["run_id"] = result.run_id
        outcome["total"] = result.output_for_node("gather") if result.success else None
        outcome["failures"] = [str(e.event_specific_data.error.message)[:300]
                               for e in result.all_events if e.is_step_failure]


def test_each_host_has_its_own_numa_topology_and_the_ring_spans_the_hosts(hosts, ring):
    for host in hosts.hosts:
        nodes = numa_nodes(host.sysfs_nodes)
        assert len(nodes) == 2 and all(n.cpus for n in nodes)
    status = ring.members[0].nodetool("status")
    for member, host in zip(ring.members, hosts.hosts):
        line = next(line for line in status.splitlines() if f" {member.address} " in f" {line} ")
        assert line.startswith("UN") and line.rstrip().endswith(f"rack{host.number}"), status
    # each member runs inside its host's namespace, listening on the host's address
    for member, host in zip(ring.members, hosts.hosts):
        assert member.netns == host.netns and member.address == host.address
        assert member.config()["listen_address"] == member.config()["rpc_address"] == host.address
        assert member.config()["endpoint_snitch"] == "GossipingPropertyFileSnitch"


def test_one_ca_for_the_ring_its_key_on_no_node_and_internode_traffic_is_tls(ring, hosts):
    ca = ring.ring_ca / "ca.pem"
    for member in ring.members:
        assert not (member.tls.directory / "ca.key").exists()
        assert (member.tls.ca_cert.read_bytes() == ca.read_bytes())
        assert member.config()["server_encryption_options"]["internode_encryption"] == "all"
    # the storage port of another host answers TLS with a certificate the ring's CA signed
    probe = subprocess.run(
        [*hosts[0].exec_prefix(), "openssl", "s_client", "-connect", f"{ring.members[1].address}:7000",
         "-CAfile", str(ca), "-verify_return_error", "-brief"],
        input="", capture_output=True, text=True, timeout=30)
    text = probe.stdout + probe.stderr
    assert "Verification: OK" in text or "Verify return code: 0" in text, text
    assert "asgard ring CA" in text or "CONNECTION ESTABLISHED" in text, text


def test_a_client_without_the_rings_ca_or_with_a_wrong_password_gets_a_typed_error(ring):
    from asgard.resources.stores.cql import CassandraObjectStore

    options = ring.client_options()
    plain = {k: v for k, v in options.items() if not k.startswith("ssl_")}
    with pytest.raises(StoreUnavailableError, match="ssl_ca_file"):
        CassandraObjectStore(**plain, keyspace="asgard_hosts", ride_through_seconds=0).ping()
    with pytest.raises(StoreUnavailableError, match="refused the login"):
        CassandraObjectStore(**{**options, "password": "not-the-password"}, keyspace="asgard_hosts",
                             ride_through_seconds=0).ping()


def test_one_runs_outputs_land_on_every_host(ring, dagster_instance):
    outcome: dict = {}
    _run_job(dagster_instance, outcome)
    assert outcome["success"], outcome["failures"]
    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(**ring.client_options(), keyspace="asgard_hosts")
    partitions = store.partitions(f"run/{outcome['run_id']}")
    assert partitions
    session = store.session
    owners = set()
    for path, version, group in partitions:
        key = store.statements.get("select_chunk").bind((f"run/{outcome['run_id']}", path, version, group, 0)).routing_key
        owners |= {h.address for h in session.cluster.metadata.get_replicas("asgard_hosts", key)}
    assert owners == {m.address for m in ring.members}
    for member in ring.members:  # bytes on every host's disk
        member.nodetool("flush", "asgard_hosts")
        stats = member.nodetool("tablestats", "asgard_hosts.objects")
        live = int(next(line for line in stats.splitlines() if "Space used (live)" in line).split(":")[1])
        assert live > 0, (member.address, stats)


def test_a_host_killed_mid_run_at_rf3_local_quorum_and_the_run_succeeds(ring, hosts, dagster_instance):
    victim = hosts[2]
    outcome: dict = {}
    os.environ["ASGARD_RING_STEP_SLEEP"] = "1.5"
    worker = threading.Thread(target=_run_job, args=(dagster_instance, outcome))
    worker.start()
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not any(
                e.step_key and e.step_key.startswith("work") for e in _events(dagster_instance)):
            time.sleep(0.2)
        ring.kill(victim)
        assert "success" not in outcome, "the run ended before the host was killed"
    finally:
        worker.join(timeout=600)  # never tear the ring down under a run still going
        os.environ.pop("ASGARD_RING_STEP_SLEEP", None)
        for member in ring.members_of(victim):
            member.start()
    assert outcome.get("success"), outcome.get("failures")
    assert outcome["total"] == sum(2 * i * 200_000 for i in range(6))


def test_a_live_only_retune_across_hosts_is_applied_over_each_members_jmx_and_read_back(ring, hosts, dagster_instance):
    """Live settings only: the order restarts no member; each host's agent (a process in its
    namespace) sends them over its member's JMX and reads them back from the member, and the retune
    records a setting applied only where every member read it back."""
    import dagster as dg

    from asgard_dagster import CassandraResource
    from asgard_dagster.retune import make_retune_job
    from asgard.pipelines.jobs import make_job

    session = ring.session()

    def in_force(name: str) -> set[str]:
        return set(_setting_on_each_member(session, name).values())

    throughput = 24 if in_force("compaction_throughput") != {"24MiB/s"} else 40
    compactors = 3 if in_force("concurrent_compactors") != {"3"} else 1
    agents = [ring.agent_process(host) for host in hosts.hosts[:3]]
    app = make_job("word_count", "cassandra")
    retune = make_retune_job([app], connection=CassandraResource(
        contact_points=[m.address for m in ring.members], keyspace="asgard_hosts",
        username=dg.EnvVar("ASGARD_RING_USER"), password=dg.EnvVar("ASGARD_RING_PASSWORD"),
        ssl_ca_file=str(ring.ring_ca / "ca.pem")))
    config = {"ops": {"plan_workload": {"config": {
        "upcoming_jobs": [app.name], "keyspace": "asgard_hosts", "force": True, "evaluations": 50,
        "lookahead_seconds": 600, "probe_seconds": 0,
        "knobs": {"compaction_throughput_mib": throughput, "concurrent_compactors": compactors}}}}}
    try:
        for agent in agents:
            agent.start()
        starts = {m.address: m.pid() for m in ring.members}
        result = retune.execute_in_process(run_config=config, instance=dagster_instance)
        assert result.success
        outcome = result.output_for_node("reconfigure")
        knobs = {k["knob"]: k for k in outcome["knobs"]}
        assert knobs["compaction_throughput_mib"]["applied"] and knobs["concurrent_compactors"]["applied"], knobs
        records = outcome["restarts"]
        assert sorted(r["member"] for r in records) == sorted(m.address for m in ring.members)
        assert not any(r["restart"] for r in records)
        assert {m.address: m.pid() for m in ring.members} == starts  # no member restarted
        assert in_force("compaction_throughput") == {f"{throughput}MiB/s"}
        assert in_force("concurrent_compactors") == {str(compactors)}
    finally:
        session.cluster.shutdown()
        for agent in agents:
            agent.stop()


@pytest.mark.timeout(1500)
def test_a_nemesis_during_reconfigurations_fails_no_run_and_never_takes_two_members_down_by_orders(
        ring, hosts, dagster_instance):
    """One fault of every kind (an agent killed, the coordinator killed, a member paused, a host's
    packets dropped, a host restarted), at random, while runs loop and the retune reconfigures the
    ring at least three times (``asgard bench nemesis`` with 1 fault per kind)."""
    from asgard_bench.nemesis import FAULT_KINDS, nemesis_on
    from tests.forkserver_steps import forkserver_with_this_environment

    forkserver_with_this_environment()  # the bench's runs fork from it (the module's ring: the environment it sets)
    # a time limit under the test's: an order that never ends fails here, with the agents' logs
    rep = nemesis_on(ring, hosts.hosts[:3], dagster_instance, faults_per_kind=1, reconfigurations=3,
                     seed=int(os.environ.get("ASGARD_NEMESIS_SEED", "1")), time_limit=1200,
                     progress=lambda line: print(time.strftime("%H:%M:%S"), line, flush=True))
    outcomes = rep["outcomes"]
    print(rep["faults"], outcomes, rep["seconds"])
    assert not outcomes["timed_out"], (rep["fault_log"], rep.get("agent_logs"))
    assert rep["faults"] == {kind: 1 for kind in FAULT_KINDS}, rep["fault_log"]
    assert outcomes["faults_not_healed"] == 0, rep["fault_log"]
    assert outcomes["reconfigurations"] >= 3 and outcomes["coordinators_killed"] == 1, outcomes
    assert outcomes["runs"] >= 3 and outcomes["runs_failed"] == 0, rep["failures"]
    assert outcomes["outputs_lost"] == 0 and outcomes["outputs_read_back"] >= 13 * outcomes["runs"], outcomes
    assert outcomes["two_down_by_orders"] == 0, rep["two_down_moments"]
    assert outcomes["orders_open"] == 0, (outcomes, rep.get("agent_logs"))
    # each reconfiguration's order, and any the tests before gave
    assert outcomes["orders_closed"] + outcomes["orders_superseded"] == outcomes["orders"] >= 3
    assert outcomes["gossip_samples"] >= 100
    session = ring.session()
    try:  # every member back up, on the newest order's setting, read back from each
        wanted = {str(RingControlDesired(session)["memtable_flush_writers"])}
        in_force = _setting_on_each_member(session, "memtable_flush_writers")
        assert len(in_force) == 3 and set(in_force.values()) == wanted, (in_force, wanted)
    finally:
        session.cluster.shutdown()


def _setting_on_each_member(session, name: str, timeout: float = 120.0) -> dict[str, str]:
    """``{member: value}`` of ``system_views.settings`` asked of each member itself, asked again
    until the driver has a pool to each (just after a start or a restart)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return {h.address: session.execute("SELECT value FROM system_views.settings WHERE name = %s", (name,),
                                               host=h).one().value for h in session.cluster.metadata.all_hosts()}
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def RingControlDesired(session) -> dict:
    from asgard.resources.cassandra.orders import desired_overrides

    return desired_overrides(session)


def test_each_host_runs_on_its_own_root_and_shares_only_what_the_operator_copied(ring, hosts):
    """Each host's agent is a process in its namespace whose ``ASGARD_HOME`` is the host's root;
    every file a member runs on lies under its own host's root (or the installed software: the
    jars, the JVM), and a host holds of the ring's secrets only the CA's certificate, the password
    and its members' own certificates: ``ca.key`` is on no host."""
    from asgard.resources.paths import cache_dir

    agents = [ring.agent_process(host) for host in hosts.hosts[:3]]
    try:
        for agent in agents:
            agent.start()
        session = ring.session()
        try:
            assert RingControlAgents(session) == {m.address: m.netns for m in ring.members}
        finally:
            session.cluster.shutdown()
        for agent, host in zip(agents, hosts.hosts):
            environ = dict(line.split("=", 1) for line in
                           Path(f"/proc/{agent.pid()}/environ").read_text().split("\0") if "=" in line)
            assert environ["ASGARD_HOME"] == str(host.root)
            [member] = ring.members_of(host)
            assert os.readlink(f"/proc/{agent.pid()}/ns/net") == os.readlink(f"/proc/{member.pid()}/ns/net")
    finally:
        for agent in agents:
            agent.stop()
    import re

    hosts_dir = hosts.hosts[0].root.parent
    for host in hosts.hosts[:3]:
        [member] = ring.members_of(host)
        argv = Path(f"/proc/{member.pid()}/cmdline").read_bytes().decode()
        # the roots of hosts its command line names: its own only (the software is this machine's cache)
        named = set(re.findall(re.escape(str(hosts_dir)) + r"/(h\d+)", argv))
        assert named == {host.root.name}, named
        assert str(cache_dir()) in argv or str(host.root / "cache") in argv
        config_paths = [v for v in _strings(member.config()) if v.startswith("/")]
        assert config_paths and all(Path(v).is_relative_to(host.root) for v in config_paths), config_paths
        assert not list(host.root.rglob("ca.key"))
        held = sorted(p.name for p in (host.root / "ring-ca").iterdir())
        assert held == sorted(["ca.pem", "superuser.password", f"member-{member.address}.csr",
                               f"member-{member.address}.key", f"member-{member.address}.pem"]), held
    assert (ring.ring_ca / "ca.key").exists() and not ring.ring_ca.is_relative_to(hosts.hosts[0].root.parent)


def _strings(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str):
        yield value


def RingControlAgents(session) -> dict:
    from asgard.resources.cassandra.orders import RingControl

    return RingControl(session).agents()


def _host_cli(host, *args: str) -> str:
    """``asgard cassandra host ...`` run on ``host`` (inside its namespace, on its root), as an
    operator runs it there; ``host`` None: on the operator's machine."""
    import sys

    prefix, env = ([*host.exec_prefix()], {**os.environ, **host.environment()}) if host else ([], dict(os.environ))
    out = subprocess.run([*prefix, sys.executable, "-m", "asgard.cli", "cassandra", "host", *args],
                         capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def test_a_host_joins_by_bootstrap_and_leaves_by_decommission_through_the_cli(ring, hosts):
    from asgard.resources.cassandra.hosts import launched_host_members
    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(**ring.client_options(), keyspace="asgard_hosts", replication_factor=3)
    keys = [ObjectKey("run/join-leave", f"k{i}") for i in range(20)]
    for i, key in enumerate(keys):
        store.put(key, bytes([i]) * 50_000)
    newcomer = hosts[3]
    own_ca = newcomer.root / "ring-ca"
    try:
        # the operator's steps: the CA's certificate and the password copied over, a certificate
        # request made there, signed on the operator's machine, the certificate copied back
        own_ca.mkdir(parents=True, exist_ok=True)
        for name in ("ca.pem", "superuser.password"):
            shutil.copy2(ring.ring_ca / name, own_ca / name)
        _host_cli(newcomer, "cert-request", "--ring-ca", str(own_ca), "--address", newcomer.address)
        request = shutil.copy2(own_ca / f"member-{newcomer.address}.csr", ring.ring_ca / "requests")
        _host_cli(None, "cert-sign", "--ring-ca", str(ring.ring_ca), request)
        shutil.copy2(ring.ring_ca / "requests" / f"member-{newcomer.address}.pem", own_ca)
        said = _host_cli(newcomer, "up", "--address", newcomer.address, "--seeds", ",".join(ring.seeds),
                         "--ring-ca", str(own_ca), "--rack", f"rack{newcomer.number}", "--heap", "768M")
        assert f"at {newcomer.address} ready in" in said, said
        [joined] = [m for m in launched_host_members(newcomer.root) if m.address == newcomer.address]
        assert joined.workdir.is_relative_to(newcomer.root) and not (own_ca / "ca.key").exists()
        status = ring.members[0].nodetool("status")
        line = next(line for line in status.splitlines() if f" {joined.address} " in f" {line} ")
        assert line.startswith("UN") and line.rstrip().endswith(f"rack{newcomer.number}"), status
        log = joined.system_log.read_text(errors="replace")
        assert "Bootstrap completed" in log or "JOINING: Starting to bootstrap" in log
        assert all(store.get(key)[0] == bytes([i]) * 50_000 for i, key in enumerate(keys))
        said = _host_cli(newcomer, "leave")
        assert f"at {newcomer.address} decommissioned and stopped" in said, said
        status = ring.members[0].nodetool("status")
        assert joined.address not in status, status
        assert "DECOMMISSIONED" in joined.system_log.read_text(errors="replace")
        assert all(store.get(key)[0] == bytes([i]) * 50_000 for i, key in enumerate(keys))
    finally:
        for member in launched_host_members(newcomer.root):  # a failed step leaves nothing running
            member.kill()
        shutil.rmtree(newcomer.root / "run" / "cassandra", ignore_errors=True)


def test_bench_io_on_the_ring_gives_each_hosts_bytes(ring):
    """``asgard bench io --hosts 3`` measures this way (its own ring; here the module's): from the
    root namespace over the bridge, TLS and login, and one run's bytes on each host."""
    from asgard_bench.io import run_io_bench

    rows = run_io_bench(["cassandra"], [4], small_ops=100, repeat=1, memory_mib=0, first_puts=1, host_ring=ring,
                        replication_factor=3, warmup=False, spread_outputs=3, progress=False, small_seconds=10)
    [mbs] = [r for r in rows if r["object_bytes"] == 4 << 20 and r.get("write_mb_s")]
    [ops] = [r for r in rows if r.get("ops_s")]
    [spread] = [r["spread"] for r in rows if "spread" in r]
    assert mbs["write_mb_s"] > 0 and mbs["read_mb_s"] > 0 and ops["ops_s"] > 0
    assert all(r["network"] == "3 emulated hosts" for r in rows)
    hosts = spread["host_bytes"]
    assert set(hosts) == {m.netns for m in ring.members} and len(hosts) == 3
    # RF 3 on three hosts: each holds a replica of every partition
    assert all(b >= 3 * 16 * 2**20 * 0.9 for b in hosts.values()), hosts
    assert spread["max_min_host_bytes_ratio"] <= 1.5
