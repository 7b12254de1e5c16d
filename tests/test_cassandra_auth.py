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
