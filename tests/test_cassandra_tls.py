"""A secure node end to end: `asgard cassandra up --secure`'s TLS, generated superuser and
JMX login, reached by Dagster jobs with credentials from the environment (EnvVar).

The module's node runs on 127.0.0.8 from a temporary directory and is stopped afterwards.
"""
from __future__ import annotations

import re
import stat
import time
from pathlib import Path

import pytest
from dagster import EnvVar, build_run_status_sensor_context, execute_job, job, op, reconstructable

from asgard_dagster import CassandraIOManager, CassandraResource, make_purge_on_success_sensor
from asgard.resources.cassandra import CassandraNode
from asgard.resources.cassandra.node import SUPERUSER
from asgard.resources.cassandra.nodetool import NodetoolError, nodetool
from asgard.resources.cassandra.tls import CertificateError, verify_node_certificate
from asgard.resources.stores import ObjectKey, StoreConfigError, StoreUnavailableError
from tests.jobs import secure_job

ADDRESS = "127.0.0.8"
KEYSPACE = "asgard_tls"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def secure_node(tmp_path_factory):
    node = CassandraNode(index=8, heap="1G", secure=True, workdir=tmp_path_factory.mktemp("secure-node8"))
    node.start()
    yield node
    node.stop()


@pytest.fixture
def env_credentials(secure_node, monkeypatch):
    """The node's CA and superuser in the environment, where EnvVar fields read them."""
    monkeypatch.setenv("ASGARD_TEST_CASSANDRA_CA", str(secure_node.tls.ca_cert))
    monkeypatch.setenv("ASGARD_TEST_CASSANDRA_USER", SUPERUSER)
    monkeypatch.setenv("ASGARD_TEST_CASSANDRA_PASSWORD", secure_node.superuser_password())
    return secure_node


def _io_manager(**overrides) -> CassandraIOManager:
    fields = dict(contact_points=[ADDRESS], keyspace=KEYSPACE, ssl_ca_file=EnvVar("ASGARD_TEST_CASSANDRA_CA"),
                  username=EnvVar("ASGARD_TEST_CASSANDRA_USER"), password=EnvVar("ASGARD_TEST_CASSANDRA_PASSWORD"))
    return CassandraIOManager(cassandra=CassandraResource(**{**fields, **overrides}))


def test_job_stores_and_reads_outputs_over_tls_with_envvar_credentials(env_credentials, dagster_instance):
    @op
    def secret_value() -> dict:
        return {"payload": "x" * 3_000_000}  # several chunks over TLS, not just an inline row

    @op
    def read_back(value: dict) -> int:
        return len(value["payload"])

    io_manager = _io_manager()

    @job(resource_defs={"io_manager": io_manager})
    def over_tls():
        read_back(secret_value())

    result = over_tls.execute_in_process(instance=dagster_instance)
    assert result.success and result.output_for_node("read_back") == 3_000_000
    run_config = repr(dagster_instance.get_run_by_id(result.run_id).run_config)
    assert env_credentials.superuser_password() not in run_config  # the secret stays in the environment
    # the purge sensor connects with the same fields (EnvVars read where it runs, not their names)
    store = io_manager.store()
    assert store.tls is not None and store.username == SUPERUSER
    assert store.list_paths(f"run/{result.run_id}") == ["read_back/result", "secret_value/result"]
    sensor = make_purge_on_success_sensor(io_manager)
    sensor(build_run_status_sensor_context(sensor_name=sensor.name, dagster_instance=dagster_instance,
                                           dagster_run=result.dagster_run,
                                           dagster_event=result.get_run_success_event()))
    assert store.list_paths(f"run/{result.run_id}") == []


