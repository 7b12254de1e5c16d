"""Connection resources nested in the IO managers, the Dagster way (``CassandraIOManager(
cassandra=CassandraResource(...))``, ``RedisIOManager(redis=...)``, ``S3IOManager(s3=...)``), the
flat form of earlier releases refused with a typed error naming the nested one, and what connects
through an IO manager (``connection()``, the purge sensor, the retune job), in real runs against
the local servers.
"""
from __future__ import annotations

import uuid
import warnings

import pytest
from dagster import (
    DagsterInvalidConfigError, DagsterInvalidDefinitionError, EnvVar, asset, build_run_status_sensor_context,
    execute_job, job, materialize, op, reconstructable,
)

from asgard_dagster import (
    CassandraIOManager, CassandraResource, FlatConnectionFieldsError, RedisIOManager, RedisResource,
    S3IOManager, S3StoreResource, make_purge_on_success_sensor,
)
from asgard.resources.stores import ObjectKey
from tests.conftest import TEST_KEYSPACE
from tests.jobs import nested_cassandra_env_job, nested_redis_env_job

pytestmark = pytest.mark.timeout(600)

#: backend -> (IO manager, its nested field, the resource class)
MANAGERS = {
    "cassandra": (CassandraIOManager, "cassandra", CassandraResource),
    "redis": (RedisIOManager, "redis", RedisResource),
    "s3": (S3IOManager, "s3", S3StoreResource),
}


@asset
def nested_numbers() -> list:
    return list(range(10_000))


@asset
def nested_total(nested_numbers: list) -> int:
    return sum(nested_numbers)


ASSET_KEY = ObjectKey.for_asset(["nested_numbers"])


def _handled_output_uris(result) -> dict[str, str]:
    return {e.step_key: e.event_specific_data.metadata["dagster/uri"].value
            for e in result.all_events if e.is_handled_output}


@pytest.fixture
def connection(request) -> tuple[str, dict, str]:
    """``(backend, connection fields away from the IO manager's defaults, the asset's expected URI)``."""
    backend = request.param
    tag = f"nested-{uuid.uuid4().hex[:8]}"
    if backend == "cassandra":
        request.getfixturevalue("cassandra_node")
        fields = {"keyspace": TEST_KEYSPACE}
        uri = f"cassandra://127.0.0.1:9042/{TEST_KEYSPACE}.objects/asset/nested_numbers/__unpartitioned__"
    elif backend == "redis":
        server = request.getfixturevalue("redis_server")
        fields = {"port": server.port, "password": server.password, "key_prefix": tag}
        uri = f"redis://127.0.0.1:{server.port}/0/{tag}:asset/nested_numbers:__unpartitioned__"
    else:
        server = request.getfixturevalue("minio_server")
        fields = {"endpoint_url": server.endpoint, "prefix": tag}
        uri = f"s3://{server.bucket}/{tag}/asset/nested_numbers/__unpartitioned__"
    yield backend, fields, uri
    store = MANAGERS[backend][2](**fields).get_store()
    for name in ("nested_numbers", "nested_total"):
        store.purge_scope(f"asset/{name}")


def _materialize_and_check(io_manager, resource, uri: str) -> None:
    result = materialize([nested_numbers, nested_total], resources={"io_manager": io_manager})
    assert result.success and result.output_for_node("nested_total") == sum(range(10_000))
    [materialization] = result.asset_materializations_for_node("nested_numbers")
    assert materialization.metadata["dagster/uri"].value == uri
    # stored where the resource connects, read back through it
    assert resource.get_store().get(ASSET_KEY)[0] == list(range(10_000))


