"""Redis over TLS: a server with a local CA serves only TLS; the IO manager reaches it with
ssl_ca_file and a password from the environment; a plain client is refused with a typed error."""
from __future__ import annotations

import secrets

import pytest
from dagster import EnvVar, job, op

from asgard_dagster import RedisIOManager, RedisResource
from asgard.resources.cassandra.tls import verify_node_certificate
from asgard.resources.redis import RedisServer
from asgard.resources.stores import ObjectKey, StoreConfigError, StoreUnavailableError
from asgard.resources.stores.redis import RedisObjectStore
from tests.test_stores_redis import free_port


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    server = RedisServer(port=free_port(), workdir=tmp_path_factory.mktemp("redis-tls"), tls=True,
                         password=secrets.token_urlsafe(16), maxmemory="256mb")
    server.start()
    yield server
    server.stop()


def test_a_run_stores_and_reads_over_tls_with_credentials_from_the_environment(tls_server, monkeypatch,
                                                                                 dagster_instance):
    monkeypatch.setenv("ASGARD_TEST_REDIS_PASSWORD", tls_server.password)
    verify_node_certificate(tls_server.workdir / "tls" / "node.pem", tls_server.ca_file, "127.0.0.1")
    io_manager = RedisIOManager(redis=RedisResource(port=tls_server.port, password=EnvVar("ASGARD_TEST_REDIS_PASSWORD"),
                                                    ssl_ca_file=str(tls_server.ca_file), key_prefix="tls"),
                                chunk_size_bytes=256 * 1024)

    @op
    def produce() -> bytes:
        return bytes(range(256)) * 4096  # 1 MiB: four chunks

    @op
    def consume(data: bytes) -> int:
        return len(data)

    @job(resource_defs={"io_manager": io_manager})
    def over_tls():
        consume(produce())

    result = over_tls.execute_in_process(instance=dagster_instance)
    assert result.success and result.output_for_node("consume") == 1024 * 1024
    store = RedisObjectStore(port=tls_server.port, password=tls_server.password, key_prefix="tls",
                             ssl_ca_file=str(tls_server.ca_file))
    assert sorted(store.list_paths(f"run/{result.run_id}")) == ["consume/result", "produce/result"]


def test_plain_clients_and_missing_ca_files_get_typed_errors(tls_server):
    plain = RedisObjectStore(port=tls_server.port, password=tls_server.password, connect_timeout=2.0,
                             socket_timeout=2.0)
    with pytest.raises(StoreUnavailableError, match="ssl_ca_file"):
        plain.put(ObjectKey.for_run("r", "s", "o"), 1)
    with pytest.raises(StoreConfigError, match="is not a file"):
        RedisObjectStore(port=tls_server.port, ssl_ca_file="/nonexistent/ca.pem")
