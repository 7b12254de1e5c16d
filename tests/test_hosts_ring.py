"""The project's Cassandra as one ring across hosts, emulated on this machine: network namespaces
on a bridge, each with its own address and a fake sysfs of two NUMA nodes, one CA for the ring,
internode and client TLS, one superuser. Shared by every test here (a ring takes minutes to form);
tests through real Dagster runs on the multiprocess executor, whose steps reach the ring by the
hosts' addresses."""
from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from asgard.resources.cassandra.hosts import emulated_host_ring
from asgard.resources.numa import numa_nodes
from asgard.resources.stores import ObjectKey, StoreUnavailableError


@pytest.fixture(scope="module")
def hosts_and_ring():
    # one instance per host on this 2-core machine (each host's NUMA plan has two: test below);
    # a 4th host is made but joins later
    with emulated_host_ring(3, replication_factor=3, heap="768M", instances_per_host=1, extra_hosts=1) as (hosts, ring):
        os.environ.update(ASGARD_RING_CONTACTS=",".join(m.address for m in ring.members),
                          ASGARD_RING_CA=str(ring.ring_ca / "ca.pem"), ASGARD_RING_USER="asgard_admin",
                          ASGARD_RING_PASSWORD=ring.superuser_password())
        yield hosts, ring


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

    from tests.hosts_ring_job import hosts_ring_job

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


def test_three_restart_reconfigurations_across_hosts_under_a_loop_of_runs_fail_no_run(ring, hosts, dagster_instance):
    """The retune job (here, in the test's process: wherever Dagster runs) finds the ring across
    hosts and restarts its members one at a time through orders in the ring itself, which each
    host's agent carries out under the ring's lease, while runs go on; three times."""
    import dagster as dg

    from asgard.resources.stores.cql import CassandraObjectStore
    from asgard_dagster import CassandraResource
    from asgard_dagster.retune import make_retune_job
    from asgard.pipelines.jobs import make_job

    stop = threading.Event()
    agents = [ring.agent(host) for host in hosts.hosts[:3]]
    threads = [threading.Thread(target=a.run, args=(stop,), daemon=True) for a in agents]
    for t in threads:
        t.start()
    runs: list[dict] = []

    def loop():
        while not stop.is_set():
            outcome: dict = {}
            _run_job(dagster_instance, outcome)
            runs.append(outcome)

    runner = threading.Thread(target=loop)
    app = make_job("word_count", "cassandra")
    retune = make_retune_job([app], connection=CassandraResource(
        contact_points=[m.address for m in ring.members], keyspace="asgard_hosts",
        username=dg.EnvVar("ASGARD_RING_USER"), password=dg.EnvVar("ASGARD_RING_PASSWORD"),
        ssl_ca_file=str(ring.ring_ca / "ca.pem")))
    session = ring.session()
    flush = session.execute("SELECT value FROM system_views.settings WHERE name = 'memtable_flush_writers'").one()
    values = [v for v in (4, 1, 2, 4) if str(v) != flush.value][:3]
    outcomes = []
    try:
        deadline = time.monotonic() + 60
        while len(RingControlAgents(session)) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        runner.start()
        for value in values:
            config = {"ops": {"plan_workload": {"config": {
                "upcoming_jobs": [app.name], "keyspace": "asgard_hosts", "knobs": {"memtable_flush_writers": value},
                "force": True, "evaluations": 50, "lookahead_seconds": 600, "probe_seconds": 0}}}}
            result = retune.execute_in_process(run_config=config, instance=dagster_instance)
            assert result.success
            outcomes.append(result.output_for_node("reconfigure"))
    finally:
        stop.set()
        runner.join(timeout=600)
        for t in threads:
            t.join(timeout=120)
    assert len(outcomes) == 3
    for value, outcome in zip(values, outcomes):
        [knob] = outcome["knobs"]
        assert knob["knob"] == "memtable_flush_writers" and knob["to"] == value and knob["applied"], knob
        assert knob["from"] != knob["to"]
        assert outcome["restarts"] and sorted(r["member"] for r in outcome["restarts"]) == sorted(
            m.address for m in ring.members)
        assert all(r["restart"] and r["restart_seconds"] > 0 for r in outcome["restarts"])
        # one member at a time: each began after the one before it had finished
        finished = [r["finished_at"] for r in outcome["restarts"]]
        assert finished == sorted(finished)
        assert {r["host"] for r in outcome["restarts"]} == {h.name for h in hosts.hosts[:3]}
    in_force = {h.address: session.execute("SELECT value FROM system_views.settings WHERE name = "
                                           "'memtable_flush_writers'", host=h).one().value
                for h in session.cluster.metadata.all_hosts()}
    # every member runs what the last reconfiguration applied, read back from each
    assert set(in_force.values()) == {str(outcomes[-1]["knobs"][0]["to"])}, (in_force, outcomes[-1]["knobs"])
    session.cluster.shutdown()
    assert len(runs) >= 3 and all(r.get("success") for r in runs), [r.get("failures") for r in runs]
    store = CassandraObjectStore(**ring.client_options(), keyspace="asgard_hosts")
    for run in runs:  # every output read back afterwards
        scope = f"run/{run['run_id']}"
        paths = store.list_paths(scope)
        assert len(paths) >= 2 * 6 + 1
        for path in paths:
            store.get(ObjectKey(scope, path))


def RingControlAgents(session) -> dict:
    from asgard.resources.cassandra.orders import RingControl

    return RingControl(session).agents()


def _host_cli(host, *args: str) -> str:
    """``asgard cassandra host ...`` run on ``host`` (inside its namespace), as an operator runs it there."""
    import sys

    out = subprocess.run([*host.exec_prefix(), sys.executable, "-m", "asgard.cli", "cassandra", "host", *args],
                         capture_output=True, text=True, timeout=900)
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
    try:
        said = _host_cli(newcomer, "up", "--address", newcomer.address, "--seeds", ",".join(ring.seeds),
                         "--ring-ca", str(ring.ring_ca), "--rack", f"rack{newcomer.number}", "--heap", "768M")
        assert f"at {newcomer.address} ready in" in said, said
        [joined] = [m for m in launched_host_members() if m.address == newcomer.address]
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
        import shutil

        from asgard.resources.paths import run_dir

        for member in launched_host_members():  # a failed step leaves nothing running
            member.kill()
        shutil.rmtree(run_dir("cassandra", f"host-{newcomer.address}"), ignore_errors=True)


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