def test_small_requests_go_direct_over_tls_with_the_login(env_credentials):
    """A small put and get go on the store's direct connection (cql.direct), which logs in
    with the same credentials and speaks TLS with the same CA as the driver's pool; it opens
    on a thread of its own (a login and a handshake), the requests meanwhile through the pool."""
    import ssl

    from cassandra import AuthenticationFailed
    from cassandra.auth import PlainTextAuthProvider

    from asgard.resources.stores.cql import session as cassandra_session
    from asgard.resources.stores.cql.direct_connection import DirectConnection

    store = _io_manager().store()
    store.put(ObjectKey.for_run("direct-tls", "warm", "up"), 1)
    store.put(ObjectKey.for_run("direct-tls", "warm", "up"), 2)  # starts the login on a thread of its own

    def opened():
        return [slot.conn for (_, host, _), slot in cassandra_session.direct_slots.items()
                if host == ADDRESS and slot.conn is not None]

    deadline = time.monotonic() + 10
    while not opened() and time.monotonic() < deadline:
        time.sleep(0.05)
    (conn,) = opened()
    assert isinstance(conn._sock, ssl.SSLSocket) and conn._sock.version() in ("TLSv1.2", "TLSv1.3")
    sent = []
    send = DirectConnection._send

    def record(direct, messages, *streams):
        sent.extend(type(m).__name__ for m in messages)
        return send(direct, messages, *streams)

    DirectConnection._send = record
    try:
        keys = [ObjectKey.for_run("direct-tls", "small", str(i)) for i in range(5)]
        for i, key in enumerate(keys):
            store.put(key, {"i": i, "pad": "p" * 500})  # under any batch warning threshold: one BATCH
        assert [store.get(key)[0]["i"] for key in keys] == list(range(5))
    finally:
        DirectConnection._send = send
    assert sent == ["BatchMessage"] * 5 + ["ExecuteMessage"] * 5
    cluster = store.session.cluster
    with pytest.raises(AuthenticationFailed, match="refused the login"):
        DirectConnection(ADDRESS, 9042, 4, 5.0, ssl_context=cluster.ssl_context,
                         auth_provider=PlainTextAuthProvider(SUPERUSER, "not-the-password"))
    with pytest.raises(AuthenticationFailed, match="asks for a login"):
        DirectConnection(ADDRESS, 9042, 4, 5.0, ssl_context=cluster.ssl_context)
    store.purge_scope("run/direct-tls")


def test_multiprocess_job_over_tls(env_credentials, dagster_instance):
    # every step is its own process: each opens its own TLS session from the EnvVars
    with execute_job(reconstructable(secure_job), instance=dagster_instance) as result:
        assert result.success
        assert result.output_for_node("total_secret_array") == sum(float(i) for i in range(50_000))
        run_id = result.run_id
    resource = CassandraResource(contact_points=[ADDRESS], keyspace=KEYSPACE,
                                 ssl_ca_file=EnvVar("ASGARD_TEST_CASSANDRA_CA"),
                                 username=EnvVar("ASGARD_TEST_CASSANDRA_USER"),
                                 password=EnvVar("ASGARD_TEST_CASSANDRA_PASSWORD"))
    store = resource.get_store()
    assert store.list_paths(f"run/{run_id}") == ["produce_secret_array/result", "total_secret_array/result"]
    resource.purge_run(run_id)
    assert store.list_paths(f"run/{run_id}") == []


def test_plain_client_is_refused_and_told_to_set_the_ca(env_credentials):
    store = CassandraResource(contact_points=[ADDRESS], keyspace=KEYSPACE, username=SUPERUSER,
                              password=env_credentials.superuser_password()).get_store()
    with pytest.raises(StoreUnavailableError, match=r"127\.0\.0\.8:9042.*requires TLS.*set ssl_ca_file.*ca\.pem"):
        store.put(ObjectKey.for_run("plain", "s", "o"), 1)


def test_a_certificate_from_another_ca_is_refused(env_credentials, tmp_path):
    from asgard.resources.cassandra.tls import ensure_node_certificate

    other = ensure_node_certificate(tmp_path / "other", ADDRESS)  # same address, another CA
    store = CassandraObjectStoreFor(ssl_ca_file=str(other.ca_cert), password=env_credentials.superuser_password())
    with pytest.raises(StoreUnavailableError, match="does not verify against ssl_ca_file"):
        store.ping()
    with pytest.raises(StoreConfigError, match="not a readable file"):
        CassandraObjectStoreFor(ssl_ca_file=str(tmp_path / "missing.pem"), password="x").ping()


def CassandraObjectStoreFor(**kwargs):
    from asgard.resources.stores.cql import CassandraObjectStore

    return CassandraObjectStore(**{"contact_points": [ADDRESS], "keyspace": KEYSPACE, "username": SUPERUSER,
                                   "ride_through_seconds": 0, **kwargs})


