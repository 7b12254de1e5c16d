"""Applying a :class:`~.knobs.Configuration` to a node (or a ring) and its store: live knobs by
nodetool, table and keyspace knobs by CQL, restart-only ones by a restart, client knobs on the
store; what changed and how long it took (:class:`ApplyResult`). Split from :mod:`.knobs`, which
defines the knobs and re-exports these names."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from .knobs import KNOBS, LIVE, RESTART, Configuration
from .schema_alter import SCHEMA_KNOBS, alter_schema


# --- applying a configuration to a node ------------------------------------------------------
@dataclass
class ApplyResult:
    restarted: bool = False
    restart_seconds: float = 0.0  # stop to the store answering again (what clients see)
    node_restart_seconds: float = 0.0  # stop to CQL port ready
    live: list[str] = field(default_factory=list)
    table: list[str] = field(default_factory=list)
    client: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    changed: dict[str, tuple] = field(default_factory=dict)
    #: on a ring: "rolling" (one member at a time) or "together"; one record per member restarted,
    #: in order (CassandraCluster.rolling_restart's)
    restart_mode: str = ""
    members: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"restarted": self.restarted, "restart_seconds": round(self.restart_seconds, 3),
                "node_restart_seconds": round(self.node_restart_seconds, 3),
                "restart_mode": self.restart_mode, "members": self.members,
                "live": self.live, "table": self.table, "client": self.client,
                "seconds": round(self.seconds, 3),
                "changed": {k: list(v) for k, v in self.changed.items()}}


def _store_session(store: Any):
    return getattr(store, "session", None) or getattr(store, "_session", None)


@contextmanager
def schema_session(node: Any, store: Any) -> Iterator[Any]:
    """A driver session for schema work: the store's own, else one to ``node`` for the block."""
    session = _store_session(store)
    if session is not None:
        yield session
        return
    if hasattr(node, "cql_cluster"):  # a CassandraNode: over TLS with its superuser if it is secure
        cluster = node.cql_cluster()
    else:
        from asgard.resources.stores.cql import build_cluster

        cluster = build_cluster([node.address], node.native_port, connect_timeout=10, admin=True)
    try:
        yield cluster.connect()
    finally:
        cluster.shutdown()


def store_keyspace_table(store: Any) -> tuple[str, str]:
    return getattr(store, "keyspace", "asgard"), getattr(store, "table", "objects")


def wait_store_ready(store: Any, timeout: float = 60.0) -> None:
    """After a restart the driver reconnects on its own schedule: poll until a read works, and
    the store's ``ping`` (its driver session: the schema changes after a restart go there; a
    get may come back sooner, on a connection of the store's own)."""
    from asgard.resources.stores.base import ObjectKey

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            ping = getattr(store, "ping", None)
            if ping is not None:
                ping()
            store.exists(ObjectKey("tuner/ping", "ping"))
            return
        except Exception as exc:  # NoHostAvailable while reconnecting
            last = exc
            time.sleep(0.25)
    raise TimeoutError(f"store not usable {timeout}s after restart: {last}")


def apply(node: Any, store: Any, config: Configuration, previous: Configuration | None = None,
          force_restart: bool = False, rolling: bool = True, hints_timeout: float = 120.0) -> ApplyResult:
    """Bring ``node`` (a running :class:`CassandraNode`, or a ring: a
    :class:`~asgard.resources.cassandra.cluster.CassandraCluster` of running members) and ``store``'s
    table to ``config``.

    Live knobs go through nodetool (on a ring, to every member at once), table and keyspace knobs
    through ALTER TABLE / ALTER KEYSPACE (once: the schema is the ring's) naming only the options
    whose changed knob differs from the schema read back, each map merged onto the one in force
    (:mod:`.schema_alter`: an operator's other settings survive), and the node restarts
    only if a restart-only knob differs from ``previous`` (``None`` = unknown: everything is
    applied, restarting only if the node's persisted overrides differ). A ring restarts one
    member at a time with ``rolling`` (``CassandraCluster.rolling_restart``: drain, restart, wait
    until everyone sees it UN and until its hints are delivered), else all members together.
    Every yaml-backed knob is also persisted as an override, so a restart keeps live values.
    """
    t0 = time.perf_counter()
    result = ApplyResult()
    overrides = config.yaml_overrides()
    # a CassandraCluster's members (a CassandraNode's ``nodes`` is the size of its ring, an int)
    members = getattr(node, "nodes", None)
    ring = members if isinstance(members, list) else None
    if previous is None:
        current = (ring[0] if ring else node).overrides()
        restart_keys = {KNOBS[n].yaml_key for n in KNOBS if KNOBS[n].apply == RESTART} | {"file_cache_enabled",
                                                                                  "commitlog_sync_group_window"}
        need_restart = any(current.get(k) != overrides.get(k) for k in restart_keys)
        changed = {k: (None, v) for k, v in config.values}
    else:
        changed = config.diff(previous)
        need_restart = any(KNOBS[k].apply == RESTART for k in changed)
    result.changed = changed
    if ring is not None and (need_restart or force_restart):
        result.restart_mode = "rolling" if rolling and len(ring) > 1 else "together"
        if result.restart_mode == "rolling":
            result.members = node.rolling_restart(overrides, hints_timeout=hints_timeout)
        else:
            result.members = node.restart_together(overrides)
        result.node_restart_seconds = max(r["restart_seconds"] for r in result.members)
        result.restarted = True
        wait_store_ready(store)
        result.restart_seconds = time.perf_counter() - t0
    elif ring is None and (need_restart or force_restart or not node.is_running()):
        # the store's session reconnects by itself (its back-off starts at 0.2 s): it is kept,
        # as a long-lived process (the bench, a sensor) keeps it across a retune
        if node.is_running():
            result.node_restart_seconds = node.restart_with(overrides)
        else:
            node.set_overrides(overrides)
            result.node_restart_seconds = node.start()
        result.restarted = True
        wait_store_ready(store)
        result.restart_seconds = time.perf_counter() - t0
    else:
        node.set_overrides(overrides)
        commands = config.live_commands()
        nodetool = node.nodetool_all if ring is not None else node.nodetool  # on a ring: every member
        for name in (k for k in changed if KNOBS[k].apply == LIVE):
            nodetool(*commands[name])
            result.live.append(" ".join(commands[name]))
    ks, table = store_keyspace_table(store)
    if previous is None or any(k in SCHEMA_KNOBS for k in changed):
        ensure = getattr(store, "ensure_schema", None)
        if ensure is not None:  # a store that has not written yet: nothing to ALTER otherwise
            ensure()
        from asgard.resources.stores.cql.retry import execute_when_writable

        with schema_session(node, store) as session:
            # only what differs from the schema read back now (once: the schema is the ring's)
            result.table = alter_schema(lambda cql, params: execute_when_writable(session, cql, params), ks, table,
                                        config, None if previous is None else set(changed))
    if hasattr(store, "set_client_options"):
        store.set_client_options(**config.client_options())
        result.client = config.client_options()
    result.seconds = time.perf_counter() - t0
    return result
