"""``CassandraIOManager``: op outputs in Cassandra, run-scoped, chunked, with TTL."""
from __future__ import annotations

from typing import Optional

# The driver is imported with the package, not inside the first step that writes: Dagster's
# multiprocess executor preloads the code location in its forkserver, so every step process
# starts with the driver's ~250 ms of imports already done.
import cassandra.cluster  # noqa: F401
from pydantic import Field

from resources.stores.cassandra import CassandraObjectStore

from ..io_manager import StoreIOManager, resolved
from .resources import TLS_FIELDS


class CassandraIOManager(StoreIOManager):
    """Stores each op output (or asset) in Cassandra.

    Every output's chunk groups are partitions of their own, so a run's outputs spread over the
    ring; a small per-run index lists them, so ``purge_run`` deletes exactly that run's
    partitions. Every row carries a TTL. Values are pickled (protocol 5), cut into chunks below
    Cassandra's mutation limit, written with a bounded window of requests, and committed by a
    manifest written last, so a reader never sees a partial output; a small output is one row
    (manifest and data), written in one round trip and read in one.

    Example::

        from dagster import Definitions, EnvVar, job, op
        from asgard_dagster import CassandraIOManager

        @op
        def make(): return list(range(10))

        @op
        def total(xs): return sum(xs)

        @job
        def pipeline(): total(make())

        defs = Definitions(jobs=[pipeline], resources={"io_manager": CassandraIOManager()})
        # a remote cluster: CassandraIOManager(contact_points=["cass1", "cass2"], replication_factor=2,
        #                                      username=EnvVar("CASSANDRA_USER"), password=EnvVar("CASSANDRA_PASSWORD"),
        #                                      ssl_ca_file="/etc/cassandra/ca.pem")   # TLS to the cluster's CA
    """

    contact_points: list[str] = Field(default=["127.0.0.1"], description="Cassandra hosts to contact first (the local node by default).")
    port: int = Field(default=9042, description="CQL native transport port.")
    keyspace: str = Field(default="asgard", description="Keyspace of the objects table (created if missing).")
    table: str = Field(default="objects", description="Table holding manifests and chunks (created if missing).")
    replication_factor: int = Field(default=1, description="SimpleStrategy replication factor used when creating the keyspace.")
    consistency: str = Field(default="LOCAL_QUORUM", description="Consistency level of reads and writes.")
    username: Optional[str] = Field(default=None, description="User for PasswordAuthenticator; pass EnvVar('...').")
    password: Optional[str] = Field(default=None, description="Password for PasswordAuthenticator; pass EnvVar('...').")
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
    request_timeout: float = Field(default=30.0, description="Seconds per chunk request.")
    ride_through_seconds: float = Field(
        default=30.0,
        description="Seconds a request keeps retrying while a node restarts (a retune's restart took 9-16 s here), "
        "before failing with 'unreachable'. 0 fails at once.",
    )

    def connection(self):
        """A :class:`~asgard_dagster.CassandraResource` with this IO manager's connection fields
        (credentials and TLS included): what the retune job connects with."""
        from .resources import CassandraResource

        # attributes, not the config dictionary: an EnvVar stays an EnvVar (read where it runs)
        return CassandraResource(**{k: getattr(self, k) for k in CassandraResource.model_fields
                                    if k in type(self).model_fields})

    def open_store(self, **store_kwargs) -> CassandraObjectStore:
        kwargs = dict(
            contact_points=list(self.contact_points), port=self.port, keyspace=self.keyspace, table=self.table,
            replication_factor=self.replication_factor, consistency=self.consistency, username=self.username,
            password=self.password, ssl_ca_file=self.ssl_ca_file, ssl_certfile=self.ssl_certfile,
            ssl_keyfile=self.ssl_keyfile, ssl_verify_hostname=self.ssl_verify_hostname,
            connect_timeout=self.connect_timeout, request_timeout=self.request_timeout,
            durable_writes=self.durable_writes, ride_through_seconds=self.ride_through_seconds,
        )
        return CassandraObjectStore(**{k: resolved(v) for k, v in kwargs.items()}, **store_kwargs)