@pytest.mark.parametrize("user", [SUPERUSER, "cassandra"])  # the stock superuser is gone too
def test_wrong_password_is_a_typed_error_that_says_what_to_check(env_credentials, monkeypatch, user):
    monkeypatch.setenv("ASGARD_TEST_CASSANDRA_USER", user)
    monkeypatch.setenv("ASGARD_TEST_CASSANDRA_PASSWORD", "cassandra")
    store = _io_manager().store()
    with pytest.raises(StoreUnavailableError, match=r"127\.0\.0\.8:9042.*Bad credentials.*check username and password"):
        store.put(ObjectKey.for_run("wrong", "s", "o"), 1)


def test_password_files_are_private(secure_node):
    for path in (secure_node.password_file, secure_node.nodetool_password_file, secure_node.tls.node_key,
                 secure_node.tls.keystore, secure_node.tls.ca_key):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert len(secure_node.superuser_password()) >= 24


def test_node_certificate_verifies_against_the_ca_for_the_node_ip(secure_node):
    from cryptography import x509

    verify_node_certificate(secure_node.tls.node_cert, secure_node.tls.ca_cert, ADDRESS)
    with pytest.raises(CertificateError, match="subjectAltName"):
        verify_node_certificate(secure_node.tls.node_cert, secure_node.tls.ca_cert, "127.0.0.9")
    cert = x509.load_pem_x509_certificate(secure_node.tls.node_cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == [ADDRESS]


def test_server_config_and_jmx_login(secure_node):
    settings = secure_node.settings(["authenticator", "client_encryption_options.enabled",
                                     "client_encryption_options.optional"])
    assert settings == {"authenticator": "PasswordAuthenticator", "client_encryption_options.enabled": "true",
                        "client_encryption_options.optional": "false"}
    assert "ReleaseVersion" in secure_node.nodetool("version")  # the wrapper logs in from its 0600 file
    with pytest.raises(NodetoolError, match="Authentication failed"):
        nodetool(secure_node.jmx_port, "version")
    # a node built later without saying secure (a retune's restart) stays secure
    assert CassandraNode(index=8, workdir=secure_node.workdir).secure


def test_retune_job_reads_the_secure_node_through_the_io_managers_connection(env_credentials, dagster_instance,
                                                                            monkeypatch, tmp_path):
    from asgard_dagster.retune import make_retune_job
    from asgard.pipelines.jobs import make_job

    # the job finds node 8 by its directory under ASGARD_HOME: point a scratch home at the fixture's
    home = tmp_path / "home"
    (home / "run" / "cassandra").mkdir(parents=True)
    (home / "run" / "cassandra" / "node8").symlink_to(env_credentials.workdir)
    monkeypatch.setenv("ASGARD_HOME", str(home))
    forest = make_job("lightgbm_forest", "cassandra")
    retune = make_retune_job([forest], connection=_io_manager().connection())  # TLS and EnvVar login
    config = {"ops": {"plan_workload": {"config": {"upcoming_jobs": [forest.name], "apply": False, "node_index": 8,
                                                    "keyspace": KEYSPACE, "evaluations": 100,
                                                    "lookahead_seconds": 600}}}}
    result = retune.execute_in_process(run_config=config, instance=dagster_instance)
    assert result.success
    outcome = result.output_for_node("reconfigure")
    assert outcome["in_force"] is not None and outcome["applied"] is None  # read back over TLS, dry run
    assert "durable_writes" in outcome["in_force"]  # the keyspace the store made, read from the node


# --- no credentials in the code --------------------------------------------------------------
CREDENTIAL_PATTERNS = [
    # password = "...", "password": "...", PASSWORD = '...' (a non-empty literal)
    re.compile(r"""(?i)\b\w*(password|passwd|secret|secret_key|token)\b["']?\s*[:=]\s*["'][^"'\s{}]{3,}["']"""),
    re.compile(r"(?i)minioadmin"),
    re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"""(?i)aws_secret_access_key\s*[:=]\s*["'][^"']{8,}["']"""),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
]


def test_no_credential_literals_in_the_package_sources():
    found = []
    for package in ("asgard_dagster", "resources", "tuner", "pipelines"):
        for path in sorted((REPO / package).rglob("*")):
            if path.suffix not in (".py", ".yaml", ".yml", ".json", ".toml", ".cfg", ".xml", ".sh") or not path.is_file():
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if any(p.search(line) for p in CREDENTIAL_PATTERNS):
                    found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "credential literals in the sources (read them from the environment instead):\n" + "\n".join(found)
