"""Credentials come from the environment (Dagster EnvVar) and reach a PasswordAuthenticator node."""
from __future__ import annotations

import pytest
from dagster import EnvVar, job, op

from asgard_dagster import CassandraIOManager, CassandraResource
from asgard.resources.cassandra import CassandraNode
from asgard.resources.stores import ObjectKey, StoreUnavailableError


@pytest.fixture(scope="module")
def auth_node():
    node = CassandraNode(index=7, heap="1G", authenticate=True)
    node.start()
    yield node
    node.stop()


def test_envvar_credentials_reach_an_authenticating_node(auth_node, monkeypatch, dagster_instance):
    monkeypatch.setenv("ASGARD_TEST_CASSANDRA_USER", "cassandra")
    monkeypatch.setenv("ASGARD_TEST_CASSANDRA_PASSWORD", "cassandra")  # the stock superuser of a fresh node

    @op
    def secret_value() -> str:
        return "stored with credentials from the environment"

    @op
    def read_back(value: str) -> str:
        return value

    io_manager = CassandraIOManager(cassandra=CassandraResource(
        contact_points=["127.0.0.7"], keyspace="asgard_auth", username=EnvVar("ASGARD_TEST_CASSANDRA_USER"),
        password=EnvVar("ASGARD_TEST_CASSANDRA_PASSWORD")))

    @job(resource_defs={"io_manager": io_manager})
    def with_credentials():
        read_back(secret_value())

    result = with_credentials.execute_in_process(instance=dagster_instance)
    assert result.success and result.output_for_node("read_back").startswith("stored with")
    assert "cassandra" not in repr(dagster_instance.get_run_by_id(result.run_id).run_config)  # no secret in the run
    resource = CassandraResource(contact_points=["127.0.0.7"], keyspace="asgard_auth", username="cassandra",
                                 password="cassandra")
    assert resource.get_store().list_paths(f"run/{result.run_id}") == ["read_back/result", "secret_value/result"]
    resource.purge_run(result.run_id)
    assert resource.get_store().list_paths(f"run/{result.run_id}") == []


def test_wrong_password_is_a_clear_unreachable_error(auth_node):
    store = CassandraResource(contact_points=["127.0.0.7"], keyspace="asgard_auth", username="cassandra",
                              password="wrong").get_store()
    with pytest.raises(StoreUnavailableError, match=r"127.0.0.7:9042.*(Authentication|credentials|Bad)"):
        store.put(ObjectKey.for_run("r", "s", "o"), 1)


def test_purge_sensor_resolves_envvar_credentials(auth_node, monkeypatch, dagster_instance):
    from dagster import build_run_status_sensor_context

    from asgard_dagster import make_purge_on_success_sensor

    monkeypatch.setenv("ASGARD_TEST_CASSANDRA_USER", "cassandra")
    monkeypatch.setenv("ASGARD_TEST_CASSANDRA_PASSWORD", "cassandra")
    io_manager = CassandraIOManager(cassandra=CassandraResource(
        contact_points=["127.0.0.7"], keyspace="asgard_auth", username=EnvVar("ASGARD_TEST_CASSANDRA_USER"),
        password=EnvVar("ASGARD_TEST_CASSANDRA_PASSWORD")))

    @op
    def kept_output() -> list:
        return [1, 2, 3]

    @job(resource_defs={"io_manager": io_manager})
    def purged_by_sensor():
        kept_output()

    result = purged_by_sensor.execute_in_process(instance=dagster_instance)
    store = CassandraResource(contact_points=["127.0.0.7"], keyspace="asgard_auth", username="cassandra",
                              password="cassandra").get_store()
    assert store.list_paths(f"run/{result.run_id}") == ["kept_output/result"]
    sensor = make_purge_on_success_sensor(io_manager)
    sensor(build_run_status_sensor_context(
        sensor_name=sensor.name, dagster_instance=dagster_instance, dagster_run=result.dagster_run,
        dagster_event=result.get_run_success_event()))
    assert store.list_paths(f"run/{result.run_id}") == []