@pytest.mark.parametrize("connection", list(MANAGERS), indirect=True)
def test_materialize_through_a_nested_resource(connection):
    backend, fields, uri = connection
    manager_cls, field, resource_cls = MANAGERS[backend]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning of ours, nor of Dagster's, on the nested form
        io_manager = manager_cls(**{field: resource_cls(**fields)}, ttl_seconds=3600)
    assert io_manager.connection().connection_kwargs() == resource_cls(**fields).connection_kwargs()
    assert io_manager.connection_settings() == (backend, resource_cls(**fields).connection_kwargs())
    _materialize_and_check(io_manager, resource_cls(**fields), uri)


#: connection fields given flat, as earlier releases took them (S3's endpoint_url=None meant AWS itself)
FLAT = [
    ("cassandra", {"contact_points": ["cass1"], "keyspace": "elsewhere", "port": 9043}),
    ("redis", {"host": "redis.internal", "password": EnvVar("REDIS_PASSWORD")}),
    ("s3", {"endpoint_url": None, "bucket": "my-bucket"}),
]


@pytest.mark.parametrize("backend,flat", FLAT)
def test_flat_connection_fields_are_a_typed_error_naming_the_nested_form(backend, flat):
    # Dagster alone ignores a keyword that is not a field: the IO manager would reach the defaults
    manager_cls, field, resource_cls = MANAGERS[backend]
    name, resource = manager_cls.__name__, resource_cls.__name__
    with pytest.raises(FlatConnectionFieldsError) as info:
        manager_cls(**flat, ttl_seconds=3600)
    assert isinstance(info.value, DagsterInvalidDefinitionError)
    message = str(info.value)
    moved = ", ".join(f"{k}=..." for k in flat)  # in the order given
    assert f"write {name}({field}={resource}({moved}), ...), not {name}({moved}, ...)" in message
    assert "ttl_seconds" in message  # the IO manager's own fields stay on it
    assert "REDIS_PASSWORD" not in message and "elsewhere" not in message  # names only, never values
    # what the message says to write works, with the same values
    io_manager = manager_cls(**{field: resource_cls(**flat)}, ttl_seconds=3600)
    assert io_manager.connection_settings() == (backend, resource_cls(**flat).connection_kwargs())


@pytest.mark.parametrize("backend,flat", FLAT)
def test_nested_and_flat_together_is_the_same_error_saying_where_they_go(backend, flat):
    manager_cls, field, resource_cls = MANAGERS[backend]
    with pytest.raises(FlatConnectionFieldsError) as info:
        manager_cls(**{field: resource_cls()}, **flat)
    assert f"you gave {field}= too: put {', '.join(flat)} inside it" in str(info.value)


@pytest.mark.parametrize("backend,flat", FLAT)
def test_flat_connection_fields_in_a_run_config_are_refused_by_dagster(backend, flat):
    # the run's config of the IO manager takes its own fields only: Dagster names the entry
    manager_cls, _, resource_cls = MANAGERS[backend]
    assert not set(manager_cls.model_fields) & set(resource_cls.model_fields)
    config = {k: v for k, v in flat.items() if v is not None and not isinstance(v, EnvVar)}

    @op
    def one() -> int:
        return 1

    @job(resource_defs={"io_manager": manager_cls()})
    def flat_in_config():
        one()

    entry = next(iter(config))
    with pytest.raises(DagsterInvalidConfigError, match=rf"unexpected config entr(y|ies).*{entry}.*io_manager"):
        flat_in_config.execute_in_process(run_config={"resources": {"io_manager": {"config": config}}})


@pytest.mark.parametrize("backend", list(MANAGERS))
def test_without_a_nested_resource_the_defaults_reach_the_local_server(all_servers, backend):
    manager_cls, _, resource_cls = MANAGERS[backend]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        io_manager = manager_cls()
    assert io_manager.connection().connection_kwargs() == resource_cls().connection_kwargs()
    io_manager.store().ping()


