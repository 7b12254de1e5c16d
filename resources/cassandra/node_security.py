"""The secure part of :class:`~asgard.resources.cassandra.node.CassandraNode` (``secure=True``):
TLS-only CQL from the node's own (or its ring's) certificate, JMX behind a login, and a superuser
of its own in place of the stock ``cassandra``/``cassandra``. :class:`NodeSecurity` is the node's
``security``, built from its :class:`~asgard.resources.cassandra.node_spec.NodeSpec` alone.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any

from ..paths import write_private
from ..process import ServerError
from .node_spec import NodeSpec
from .ring_ca import member_certificate, ring_superuser_password
from .tls import NodeTLS, ensure_node_certificate

# the superuser a secure node is given in place of the stock cassandra/cassandra (which is dropped)
SUPERUSER = "asgard_admin"


@contextlib.contextmanager
def refusals_unlogged():
    """The driver logs each refused login with its traceback (a warning and an error); a probe that
    expects refusals (a node still setting up its superuser) drops the driver's records made on its
    own thread for the block. What the probe finally raises carries the driver's error."""
    me = threading.get_ident()
    quiet = lambda record: record.thread != me  # noqa: E731 -- logging takes a callable as a filter
    logger = logging.getLogger("cassandra.cluster")
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def secure_marker(workdir: Path) -> Path:
    """Where a node records that it is secure (read before its spec exists: it decides ``secure``)."""
    return workdir / "conf" / "secure"


