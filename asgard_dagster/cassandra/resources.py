"""``CassandraResource``: a connection to the Cassandra cluster that holds op outputs."""
from __future__ import annotations

from typing import Optional

from dagster import ConfigurableResource
from pydantic import Field

from asgard.resources.stores.cql import CassandraObjectStore

from ..io_manager import resolved


TLS_FIELDS = {
    "ssl_ca_file": "PEM file of the CA that signed the nodes' certificates; set, every connection uses TLS (1.2+) "
    "and trusts only this CA. For a node of `asgard cassandra up --secure`: its conf/tls/ca.pem. None: plain.",
    "ssl_certfile": "PEM client certificate, for a cluster that requires one (require_client_auth); needs ssl_ca_file.",
    "ssl_keyfile": "PEM private key of ssl_certfile (if not in it).",
    "ssl_verify_hostname": "Check that each node's certificate names the address it is reached at (a secure local "
    "node has its IP in the SAN). False checks the CA signature only.",
}


class CassandraResource(ConfigurableResource):
    """Connection settings for a Cassandra cluster; the defaults reach the local node that
    ``asgard cassandra up`` starts.

    Example::

        from dagster import Definitions, EnvVar
        from asgard_dagster import CassandraResource

        defs = Definitions(resources={"cassandra": CassandraResource(
            contact_points=["10.0.0.5", "10.0.0.6"], replication_factor=2,
            username=EnvVar("CASSANDRA_USER"), password=EnvVar("CASSANDRA_PASSWORD"),
            ssl_ca_file="/etc/cassandra/ca.pem")})   # TLS: trust the cluster's CA
        # the IO manager's connection, nested: CassandraIOManager(cassandra=CassandraResource(...))
    """

    contact_points: list[str] = Field(default=["127.0.0.1"], description="Cassandra hosts to contact first (the local node by default).")
    port: int = Field(default=9042, description="CQL native transport port.")
    keyspace: str = Field(default="asgard", description="Keyspace of the objects table (created if missing).")
    table: str = Field(default="objects", description="Table holding manifests and chunks (created if missing).")
    replication_factor: int = Field(default=1, description="SimpleStrategy replication factor used when creating the keyspace.")
    consistency: str = Field(default="LOCAL_QUORUM", description="Consistency level of reads and writes (ONE, "
                             "LOCAL_QUORUM, QUORUM, ALL, ...). (LOCAL_)QUORUM falls to one replica only for a request "
                             "that meets a replica known to be down (a rolling restart).")
    username: Optional[str] = Field(default=None, description="User for PasswordAuthenticator; pass EnvVar('...'), never a literal.")
    password: Optional[str] = Field(default=None, description="Password for PasswordAuthenticator; pass EnvVar('...'), never a literal.")
    ssl_ca_file: Optional[str] = Field(default=None, description=TLS_FIELDS["ssl_ca_file"])
    ssl_certfile: Optional[str] = Field(default=None, description=TLS_FIELDS["ssl_certfile"])
    ssl_keyfile: Optional[str] = Field(default=None, description=TLS_FIELDS["ssl_keyfile"])
    ssl_verify_hostname: bool = Field(default=True, description=TLS_FIELDS["ssl_verify_hostname"])
    connect_timeout: float = Field(default=5.0, description="Seconds to wait for the cluster before failing with 'unreachable'.")
    durable_writes: bool = Field(
        default=False,
        description="durable_writes of the keyspace when it is created. False skips the commit log (outputs are "
        "recomputable; 40% less server CPU per byte written); a crashed node then loses outputs it had not flushed.",
    )
    request_timeout: float = Field(default=30.0, description="Seconds per read or write request.")
    ride_through_seconds: float = Field(
        default=60.0,
        description="Seconds a request keeps retrying while a node restarts (a retune's restart took 9-27 s here "
        "under load: twice the slowest), "
        "or a replica is down or draining, before failing with 'unreachable'. At replication factor 2 a request "
        "does not wait for a restarting member (LOCAL_QUORUM falls to the live replica). 0 fails at once.",
    )

    jmx_port: Optional[int] = Field(
        default=None, description="JMX port of every member of a cluster the project does not run (each at its own "
        "address): the retune job sets live settings there with nodetool's transport. None: live settings are "
        "recorded as not applied, with the nodetool command and cassandra.yaml change an operator would make.")
    jmx_endpoints: dict[str, str] = Field(
        default={}, description="Member address -> 'host:port' of its JMX, where it differs from address:jmx_port "
        "(a tunnel, a NAT).")
    jmx_username: Optional[str] = Field(default=None, description="JMX user (pass EnvVar('...')).")
    jmx_password: Optional[str] = Field(default=None, description="JMX password (pass EnvVar('...'), never a literal).")
    jmx_ssl: bool = Field(default=False, description="JMX over TLS (nodetool --ssl), trusting jmx_truststore.")
    jmx_truststore: Optional[str] = Field(default=None, description="JKS/PKCS12 truststore for JMX over TLS.")

    def jmx_endpoints_for(self, members: list[str]) -> dict:
        """Each member's :class:`~asgard.tuner.unmanaged.JmxEndpoint`, where one is configured."""
        from asgard.tuner.unmanaged import JmxEndpoint

        out = {}
        endpoints = dict(self.jmx_endpoints or {})
        for member in members:
            where = endpoints.get(member) or (f"{member}:{self.jmx_port}" if self.jmx_port else None)
            if where is None:
                continue
            host, _, port = where.rpartition(":")
            out[member] = JmxEndpoint(host=host, port=int(port), username=resolved(self.jmx_username),
                                      password=resolved(self.jmx_password), ssl=self.jmx_ssl,
                                      truststore=self.jmx_truststore)
        return out

    def connection_kwargs(self) -> dict:
        kwargs = dict(
            contact_points=list(self.contact_points), port=self.port, keyspace=self.keyspace, table=self.table,
            replication_factor=self.replication_factor, consistency=self.consistency, username=self.username,
            password=self.password, ssl_ca_file=self.ssl_ca_file, ssl_certfile=self.ssl_certfile,
            ssl_keyfile=self.ssl_keyfile, ssl_verify_hostname=self.ssl_verify_hostname,
            connect_timeout=self.connect_timeout, request_timeout=self.request_timeout,
            durable_writes=self.durable_writes, ride_through_seconds=self.ride_through_seconds,
        )
        return {k: resolved(v) for k, v in kwargs.items()}

    def get_store(self, **store_kwargs) -> CassandraObjectStore:
        """A :class:`CassandraObjectStore` on this connection (``ttl_seconds``, ``codec``, ... as keywords;
        a keyword that names a connection field, e.g. ``contact_points``, replaces it for this store)."""
        return CassandraObjectStore(**{**self.connection_kwargs(), **store_kwargs})

    def purge_run(self, run_id: str) -> None:
        """Delete every stored output of one run: the partitions its index lists, then the index."""
        self.get_store().purge_scope(f"run/{run_id}")