def test_a_login_the_node_cannot_check_rides_through_until_system_auth_answers(auth_node, caplog):
    """A login Cassandra could not check (system_auth's replicas down: "Unable to perform
    authentication: Cannot achieve consistency level") is a member restarting, not a wrong
    password: the first connection is tried again for ride_through_seconds, and gets in once
    system_auth answers (found in the nemesis: a step failed at once while two members were down)."""
    import logging
    import secrets
    import threading
    import time

    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster

    from asgard.resources.stores.cql import CassandraObjectStore

    admin = Cluster(["127.0.0.7"], auth_provider=PlainTextAuthProvider("cassandra", "cassandra")).connect()
    role, password = f"rider_{secrets.token_hex(4)}", secrets.token_hex(12)
    admin.execute("CREATE KEYSPACE IF NOT EXISTS asgard_auth WITH replication = "
                  "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    admin.execute(f"CREATE ROLE {role} WITH LOGIN = true AND PASSWORD = %s", (password,))
    admin.execute(f"GRANT ALL ON KEYSPACE asgard_auth TO {role}")
    before = dict(admin.execute("SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = "
                                "'system_auth'").one().replication)
    datacenter = admin.execute("SELECT data_center FROM system.local").one().data_center
    # the admin's superuser status, cached here, stays while system_auth cannot answer (the node's
    # AUTH_CACHES: refreshes that fail keep it), so the admin can put system_auth back 3 s later
    admin.execute("SELECT * FROM system_schema.keyspaces WHERE keyspace_name = 'asgard_auth'")

    def restore() -> None:
        options = ", ".join(f"'{k.rsplit('.', 1)[-1]}': '{v}'" for k, v in before.items())
        admin.execute(f"ALTER KEYSPACE system_auth WITH replication = {{{options}}}")

    # three replicas wanted in a one-node datacenter: no LOCAL_QUORUM for the new role's first login
    admin.execute("ALTER KEYSPACE system_auth WITH replication = "
                  f"{{'class': 'NetworkTopologyStrategy', '{datacenter}': 3}}")
    try:
        with pytest.raises(StoreUnavailableError, match="could not check the login") as refused:
            CassandraObjectStore(contact_points=["127.0.0.7"], keyspace="asgard_auth", username=role,
                                 password=password, ride_through_seconds=2).ping()
        assert "Unable to perform authentication" in str(refused.value.__cause__)
        caplog.set_level(logging.WARNING, logger="asgard.resources.stores.cql")
        later = threading.Timer(3.0, restore)
        later.start()
        t0 = time.monotonic()
        store = CassandraObjectStore(contact_points=["127.0.0.7"], keyspace="asgard_auth", username=role,
                                     password=password, ride_through_seconds=60)
        store.put(ObjectKey.for_run("rides-through", "s", "o"), b"in once system_auth answers")
        assert time.monotonic() - t0 >= 2.5
        assert store.get(ObjectKey.for_run("rides-through", "s", "o"))[0] == b"in once system_auth answers"
        assert any("trying again" in r.getMessage() for r in caplog.records)
        later.join()
        store.purge_scope("run/rides-through")
    finally:
        restore()
        admin.execute(f"DROP ROLE IF EXISTS {role}")
        admin.cluster.shutdown()


def test_a_probe_expecting_refused_logins_does_not_log_the_drivers_tracebacks(auth_node, caplog):
    """A secure node's setup tries logins it expects refused (node_security.ensure_superuser):
    the driver's warning and error with traceback for each are dropped on the probing thread."""
    import logging

    from cassandra.cluster import NoHostAvailable

    from asgard.resources.cassandra.node_security import refusals_unlogged
    from asgard.resources.stores.cql import build_cluster

    def refused_login() -> NoHostAvailable:
        cluster = build_cluster(["127.0.0.7"], username="cassandra", password="wrong", admin=True)
        try:
            with pytest.raises(NoHostAvailable) as caught:
                cluster.connect()
            return caught.value
        finally:
            cluster.shutdown()

    caplog.set_level(logging.WARNING, logger="cassandra.cluster")
    refused_login()
    assert [r for r in caplog.records if r.name == "cassandra.cluster" and r.exc_info], caplog.text  # as the driver logs
    caplog.clear()
    with refusals_unlogged():
        error = refused_login()
    assert "Bad credentials" in str(error)  # what the probe raises still says why
    assert not [r for r in caplog.records if r.name == "cassandra.cluster"], caplog.text
    refused_login()
    assert [r for r in caplog.records if r.name == "cassandra.cluster"], "the filter outlived its block"
