"""``CassandraResource``: a connection to the Cassandra cluster that holds op outputs."""
from __future__ import annotations

from typing import ClassVar, Optional

from dagster import ConfigurableResource
from pydantic import Field

from asgard.resources.stores.cql import CassandraObjectStore
from asgard.resources.stores.settings import CASSANDRA

from ..io_manager import resolved
from ..settings import described


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

    backend: ClassVar[str] = "cassandra"

    contact_points: list[str] = described(CASSANDRA["contact_points"])
    port: int = described(CASSANDRA["port"])
    keyspace: str = described(CASSANDRA["keyspace"])
    table: str = described(CASSANDRA["table"])
    replication_factor: int = described(CASSANDRA["replication_factor"])
    consistency: str = described(CASSANDRA["consistency"])
    username: Optional[str] = described(CASSANDRA["username"])
    password: Optional[str] = described(CASSANDRA["password"])
    ssl_ca_file: Optional[str] = described(CASSANDRA["ssl_ca_file"])
    ssl_certfile: Optional[str] = described(CASSANDRA["ssl_certfile"])
    ssl_keyfile: Optional[str] = described(CASSANDRA["ssl_keyfile"])
    ssl_verify_hostname: bool = described(CASSANDRA["ssl_verify_hostname"])
    connect_timeout: float = described(CASSANDRA["connect_timeout"])
    durable_writes: bool = described(CASSANDRA["durable_writes"])
    request_timeout: float = described(CASSANDRA["request_timeout"])
    ride_through_seconds: float = described(CASSANDRA["ride_through_seconds"])
    chunk_reads: str = described(CASSANDRA["chunk_reads"])

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
        # outside a run (the purge sensor, the CLI) an EnvVar field is still the variable's name
        return {name: resolved(getattr(self, name)) for name in CASSANDRA.names()}

    def get_store(self, **store_kwargs) -> CassandraObjectStore:
        """A :class:`CassandraObjectStore` on this connection (``ttl_seconds``, ``codec``, ... as keywords;
        a keyword that names a connection field, e.g. ``contact_points``, replaces it for this store)."""
        return CassandraObjectStore(**{**self.connection_kwargs(), **store_kwargs})

    def purge_run(self, run_id: str) -> None:
        """Delete every stored output of one run: the partitions its index lists, then the index."""
        self.get_store().purge_scope(f"run/{run_id}")
