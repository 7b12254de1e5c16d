"""Any Cassandra a user runs (issue 38, part 5): a release node of 4.1 (its latest release) and one of
5.0, each started by hand outside the project (:mod:`tests.hand_started_node`: the release's jars,
a cassandra.yaml of its own, ``java`` in a namespace of its own at a non-loopback address, a CQL
login, client TLS, JMX on that address behind a login and over TLS). Through real Dagster runs: a
job's outputs stored and read back by the IO manager, the purge sensor deleting a succeeded run's
outputs, and the retune job reading the settings in force, applying a keyspace and a table option
by CQL and a live setting over JMX (read back from the node), recording a restart-only one with
its cassandra.yaml change. What 4.1 lacks (a compaction strategy, a memtable implementation) is
reported knob by knob, and the run still succeeds. One node at a time."""
from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest

from asgard_dagster import CassandraIOManager, CassandraResource
from asgard_dagster.retune import make_retune_job
from asgard.pipelines.jobs import make_job
from asgard.resources.cassandra.install import TESTED_RELEASES
from tests.hand_started_node import JMX_PORT, HandStartedNode

KEYSPACE = "their_outputs"
VERSIONS = list(TESTED_RELEASES)  # the latest 4.1 and the pinned 5.0 (scripts/setup.sh fetches both)
assert {v[:3] for v in VERSIONS} == {"4.1", "5.0"}


@pytest.fixture(scope="module", params=VERSIONS)
def their_node(request, tmp_path_factory):
    node = HandStartedNode(request.param, tmp_path_factory.mktemp(f"their_cassandra_{request.param}"), heap="768M")
    try:
        node.start()
    except BaseException:
        node.stop()
        raise
    yield node
    node.stop()


@pytest.fixture
def login(their_node, monkeypatch):
    monkeypatch.setenv("THEIR_CASSANDRA_USER", their_node.cql_user)
    monkeypatch.setenv("THEIR_CASSANDRA_PASSWORD", their_node.cql_password)
    monkeypatch.setenv("THEIR_JMX_USER", their_node.jmx_user)
    monkeypatch.setenv("THEIR_JMX_PASSWORD", their_node.jmx_password)
    return their_node


def connection(node, jmx: bool = False) -> CassandraResource:
    extra = {}
    if jmx:  # the member's JMX on its own address, behind the JDK's password login, over TLS
        extra = dict(jmx_endpoints={node.address: f"{node.address}:{JMX_PORT}"},
                     jmx_username=dg.EnvVar("THEIR_JMX_USER"), jmx_password=dg.EnvVar("THEIR_JMX_PASSWORD"),
                     jmx_ssl=True, jmx_truststore=str(node.tls["truststore"]))
    return CassandraResource(contact_points=[node.address], keyspace=KEYSPACE,
                             username=dg.EnvVar("THEIR_CASSANDRA_USER"),
                             password=dg.EnvVar("THEIR_CASSANDRA_PASSWORD"),
                             ssl_ca_file=str(node.tls["ca_pem"]), **extra)


def session_of(node):
    return connection(node).get_store().session


def setting(node, name: str) -> str:
    return session_of(node).execute("SELECT value FROM system_views.settings WHERE name = %s", (name,)).one().value


def retune(node, knobs: dict, instance, jmx: bool = True):
    app = make_job("word_count", "cassandra")
    job = make_retune_job([app], connection=connection(node, jmx=jmx))
    config = {"ops": {"plan_workload": {"config": {
        "upcoming_jobs": [app.name], "keyspace": KEYSPACE, "knobs": knobs, "force": True, "evaluations": 100,
        "lookahead_seconds": 600, "probe_seconds": 0}}}}
    result = job.execute_in_process(run_config=config, instance=instance)
    assert result.success
    [output] = [e for e in result.events_for_node("reconfigure") if e.is_successful_output]
    meta = {k: v.value for k, v in output.event_specific_data.metadata.items()}
    outcome = result.output_for_node("reconfigure")
    return outcome, meta, {k["knob"]: k for k in outcome["knobs"]}


