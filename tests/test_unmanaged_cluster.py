"""On a cluster the project did not start: a plain Cassandra on the release's classes, with a login
and TLS, launched outside the project's run directory (no launch record it knows). A job's outputs
go through it; the retune job reads what is in force there, applies keyspace and table options by
CQL and a live setting over JMX, records the restart-only one as not applied with its yaml change,
creates nothing before it may act, never says to start a node that answers, and succeeds."""
from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest

from asgard.resources.cassandra import CassandraNode
from asgard.resources.cassandra.node import JMX_BASE_PORT, SUPERUSER
from asgard_dagster import CassandraIOManager, CassandraResource
from asgard_dagster.retune import make_retune_job
from asgard.pipelines.jobs import make_job

INDEX = 71  # 127.0.0.71: no other test's instance
KEYSPACE = "asgard_unmanaged"


@pytest.fixture(scope="module")
def plain_node(tmp_path_factory):
    """A secure node on the release's classes, started from a directory of its own: to the
    project (``CassandraNode.launched(71)``) nothing runs at 127.0.0.71."""
    workdir = tmp_path_factory.mktemp("someone_elses_cassandra")
    node = CassandraNode(index=INDEX, workdir=workdir, heap="1G", secure=True)
    saved = os.environ.get("ASGARD_CASSANDRA_PATCHES")
    os.environ["ASGARD_CASSANDRA_PATCHES"] = "0"
    try:
        node.start()
    finally:
        if saved is None:
            os.environ.pop("ASGARD_CASSANDRA_PATCHES")
        else:
            os.environ["ASGARD_CASSANDRA_PATCHES"] = saved
    yield node
    node.stop()


@pytest.fixture
def login(plain_node, monkeypatch):
    monkeypatch.setenv("THEIR_CASSANDRA_USER", SUPERUSER)
    monkeypatch.setenv("THEIR_CASSANDRA_PASSWORD", plain_node.superuser_password())
    return plain_node


def connection(node, **extra) -> CassandraResource:
    return CassandraResource(contact_points=[node.address], keyspace=KEYSPACE,
                             username=dg.EnvVar("THEIR_CASSANDRA_USER"),
                             password=dg.EnvVar("THEIR_CASSANDRA_PASSWORD"),
                             ssl_ca_file=str(node.tls.ca_cert), **extra)


def reconfigure_metadata(result) -> dict:
    [output] = [e for e in result.events_for_node("reconfigure") if e.is_successful_output]
    return {k: v.value for k, v in output.event_specific_data.metadata.items()}


def test_the_node_is_the_release_and_unknown_to_the_project(plain_node):
    argv = Path(f"/proc/{plain_node.pid()}/cmdline").read_bytes().split(b"\0")
    classpath = argv[argv.index(b"-cp") + 1].decode().split(os.pathsep)
    assert not any(Path(p).name == "patches.jar" for p in classpath)
    assert not CassandraNode.launched(INDEX).is_running()


def test_a_dry_retune_creates_nothing_and_never_says_start_a_node_that_answers(login, dagster_instance):
    app = make_job("word_count", "cassandra")
    retune = make_retune_job([app], connection=connection(login))
    config = {"ops": {"plan_workload": {"config": {
        "upcoming_jobs": [app.name], "keyspace": "asgard_never_made", "apply": False, "evaluations": 100,
        "lookahead_seconds": 600, "knobs": {"compaction": "LCS", "memtable_flush_writers": 4}}}}}
    result = retune.execute_in_process(run_config=config, instance=dagster_instance)
    assert result.success
    meta = reconfigure_metadata(result)
    assert "Start it" not in meta["reason"] and "is down" not in meta["reason"]
    assert meta["managed"] is False and "does not run" in meta["reason"]
    knobs = {k["knob"]: k for k in meta["knobs"]}
    assert knobs["compaction"]["applied"] is False and "does not exist yet" in knobs["compaction"]["why"]
    assert knobs["memtable_flush_writers"]["cassandra_yaml"] == {"memtable_flush_writers": 4}
    session = connection(login).get_store().session
    assert session.execute("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = "
                           "'asgard_never_made'").one() is None


