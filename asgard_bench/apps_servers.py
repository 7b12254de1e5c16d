"""The servers ``asgard bench apps`` stores into, and the local Cassandra node put on its default
or its tuned configuration between the bench's phases (:class:`CassandraConfigurator`).
"""
from __future__ import annotations

import time
from typing import Any

from asgard.tuner.knobs import cql_literal

from .apps_config import PIPELINE_BACKEND, CassandraConfigFile


def server_for(backend: str, network: str = "loopback"):
    """The managed server process a backend stores into under ``network`` (None for local files;
    on the emulated hosts, None for the ring of three members)."""
    from asgard.pipelines.hosts import HOSTS_NETWORK
    from asgard.resources.network import Deployment

    if network == HOSTS_NETWORK:
        from asgard.resources.workers.deployment import EmulatedDeployment

        kind = PIPELINE_BACKEND.get(backend, backend)
        return EmulatedDeployment().object_store() if kind in ("s3", "s3_stock") else None

    return Deployment(network).server(PIPELINE_BACKEND.get(backend, backend))


class CassandraConfigurator:
    """Puts the local node (127.0.0.1:9042) on its default or the tuned configuration."""

    KEYSPACE, TABLE = "asgard", "objects"

    def __init__(self, node=None, tuned: CassandraConfigFile | None = None, fresh: bool = False):
        from asgard.resources.cassandra import CassandraNode

        self.node = node or CassandraNode()
        self.tuned = tuned
        self.fresh = fresh
        self.current: str | None = None
        self.initial_overrides = self.node.overrides()
        self.original_table: list[str] | None = None
        self.original_keyspace: dict[str, Any] = {}
        self.restarts: list[dict] = []

    def _session_execute(self, cql: str, params: tuple = ()):
        cluster = self.node.cql_cluster(timeout=15)  # a secure node: TLS and its superuser
        try:
            return list(cluster.connect().execute(cql, params, timeout=60))
        finally:
            cluster.shutdown()

    def _table_options(self) -> list[str] | None:
        """The table's current compaction, compression and memtable, as clauses that restore them."""
        rows = self._session_execute(
            "SELECT compaction, compression, memtable FROM system_schema.tables "
            "WHERE keyspace_name=%s AND table_name=%s",
            (self.KEYSPACE, self.TABLE))
        if not rows:
            return None
        # memtable too, so a tuned one (the tuner's `memtable` knob) is reverted; Cassandra shows
        # a table on the yaml's "default" configuration as null
        return [f"compaction = {cql_literal(dict(rows[0].compaction))}",
                f"compression = {cql_literal(dict(rows[0].compression))}",
                f"memtable = {cql_literal(rows[0].memtable or 'default')}"]

    def _alter(self, clauses: list[str]) -> None:
        if clauses:
            self._session_execute(f"ALTER TABLE {self.KEYSPACE}.{self.TABLE} WITH " + " AND ".join(clauses))

    def keyspace_options(self) -> dict[str, Any]:
        rows = self._session_execute("SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name=%s",
                                     (self.KEYSPACE,))
        return {"durable_writes": rows[0].durable_writes} if rows else {}

    def _alter_keyspace(self, options: dict[str, Any]) -> None:
        if options:
            self._session_execute(f"ALTER KEYSPACE {self.KEYSPACE} WITH " + " AND ".join(
                f"{k} = {cql_literal(v)}" for k, v in options.items()))

    def _restart(self, overrides: dict, label: str) -> None:
        seconds = self.node.restart_with(overrides, replace=True)
        self.restarts.append({"to": label, "seconds": round(seconds, 1)})
        self._wait_cql()

    def _wait_cql(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._session_execute("SELECT release_version FROM system.local")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def use(self, phase: str) -> None:
        """Switch to ``"default"`` or ``"tuned"`` (restarting only when needed)."""
        if phase == self.current:
            return
        self.node.start()
        if phase == "tuned":
            assert self.tuned is not None
            if self.original_table is None:
                self.original_table = self._table_options()
                self.original_keyspace = self.keyspace_options()
            if self.node.overrides() != self.tuned.yaml:
                self._restart(self.tuned.yaml, "tuned")
            self._alter(self.tuned.table)
            self._alter_keyspace(self.tuned.keyspace)
        else:
            if self.node.overrides() or (self.fresh and self.current is None):
                self._restart({}, "default")
            if self.original_table:
                self._alter(self.original_table)
            self._alter_keyspace(self.original_keyspace)
        self.current = phase

    def io_manager_config(self, phase: str) -> dict[str, Any] | None:
        """The IO manager's run config in ``phase``: the tuned client options, or none (its defaults)."""
        return dict(self.tuned.io_manager) if phase == "tuned" and self.tuned and self.tuned.io_manager else None

    def restore_default(self) -> None:
        if self.current not in (None, "default"):
            self.use("default")