def test_the_node_is_the_release_started_by_hand_on_its_own_address(login):
    argv = Path(f"/proc/{login.pid()}/cmdline").read_bytes().split(b"\0")
    classpath = argv[argv.index(b"-cp") + 1].decode()
    assert f"cassandra/{login.version}/lib/*" in classpath and "patches.jar" not in classpath
    assert b"org.apache.cassandra.service.CassandraDaemon" in argv
    assert not login.address.startswith("127.")
    local = session_of(login).execute("SELECT release_version, rpc_address FROM system.local").one()
    assert local.release_version == login.version and str(local.rpc_address) == login.address


def test_assets_and_a_jobs_outputs_go_through_it_and_the_purge_deletes_the_runs(login, tmp_path):
    from asgard_dagster import make_purge_on_success_sensor

    io_manager = CassandraIOManager(cassandra=connection(login))

    @dg.asset
    def numbers() -> list:
        return list(range(200_000))

    @dg.asset
    def total(numbers: list) -> int:
        return sum(numbers)

    @dg.op
    def emit() -> bytes:
        return os.urandom(3 << 20)  # several chunks

    @dg.op
    def size(blob: bytes) -> int:
        return len(blob)

    @dg.job(resource_defs={"io_manager": io_manager})
    def through_their_cluster():
        size(emit())

    store = connection(login).get_store()
    with dg.DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        assets = dg.materialize([numbers, total], resources={"io_manager": io_manager}, instance=instance)
        assert assets.success and assets.output_for_node("total") == sum(range(200_000))
        assert store.list_paths("asset/numbers") == ["__unpartitioned__"]  # an asset's scope, kept across runs
        keep = through_their_cluster.execute_in_process(instance=instance)
        run = through_their_cluster.execute_in_process(instance=instance)
        assert keep.success and run.success and run.output_for_node("size") == 3 << 20
        scope = f"run/{run.run_id}"
        assert store.list_paths(scope) == ["emit/result", "size/result"]
        partitions = store.partitions(scope)
        assert len(partitions) >= 2
        sensor = make_purge_on_success_sensor(io_manager)
        sensor(dg.build_run_status_sensor_context(
            sensor_name=sensor.name, dagster_instance=instance, dagster_run=run.dagster_run,
            dagster_event=run.get_run_success_event()))
    assert store.list_paths(scope) == []
    for path, version, grp in partitions:  # the partitions themselves, not only the index
        assert list(store.session.execute(
            f"SELECT chunk FROM {store.qualified_table} WHERE scope = %s AND path = %s AND version = %s AND grp = %s",
            (scope, path, version, grp))) == []
    assert store.list_paths(f"run/{keep.run_id}") == ["emit/result", "size/result"]  # another run's stay


def test_the_retune_applies_by_cql_and_over_jmx_with_tls_and_a_login(login, tmp_path):
    store = connection(login).get_store()
    store.ensure_schema()  # the keyspace and table the IO manager makes with its first output
    durable = store.session.execute("SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = %s",
                                    (KEYSPACE,)).one().durable_writes
    knobs = {"durable_writes": not durable, "compaction": "LCS", "concurrent_writes": 48, "memtable_flush_writers": 3}
    flush_before = setting(login, "memtable_flush_writers")
    with dg.DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        outcome, meta, by_knob = retune(login, knobs, instance)
    assert set(by_knob) == set(knobs)
    assert all(by_knob[k]["applied"] for k in ("durable_writes", "compaction", "concurrent_writes")), by_knob
    assert f"on ['{login.address}']" in by_knob["concurrent_writes"]["how"]
    assert by_knob["memtable_flush_writers"]["applied"] is False
    assert "restart-only" in by_knob["memtable_flush_writers"]["why"]
    assert by_knob["memtable_flush_writers"]["cassandra_yaml"] == {"memtable_flush_writers": 3}
    assert meta["managed"] is False and outcome["decision"]["managed"] is False
    assert "live settings over JMX" in outcome["decision"]["reason"]
    # the settings in force, read by the retune from the node's system_views.settings: every one mapped
    # (4.1 has the same names and units there as 5.0), and after the change read back by it
    assert outcome["unreadable"] == {}
    assert outcome["in_force_by_member"][login.address]["concurrent_writes"] == 48
    assert outcome["in_force_by_member"][login.address]["compaction"] == "LCS"
    # in force afterwards, read back from the node itself
    session = session_of(login)
    table = session.execute("SELECT compaction FROM system_schema.tables WHERE keyspace_name = %s AND "
                            "table_name = 'objects'", (KEYSPACE,)).one()
    assert table.compaction["class"].endswith("LeveledCompactionStrategy")
    assert session.execute("SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = %s",
                           (KEYSPACE,)).one().durable_writes is (not durable)
    assert setting(login, "concurrent_writes") == "48"
    assert setting(login, "memtable_flush_writers") == flush_before  # not restarted
    assert login.is_running()