def test_outputs_go_through_it_and_the_retune_applies_what_it_can_from_outside(login, dagster_instance):
    @dg.op
    def make() -> list:
        return list(range(100_000))

    @dg.op
    def total(values: list) -> int:
        return sum(values)

    @dg.job(resource_defs={"io_manager": CassandraIOManager(cassandra=connection(login))})
    def through_their_cluster():
        total(make())

    run = through_their_cluster.execute_in_process(instance=dagster_instance)
    assert run.success and run.output_for_node("total") == sum(range(100_000))

    app = make_job("word_count", "cassandra")
    jmx = {login.address: f"127.0.0.1:{JMX_BASE_PORT + INDEX - 1}"}  # its JMX listens on loopback
    retune = make_retune_job([app], connection=connection(
        login, jmx_endpoints=jmx, jmx_username=dg.EnvVar("THEIR_CASSANDRA_USER"),
        jmx_password=dg.EnvVar("THEIR_CASSANDRA_PASSWORD")))
    knobs = {"durable_writes": True, "compaction": "LCS", "concurrent_writes": 64, "memtable_flush_writers": 4}
    config = {"ops": {"plan_workload": {"config": {
        "upcoming_jobs": [app.name], "keyspace": KEYSPACE, "knobs": knobs, "force": True, "evaluations": 100,
        "lookahead_seconds": 600, "probe_seconds": 0}}}}
    result = retune.execute_in_process(run_config=config, instance=dagster_instance)
    assert result.success
    meta = reconfigure_metadata(result)
    outcome = result.output_for_node("reconfigure")
    by_knob = {k["knob"]: k for k in outcome["knobs"]}
    assert set(by_knob) == set(knobs)
    assert all(by_knob[k]["applied"] for k in ("durable_writes", "compaction", "concurrent_writes")), by_knob
    assert {k: by_knob[k]["to"] for k in knobs} == knobs  # what each knob was asked to become
    assert by_knob["memtable_flush_writers"]["applied"] is False
    assert "restart-only" in by_knob["memtable_flush_writers"]["why"]
    assert by_knob["memtable_flush_writers"]["cassandra_yaml"] == {"memtable_flush_writers": 4}
    assert by_knob["memtable_flush_writers"]["cass_operator_spec_config"] == {
        "cassandra-yaml": {"memtable_flush_writers": 4}}
    assert sorted(meta["applied_knobs"]) == ["compaction", "concurrent_writes", "durable_writes"]
    assert meta["not_applied_knobs"] == ["memtable_flush_writers"]
    assert meta["cassandra_yaml_for_an_operator"] == {"memtable_flush_writers": 4}
    # in force afterwards, read back from the node itself
    session = connection(login).get_store().session
    ks = session.execute(f"SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = '{KEYSPACE}'").one()
    table = session.execute("SELECT compaction FROM system_schema.tables WHERE keyspace_name = %s AND "
                            "table_name = 'objects'", (KEYSPACE,)).one()
    assert ks.durable_writes is True and table.compaction["class"].endswith("LeveledCompactionStrategy")
    writes = session.execute("SELECT value FROM system_views.settings WHERE name = 'concurrent_writes'").one()
    assert writes.value == "64"
    flush = session.execute("SELECT value FROM system_views.settings WHERE name = 'memtable_flush_writers'").one()
    assert flush.value != "4"  # not restarted: the restart-only setting is as it was
    assert login.is_running()


def test_without_jmx_a_live_setting_is_recorded_with_the_command_an_operator_runs(login, dagster_instance):
    app = make_job("word_count", "cassandra")
    retune = make_retune_job([app], connection=connection(login))
    config = {"ops": {"plan_workload": {"config": {
        "upcoming_jobs": [app.name], "keyspace": KEYSPACE, "knobs": {"concurrent_reads": 16}, "force": True,
        "evaluations": 100, "lookahead_seconds": 600, "probe_seconds": 0}}}}
    result = retune.execute_in_process(run_config=config, instance=dagster_instance)
    assert result.success
    [knob] = result.output_for_node("reconfigure")["knobs"]
    assert knob["knob"] == "concurrent_reads" and knob["applied"] is False
    assert "nodetool setconcurrency ReadStage 16" in knob["why"] and knob["cassandra_yaml"] == {"concurrent_reads": 16}


