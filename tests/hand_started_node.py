"""A Cassandra started the way its user would start one by hand, outside the project: the release's
jars (Maven Central's ``cassandra-all`` and its dependencies, fetched by the install step), a
``cassandra.yaml`` written here line by line, ``java`` run on them in a network namespace of its own
(so it listens on an address that is not loopback), with a CQL login, client TLS, and JMX on that
address behind a password file and over TLS.

Nothing of the project's launcher is used (no ``CassandraNode``, no launch record, no patches, no
JVM flags of the project's): what the project touches is only what a user gives it (an address, a
login, a CA file, a JMX endpoint and its truststore).

The namespace is slot :data:`SLOT` of :class:`~asgard.resources.network.NetNamespace`
(``asgard-s245``, the node at 10.211.245.2, the root namespace at 10.211.245.1): none of the
network profiles' slots, and nothing of the emulated hosts' bridge (10.213.0.x, ``asgard-h<n>``).
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

# coreutils env with the stop signals at their defaults, exec'ing in place (the project's launcher uses it too)
from asgard.resources.process import DEFAULT_SIGNALS

SLOT = 245
CQL_PORT, JMX_PORT = 9042, 7199

# The JPMS options of Cassandra's conf/jvm11-server.options and jvm17-server.options, as a user copies
# them into a start script, and the package of the JDK's JMX password login (Cassandra wraps its
# authenticator when it starts JMX for remote clients: IllegalAccessException without it, on both).
JAVA17_FLAGS = [
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED",
    # the JDK's JMX password-file login, which Cassandra wraps when it starts JMX for remote clients
    "--add-exports", "java.management/com.sun.jmx.remote.security=ALL-UNNAMED",
    "--add-opens", "java.management/com.sun.jmx.remote.security=ALL-UNNAMED",
    "--add-exports", "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports", "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
]
# 4.1 on Java 17 (a JDK that release does not support): its jamm (0.3.x) measures memtable objects by
# reflection into java.util.concurrent (ConcurrentHashMap$KeySetView.value, then the atomics), refused
# without these two: the node dies at start-up with an InaccessibleObjectException. Found one at a time.
JAVA17_FLAGS_4_1 = [
    "--add-opens", "java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.concurrent.atomic=ALL-UNNAMED",
]

YAML = """\
# written by hand for one node: nothing of the project's own configuration
cluster_name: someone elses cluster
num_tokens: 16
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{address}:7000"
listen_address: {address}
rpc_address: {address}
storage_port: 7000
native_transport_port: {cql_port}
data_file_directories:
  - {root}/data
commitlog_directory: {root}/commitlog
saved_caches_directory: {root}/saved_caches
hints_directory: {root}/hints
cdc_raw_directory: {root}/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 10000ms
authenticator: PasswordAuthenticator
authorizer: CassandraAuthorizer
role_manager: CassandraRoleManager
auto_snapshot: false
client_encryption_options:
  enabled: true
  optional: false
  keystore: {root}/conf/node.p12
  keystore_password: {store_password}
  store_type: PKCS12
  require_client_auth: false
"""
# the 5.0 node names its memtable implementations, as 5.0's own cassandra.yaml does; the 4.1 node's yaml
# names none (4.1 has no trie memtable; without the section, only 'default' is there)
MEMTABLES_5_0 = """\
memtable:
  configurations:
    skiplist:
      class_name: SkipListMemtable
    trie:
      class_name: TrieMemtable
    default:
      inherits: skiplist