def test_envvar_of_a_nested_redis_resource_is_read_in_every_step_process(redis_server, dagster_instance,
                                                                          monkeypatch):
    prefix = f"nested-env-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("ASGARD_TEST_NESTED_PREFIX", prefix)  # step processes inherit it
    with execute_job(reconstructable(nested_redis_env_job), instance=dagster_instance) as result:
        assert result.success and result.output_for_node("consume") == sum(range(1000))
        run_id, uris = result.run_id, _handled_output_uris(result)
    assert uris == {step: f"redis://127.0.0.1:{redis_server.port}/0/{prefix}:run/{run_id}:{step}/result"
                    for step in ("produce", "consume")}
    client = redis_server.client()
    stored = {k.decode() for k in client.scan_iter(match=f"{prefix}:*", count=1000)}
    assert {f"{prefix}:run/{run_id}:{step}/result:manifest" for step in ("produce", "consume")} <= stored
    assert not list(client.scan_iter(match="ASGARD_TEST_NESTED_PREFIX*"))  # never the variable's name
    RedisResource(key_prefix=EnvVar("ASGARD_TEST_NESTED_PREFIX")).purge_run(run_id)
    assert not list(client.scan_iter(match=f"{prefix}:*"))


def test_envvar_of_a_nested_cassandra_resource_is_read_in_every_step_process(cassandra_node, dagster_instance,
                                                                              monkeypatch):
    monkeypatch.setenv("ASGARD_TEST_NESTED_KEYSPACE", TEST_KEYSPACE)
    with execute_job(reconstructable(nested_cassandra_env_job), instance=dagster_instance) as result:
        assert result.success and result.output_for_node("consume") == sum(range(1000))
        run_id, uris = result.run_id, _handled_output_uris(result)
    assert uris == {step: f"cassandra://127.0.0.1:9042/{TEST_KEYSPACE}.objects/run/{run_id}/{step}/result"
                    for step in ("produce", "consume")}
    store = CassandraResource(keyspace=TEST_KEYSPACE).get_store()
    assert store.list_paths(f"run/{run_id}") == ["consume/result", "produce/result"]
    store.purge_scope(f"run/{run_id}")


def test_purge_sensor_and_connection_use_the_nested_resource(cassandra_node, dagster_instance, monkeypatch):
    from asgard_dagster.definitions import asgard_definitions
    from asgard_dagster.retune import CONNECTION_KEY

    monkeypatch.setenv("ASGARD_TEST_NESTED_KEYSPACE", TEST_KEYSPACE)
    resource = CassandraResource(keyspace=EnvVar("ASGARD_TEST_NESTED_KEYSPACE"), request_timeout=12.0)
    io_manager = CassandraIOManager(cassandra=resource)

    @op
    def emit() -> list:
        return [1, 2, 3]

    @op
    def take(xs: list) -> int:
        return sum(xs)

    @job
    def tiny():
        take(emit())

    defs = asgard_definitions(jobs=[tiny], io_manager=io_manager, retune=True)
    # the retune job connects with the nested resource, its EnvVar still to be read where it runs
    retune_connection = defs.resolve_job_def("asgard_retune_cassandra").resource_defs[CONNECTION_KEY]
    assert retune_connection.config_schema.default_value["keyspace"] == {"env": "ASGARD_TEST_NESTED_KEYSPACE"}
    assert retune_connection.config_schema.default_value["request_timeout"] == 12.0
    assert io_manager.connection().connection_kwargs()["keyspace"] == TEST_KEYSPACE

    result = defs.resolve_job_def("tiny").execute_in_process(instance=dagster_instance)
    assert result.success
    store = CassandraResource(keyspace=TEST_KEYSPACE).get_store()
    assert store.list_paths(f"run/{result.run_id}") == ["emit/result", "take/result"]
    sensor = make_purge_on_success_sensor(io_manager)
    sensor(build_run_status_sensor_context(sensor_name=sensor.name, dagster_instance=dagster_instance,
                                           dagster_run=result.dagster_run,
                                           dagster_event=result.get_run_success_event()))
    assert store.list_paths(f"run/{result.run_id}") == []