def test_what_41_lacks_is_said_knob_by_knob_and_the_run_succeeds(login, tmp_path):
    """UCS came with 5.0 (the retune knows, and sends nothing for it on 4.1); a memtable the node's
    cassandra.yaml does not name is refused by the server (the retune records the server's message
    and sends the other options on their own). 5.0 takes all of it."""
    knobs = {"compaction": "UCS", "memtable": "skiplist", "compression": "Zstd", "concurrent_reads": 16}
    connection(login).get_store().ensure_schema()
    with dg.DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        outcome, meta, by_knob = retune(login, knobs, instance)
    table = session_of(login).execute("SELECT compaction, compression, memtable FROM system_schema.tables "
                                      "WHERE keyspace_name = %s AND table_name = 'objects'", (KEYSPACE,)).one()
    assert by_knob["compression"]["applied"] and table.compression["class"].endswith("ZstdCompressor")
    assert by_knob["concurrent_reads"]["applied"] and setting(login, "concurrent_reads") == "16"
    assert outcome["releases"] == {login.address: login.version}
    if login.version.startswith("4.1"):
        ucs, memtable = by_knob["compaction"], by_knob["memtable"]
        assert ucs["applied"] is False and "has no UnifiedCompactionStrategy" in ucs["why"]
        assert "came with Cassandra 5.0" in ucs["why"] and "Cassandra 4.1.10" in ucs["why"]
        assert memtable["applied"] is False and "the cluster refused" in memtable["why"]
        assert 'Memtable configuration "skiplist" not found' in memtable["why"]
        assert meta["not_in_release"] == {"compaction": ucs["why"]}
        assert meta["refused_by_cluster"] == {"memtable": memtable["why"]}
        assert meta["not_applied_knobs"] == ["compaction", "memtable"]
        assert "has no UnifiedCompactionStrategy" in outcome["decision"]["reason"]
        assert not table.compaction["class"].endswith("UnifiedCompactionStrategy")
        assert table.memtable in (None, "default")
    else:
        assert all(k["applied"] for k in by_knob.values()), by_knob
        assert "not_in_release" not in meta and "refused_by_cluster" not in meta
        assert table.compaction["class"].endswith("UnifiedCompactionStrategy") and table.memtable == "skiplist"


def test_jmx_takes_only_tls_and_its_login_and_a_refusal_is_recorded_not_raised(login, tmp_path, monkeypatch):
    from asgard.resources.cassandra.nodetool import NodetoolError
    from asgard.tuner.unmanaged import JmxEndpoint, remote_nodetool

    endpoint = dict(host=login.address, port=JMX_PORT, username=login.jmx_user)
    with pytest.raises(NodetoolError, match="non-JRMP server"):  # plain JMX: the port speaks TLS only
        remote_nodetool(JmxEndpoint(**endpoint, password=login.jmx_password), "getconcurrentcompactors")
    monkeypatch.setenv("THEIR_JMX_PASSWORD", "not-their-password")
    before = setting(login, "concurrent_compactors")
    with dg.DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        outcome, meta, by_knob = retune(login, {"concurrent_compactors": int(before) + 1}, instance)
    knob = by_knob["concurrent_compactors"]
    assert knob["applied"] is False and "JMX refused or unreachable" in knob["why"]
    assert "Invalid username or password" in knob["why"] and "not-their-password" not in str(outcome)
    assert setting(login, "concurrent_compactors") == before