"""
LOGBACK = """<configuration><appender name="F" class="ch.qos.logback.core.FileAppender">
<file>{logs}/system.log</file><encoder><pattern>%-5level [%thread] %date{{ISO8601}} %F:%L - %msg%n</pattern></encoder>
</appender><root level="INFO"><appender-ref ref="F"/></root></configuration>
"""


def release_lib(version: str) -> Path:
    """The release's jars (the install step's Maven fetch of ``cassandra-all:<version>``)."""
    from asgard.resources.cassandra.install import install

    return install(version, tools=False)


def make_tls(conf: Path, address: str, password: str) -> dict[str, Path]:
    """A CA of the user's own, and the node's key and certificate (its IP in the SAN): the CA in PEM
    for the CQL client, the node's PKCS12 keystore (cryptography) for CQL and JMX over TLS, and a
    JKS truststore of the CA (keytool) for a JMX client."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "someone else"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("their CA")).issuer_name(name("their CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name(address)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    conf.mkdir(parents=True, exist_ok=True)
    ca_pem = conf / "ca.pem"
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    keystore = conf / "node.p12"
    keystore.write_bytes(pkcs12.serialize_key_and_certificates(
        b"node", key, cert, [ca], serialization.BestAvailableEncryption(password.encode())))
    keystore.chmod(0o600)
    truststore = conf / "jmx-truststore.jks"
    proc = subprocess.run([shutil.which("keytool") or "keytool", "-importcert", "-noprompt", "-alias", "their-ca",
                           "-file", str(ca_pem), "-keystore", str(truststore), "-storetype", "JKS",
                           "-storepass", password], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"keytool: {proc.stdout}{proc.stderr}")
    return {"ca_pem": ca_pem, "keystore": keystore, "truststore": truststore}


