"""``CassandraIOManager``: op outputs in Cassandra, run-scoped, chunked, with TTL."""
from __future__ import annotations

from typing import ClassVar, Optional

# The driver is imported with the package, not inside the first step that writes: Dagster's
# multiprocess executor preloads the code location in its forkserver, so every step process
# starts with the driver's ~250 ms of imports already done.
import cassandra.cluster  # noqa: F401
from pydantic import Field

from ..connection import ConnectionIOManager
from .resources import CassandraResource


class CassandraIOManager(ConnectionIOManager):
    """Stores each op output (or asset) in Cassandra.

    Every output's chunk groups are partitions of their own, so a run's outputs spread over the
    ring; a small per-run index lists them, so ``purge_run`` deletes exactly that run's
    partitions. Every row carries a TTL. Values are pickled (protocol 5), cut into chunks below
    Cassandra's mutation limit, written with a bounded window of requests, and committed by a
    manifest written last, so a reader never sees a partial output; a small output is one row
    (manifest and data), written in one round trip and read in one.

    The connection is a nested :class:`~asgard_dagster.CassandraResource` (``cassandra=``); the
    IO manager's own fields are how outputs are stored (TTL, codec, chunk size, signing key, ...).

    Example::

        from dagster import Definitions, EnvVar, job, op
        from asgard_dagster import CassandraIOManager, CassandraResource

        @op
        def make(): return list(range(10))

        @op
        def total(xs): return sum(xs)

        @job
        def pipeline(): total(make())

        defs = Definitions(jobs=[pipeline], resources={"io_manager": CassandraIOManager(
            cassandra=CassandraResource(
                contact_points=["cass1", "cass2"], replication_factor=2,
                username=EnvVar("CASSANDRA_USER"), password=EnvVar("CASSANDRA_PASSWORD"),
                ssl_ca_file="/etc/cassandra/ca.pem"),   # TLS to the cluster's CA
            ttl_seconds=24 * 3600, codec="lz4")})
        # the local node of `asgard cassandra up`: CassandraIOManager()

    Connection fields given flat (``CassandraIOManager(keyspace=...)``) raise
    :class:`~asgard_dagster.FlatConnectionFieldsError`, which names the nested form.
    """

    connection_field: ClassVar[str] = "cassandra"
    resource_class: ClassVar[type] = CassandraResource

    cassandra: Optional[CassandraResource] = Field(
        default=None,
        description="The cluster to store outputs in, as CassandraResource(...). None: the local node "
        "(127.0.0.1:9042, keyspace 'asgard').",
    )