class NodeSecurity:
    """Certificates, passwords and the superuser login of a secure node: its directory, address,
    ``secure`` and ring settings come from ``spec``."""

    def __init__(self, spec: NodeSpec):
        self.spec = spec

    @property
    def secure_marker(self) -> Path:
        return secure_marker(self.spec.workdir)

    @property
    def tls(self) -> NodeTLS:
        return NodeTLS(self.spec.conf_dir / "tls")

    @property
    def password_file(self) -> Path:
        """The generated superuser's password (mode 0600); the user is :data:`SUPERUSER`."""
        return self.spec.workdir / "superuser.password"

    @property
    def jmx_password_file(self) -> Path:
        """``<user> <password>`` for the JMX server (the JDK may rewrite it with hashes)."""
        return self.spec.conf_dir / "jmxremote.password"

    @property
    def nodetool_password_file(self) -> Path:
        """``<user> <password>`` for ``nodetool -pwf`` (kept apart: the server's copy gets hashed)."""
        return self.spec.conf_dir / "nodetool.password"

    @property
    def superuser_ready(self) -> Path:
        return self.spec.workdir / "superuser.ready"  # removed by wipe(): fresh data has only the stock role

    def superuser_password(self) -> str:
        """The generated superuser's password, made (random, 0600 file) on first use; on a ring across
        hosts, the ring's one (``superuser.password`` in its CA directory, made by
        ``ring_ca.create_ring_ca``) copied to the member, or :class:`~.ring_ca.RingPasswordMissing`."""
        if self.spec.ring_ca and not self.password_file.exists():
            write_private(self.password_file, ring_superuser_password(Path(self.spec.ring_ca), self.spec.address))
        try:
            return self.password_file.read_text().strip()
        except FileNotFoundError:
            import secrets

            password = secrets.token_urlsafe(24)  # URL-safe: no quoting issue in CQL or a shell
            write_private(self.password_file, password + "\n")
            return password

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~asgard.resources.stores.cql.CassandraObjectStore` that reach
        this node: its address and port and, for a secure node, its CA and superuser."""
        options: dict[str, Any] = {"contact_points": [self.spec.address], "port": self.spec.native_port}
        if self.spec.secure:
            options.update(username=SUPERUSER, password=self.superuser_password(),
                           ssl_ca_file=str(self.tls.ca_cert), ssl_verify_hostname=True)
        return options

    def prepare(self) -> None:
        """Before a start: the secure marker, certificate and JMX password files (or no marker)."""
        if not self.spec.secure:
            self.secure_marker.unlink(missing_ok=True)
            return
        self.spec.conf_dir.mkdir(parents=True, exist_ok=True)
        self.secure_marker.write_text("TLS-only CQL, PasswordAuthenticator, JMX authentication\n")
        if self.spec.ring_ca:
            # issued here (ca.key at hand) or signed on the CA's host; never a CA of its own
            member_certificate(Path(self.spec.ring_ca), self.tls.directory, self.spec.address)
        else:
            ensure_node_certificate(self.tls.directory, self.spec.address)
        line = f"{SUPERUSER} {self.superuser_password()}\n"
        write_private(self.jmx_password_file, line)
        write_private(self.nodetool_password_file, line)

    def jmx_flags(self) -> list[str]:
        """The JVM flags that put the node's JMX behind its login (none for an open node)."""
        if not self.spec.secure:
            return []
        # Cassandra 5.0 reads these at start; JMX stays bound to loopback (jmx.local.port)
        # the add-exports line is Cassandra's conf/jvm17-server.options': its JMX authenticator wraps the JDK's
        return ["--add-exports", "java.management/com.sun.jmx.remote.security=ALL-UNNAMED",
                "-Dcom.sun.management.jmxremote.authenticate=true",
                f"-Dcom.sun.management.jmxremote.password.file={self.jmx_password_file}"]

    def cql_cluster(self, username: str | None = None, password: str | None = None, timeout: float = 10):
        """A driver ``Cluster`` for this node alone (admin work: settings, ALTER TABLE): over TLS
        and logged in as :data:`SUPERUSER` on a secure node, unless ``username`` is given."""
        from ..stores.cql import build_cluster

        if self.spec.secure and username is None:
            username, password = SUPERUSER, self.superuser_password()
        return build_cluster([self.spec.address], self.spec.native_port, username=username, password=password,
                             connect_timeout=timeout, admin=True,
                             tls=(str(self.tls.ca_cert), None, None, True) if self.spec.secure else None)

    def ensure_superuser(self, timeout: float = 120) -> None:
        """Give a fresh secure node its own superuser (random password, in :attr:`password_file`)
        and drop the stock ``cassandra``/``cassandra`` one, which every scanner tries first."""
        if self.superuser_ready.exists():
            return
        from cassandra import AuthenticationFailed
        from cassandra.cluster import NoHostAvailable

        def login(user: str, password: str):
            cluster = self.cql_cluster(user, password)
            try:
                with refusals_unlogged():
                    return cluster.connect()
            except BaseException:
                cluster.shutdown()
                raise

        def auth_failed(exc: NoHostAvailable) -> bool:
            return any(isinstance(e, AuthenticationFailed) for e in (exc.errors or {}).values())

        password = self.superuser_password()
        deadline = time.monotonic() + timeout
        founder = not self.spec.seeds or self.spec.address == self.spec.seeds[0]
        while True:
            try:
                session = login(SUPERUSER, password)  # done before (the marker went with a wipe of data/)
                break
            except NoHostAvailable as exc:
                if (not auth_failed(exc) or not founder) and time.monotonic() < deadline:
                    # a member joining a ring logs in as the role its first seed made, once the
                    # ring's system_auth answers; it never makes one of its own
                    time.sleep(0.5)
                    continue
                if not auth_failed(exc) or not founder:
                    raise ServerError(f"{self.spec.name}: no CQL login as {SUPERUSER} over TLS within {timeout:.0f}s: "
                                      f"{exc}") from exc
            try:
                # the stock role appears shortly after CQL opens (superuser_setup_delay_ms)
                stock = login("cassandra", "cassandra")
            except NoHostAvailable as exc:
                if time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                raise ServerError(
                    f"{self.spec.name}: neither {SUPERUSER} (password in {self.password_file}) nor the stock superuser "
                    f"can log in ({exc}). If the password file was replaced, restore it, or wipe the node's data "
                    "(`asgard cassandra down`, delete its data/ directory) to set it up again.") from exc
            try:
                stock.execute(f"CREATE ROLE IF NOT EXISTS {SUPERUSER} WITH SUPERUSER = true AND LOGIN = true "
                              "AND PASSWORD = %s", (password,))
            finally:
                stock.cluster.shutdown()
        try:
            # a superuser cannot drop the role it is logged in as: done as the new one
            session.execute("DROP ROLE IF EXISTS cassandra")
        finally:
            session.cluster.shutdown()
        self.superuser_ready.parent.mkdir(parents=True, exist_ok=True)
        self.superuser_ready.write_text(f"{SUPERUSER}\n")