class HandStartedNode:
    """One node of ``version`` in the namespace of :data:`SLOT`, its files under ``root``."""

    def __init__(self, version: str, root: Path, heap: str = "768M"):
        from asgard.resources.network import NetNamespace

        self.version, self.root, self.heap = version, Path(root), heap
        self.namespace = NetNamespace(SLOT)
        self.address = self.namespace.address
        self.store_password = secrets.token_urlsafe(12)
        self.jmx_user, self.jmx_password = "their_jmx", secrets.token_urlsafe(12)
        self.cql_user, self.cql_password = "cassandra", "cassandra"  # the release's first login
        self.proc: subprocess.Popen | None = None
        self.tls: dict[str, Path] = {}

    @property
    def conf(self) -> Path:
        return self.root / "conf"

    def write_conf(self) -> None:
        self.tls = make_tls(self.conf, self.address, self.store_password)
        yaml = YAML.format(address=self.address, cql_port=CQL_PORT, root=self.root, store_password=self.store_password)
        (self.conf / "cassandra.yaml").write_text(yaml + ("" if self.version.startswith("4.") else MEMTABLES_5_0))
        (self.conf / "logback.xml").write_text(LOGBACK.format(logs=self.root / "logs"))
        # the JDK's own JMX login: a password file readable by its owner only, and an access file
        passwords = self.conf / "jmxremote.password"
        passwords.write_text(f"{self.jmx_user} {self.jmx_password}\n")
        passwords.chmod(0o600)
        (self.conf / "jmxremote.access").write_text(f"{self.jmx_user} readwrite\n")

    def command(self) -> list[str]:
        lib = release_lib(self.version)
        jamm = next(lib.glob("jamm-*.jar"))
        return [
            shutil.which("java") or "java", f"-Xms{self.heap}", f"-Xmx{self.heap}", "-XX:+UseG1GC",
            "-Xss256k", "-XX:+HeapDumpOnOutOfMemoryError", "-XX:-UsePerfData",
            *JAVA17_FLAGS, *(JAVA17_FLAGS_4_1 if self.version.startswith("4.") else []),
            f"-javaagent:{jamm}",
            f"-Dcassandra.config=file://{self.conf / 'cassandra.yaml'}",
            f"-Dcassandra.logdir={self.root / 'logs'}", f"-Dcassandra.storagedir={self.root}",
            "-Dcassandra-foreground=yes",
            # a single seed: no gossip to settle, the default superuser made at once
            "-Dcassandra.skip_wait_for_gossip_to_settle=0", "-Dcassandra.superuser_setup_delay_ms=0",
            # JMX for remote clients (cassandra-env.sh's LOCAL_JMX=no), on the node's own address
            f"-Dcassandra.jmx.remote.port={JMX_PORT}", f"-Dcom.sun.management.jmxremote.rmi.port={JMX_PORT}",
            f"-Djava.rmi.server.hostname={self.address}",
            "-Dcom.sun.management.jmxremote.authenticate=true",
            f"-Dcom.sun.management.jmxremote.password.file={self.conf / 'jmxremote.password'}",
            f"-Dcom.sun.management.jmxremote.access.file={self.conf / 'jmxremote.access'}",
            "-Dcom.sun.management.jmxremote.ssl=true", "-Dcom.sun.management.jmxremote.ssl.need.client.auth=false",
            "-Dcom.sun.management.jmxremote.registry.ssl=true",
            f"-Djavax.net.ssl.keyStore={self.tls['keystore']}", "-Djavax.net.ssl.keyStoreType=PKCS12",
            f"-Djavax.net.ssl.keyStorePassword={self.store_password}",
            "-cp", f"{self.conf}{os.pathsep}{lib}/*", "org.apache.cassandra.service.CassandraDaemon",
        ]

    def start(self, timeout: float = 180.0) -> "HandStartedNode":
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(exist_ok=True)
        self.write_conf()
        self.kill_leftovers()
        self.namespace.create()
        log = open(self.root / "logs" / "stdout.log", "wb")
        # with the stop signals at their defaults, as an operator's shell starts it (a whole-suite pytest
        # may have inherited SIGTERM ignored: the JVM then ignored the teardown's TERM for its 60 s)
        self.proc = subprocess.Popen([*DEFAULT_SIGNALS, *self.namespace_prefix(), *self.command()], stdout=log,
                                     stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Cassandra {self.version} exited ({self.proc.returncode}):\n{self.log_tail()}")
            if self._listening(CQL_PORT) and self._login_works():
                return self
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"Cassandra {self.version} did not take a CQL login within {timeout:.0f}s:\n{self.log_tail()}")

    def kill_leftovers(self) -> None:
        """A node an earlier, interrupted run left in this namespace: deleting the namespace's name
        would not stop it (a process outlives the name), so it is killed first."""
        if not self.namespace.exists():
            return
        from asgard.resources.network.namespace import _ip

        pids = subprocess.run([_ip(), "netns", "pids", self.namespace.name], capture_output=True, text=True).stdout
        for pid in (int(p) for p in pids.split()):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass

    def namespace_prefix(self) -> list[str]:
        from asgard.resources.network.namespace import netns_exec_prefix

        return netns_exec_prefix(self.namespace.name)

    def _listening(self, port: int) -> bool:
        try:
            with socket.create_connection((self.address, port), timeout=1):
                return True
        except OSError:
            return False

    def _login_works(self) -> bool:
        """The default superuser exists (made by the node shortly after it listens)."""
        from cassandra.auth import PlainTextAuthProvider
        from cassandra.cluster import Cluster
        import ssl

        context = ssl.create_default_context(cafile=str(self.tls["ca_pem"]))
        cluster = Cluster([self.address], port=CQL_PORT, ssl_context=context, connect_timeout=5,
                          auth_provider=PlainTextAuthProvider(self.cql_user, self.cql_password))
        try:
            cluster.connect().execute("SELECT release_version FROM system.local")
            return True
        except Exception:
            return False
        finally:
            cluster.shutdown()

    def log_tail(self, lines: int = 60) -> str:
        out = []
        for name in ("stdout.log", "system.log"):
            path = self.root / "logs" / name
            if path.exists():
                out += [f"--- {path}", *path.read_text(errors="replace").splitlines()[-lines:]]
        return "\n".join(out)

    def pid(self) -> int:
        return self.proc.pid

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close_sessions(self) -> None:
        """This process's cached driver sessions to this node (their reconnect timers would outlive it)."""
        from asgard.resources.stores.cql import session as cached

        with cached._sessions_lock:
            mine = [k for k in cached._sessions if self.address in k[1]]
            sessions = [cached._sessions.pop(k) for k in mine]
        for session in sessions:
            session.cluster.shutdown()

    def stop(self) -> None:
        self.close_sessions()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(30)
        self.namespace.delete()