def test_the_airflow_retune_dag_tunes_it_from_outside_the_same_way(login, tmp_path):
    """The Airflow retune DAG runs the Dagster job's own step (asgard.tuner.reconfigure): through
    ``airflow dags test``, with the XCom backend's ``[asgard]`` settings pointing at this cluster
    (login from the environment, its CA) and JMX from ``[asgard] jmx_endpoints``."""
    import json

    from asgard.resources.stores import ObjectKey
    from asgard.resources.stores.cql import CassandraObjectStore
    from tests.airflow_support import airflow, dags_test, make_home, xcom_rows

    keyspace = "asgard_unmanaged_airflow"
    options = {"contact_points": [login.address], "username": SUPERUSER, "password": login.superuser_password(),
               "ssl_ca_file": str(login.tls.ca_cert)}
    # their pipelines' objects table exists (the XCom backend made it); the retune creates nothing
    seeded = CassandraObjectStore(**options, keyspace=keyspace)
    seeded.put(ObjectKey("run/airflow-seed", "x"), b"x" * 100_000)
    home = make_home(tmp_path / "airflow", AIRFLOW__ASGARD__CONTACT_POINTS=login.address,
                     AIRFLOW__ASGARD__KEYSPACE=keyspace, AIRFLOW__ASGARD__SSL_CA_FILE=str(login.tls.ca_cert),
                     AIRFLOW__ASGARD__USERNAME=SUPERUSER, AIRFLOW__ASGARD__PASSWORD=login.superuser_password(),
                     AIRFLOW__ASGARD__JMX_ENDPOINTS=f"{login.address}=127.0.0.1:{JMX_BASE_PORT + INDEX - 1}",
                     AIRFLOW__ASGARD__JMX_USERNAME=SUPERUSER, AIRFLOW__ASGARD__JMX_PASSWORD=login.superuser_password())
    # a queued word count run is what is coming (no scheduler here: it stays queued)
    for args in (("dags", "reserialize"), ("dags", "trigger", "asgard_word_count"), ("dags", "pause", "asgard_every_10")):
        done = airflow(home["env"], *args)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    knobs = {"compaction": "UCS", "concurrent_writes": 48, "memtable_flush_writers": 3}
    rc, out, run_id = dags_test(home, "asgard_retune_test", {
        "always": True, "knobs": knobs, "force": True, "evaluations": 100, "lookahead_seconds": 600,
        "probe_seconds": 0})
    assert rc == 0, out[-6000:]
    rows = xcom_rows(home, "asgard_retune_test", run_id)
    assert ("reconfigure", -1, "return_value") in rows, out[-8000:]
    outcome = rows[("reconfigure", -1, "return_value")]
    by_knob = {k["knob"]: k for k in outcome["knobs"]}
    assert set(by_knob) == set(knobs), outcome
    assert by_knob["compaction"]["applied"] and by_knob["concurrent_writes"]["applied"], by_knob
    assert by_knob["memtable_flush_writers"]["applied"] is False
    assert by_knob["memtable_flush_writers"]["cassandra_yaml"] == {"memtable_flush_writers": 3}
    assert outcome["figures"]["not_applied_knobs"] == ["memtable_flush_writers"]
    assert outcome["decision"]["managed"] is False and "does not run" in outcome["decision"]["reason"]
    assert "asgard cassandra up" not in out and "is down" not in out
    session = seeded.session
    table = session.execute("SELECT compaction FROM system_schema.tables WHERE keyspace_name = %s AND "
                            "table_name = 'objects'", (keyspace,)).one()
    assert table.compaction["class"].endswith("UnifiedCompactionStrategy")
    writes = session.execute("SELECT value FROM system_views.settings WHERE name = 'concurrent_writes'").one()
    assert writes.value == "48"
    # the decision report (Rendered Template) lists the knob left to an operator, with its yaml change
    assert '| `memtable_flush_writers` | `3` | no |' in outcome["summary_md"]
    assert json.dumps({"memtable_flush_writers": 3}) in outcome["summary_md"]
