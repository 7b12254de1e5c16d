"""What ``asgard bench apps`` runs: its apps and backends, the tuned Cassandra configuration file
(``--cassandra-config``), the per-app sizes and the run order (:class:`BenchConfig`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from asgard.resources.stores.registry import ALL_BACKENDS, STOCK_PEERS
from asgard.tuner.knobs import cql_literal

#: the pipeline backend (asgard.pipelines.backends) each bench-only variant runs on
PIPELINE_BACKEND = {"cassandra_tuned": "cassandra"}
#: every backend of the one table (asgard.resources.stores.registry), each variant after its backend
BENCH_BACKENDS = tuple(name for b in ALL_BACKENDS
                       for name in (b, *(v for v, of in PIPELINE_BACKEND.items() if of == b)))
DEFAULT_BACKENDS = tuple(b for b in BENCH_BACKENDS if b != "fs_stock")
DEFAULT_APPS = ("video_analytics", "lightgbm_forest", "word_count")
STOCK_BACKENDS = frozenset(STOCK_PEERS)


@dataclass
class CassandraConfigFile:
    """A tuned Cassandra configuration: ``yaml`` overrides, ``table`` CQL option clauses,
    ``keyspace`` options and the IO manager's client options (``io_manager``)."""

    path: str
    yaml: dict[str, Any]
    table: list[str]  # "compaction = {...}" clauses for ALTER TABLE ... WITH <a> AND <b>
    keyspace: dict[str, Any] = field(default_factory=dict)  # {"durable_writes": bool}
    io_manager: dict[str, Any] = field(default_factory=dict)  # CassandraIOManager fields: the run's config

    @classmethod
    def load(cls, path: str | Path) -> "CassandraConfigFile":
        raw = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a mapping with 'yaml:' (and optionally 'table:')")
        overrides = raw.get("yaml", raw.get("yaml_overrides"))
        if overrides is None:
            raise ValueError(f"{path}: no 'yaml:' mapping of cassandra.yaml overrides")
        if not isinstance(overrides, dict):
            raise ValueError(f"{path}: 'yaml:' must be a mapping, got {type(overrides).__name__}")
        client = dict(raw.get("io_manager") or {})
        keyspace = dict(raw.get("keyspace") or {})
        # recommend's io_manager section repeats the keyspace's durable_writes in the IO manager's
        # nested connection (cassandra: {durable_writes: ...}, for a keyspace it creates; flat in
        # files written before the connection was nested); the keyspace here exists already, so
        # it is ALTERed. Other connection settings come from the bench's deployment.
        connection = client.pop("cassandra", None) or {}
        if not isinstance(connection, dict) or set(connection) - {"durable_writes"}:
            raise ValueError(f"{path}: 'io_manager: cassandra:' takes durable_writes only (connection settings "
                             f"come from the bench's deployment), got {connection}")
        for source in (connection, client):
            if "durable_writes" in source:
                keyspace.setdefault("durable_writes", source.pop("durable_writes"))
        if set(keyspace) - {"durable_writes"} or not isinstance(keyspace.get("durable_writes", True), bool):
            raise ValueError(f"{path}: 'keyspace:' takes durable_writes (true or false) only, got {keyspace}")
        own = client_fields()
        unknown = sorted(set(client) - set(own))
        if unknown:
            raise ValueError(f"{path}: 'io_manager:' options {unknown} are not the Cassandra IO manager's client "
                             f"options; use {sorted(own)} (connection settings come from the bench's deployment)")
        return cls(str(path), {k: v for k, v in overrides.items() if v is not None},
                   table_clauses(raw.get("table", raw.get("table_options"))), keyspace, client)

    def describe(self) -> dict[str, Any]:
        return {"yaml": self.yaml, "table": self.table, "keyspace": self.keyspace, "io_manager": self.io_manager}


def client_fields() -> list[str]:
    """CassandraIOManager's own fields (how outputs are chunked, sent, coded and kept), not its
    connection (the nested CassandraResource)."""
    from asgard_dagster import CassandraIOManager

    return [f for f in CassandraIOManager.model_fields if f != CassandraIOManager.connection_field]


def table_clauses(table: Any) -> list[str]:
    """``table:`` as a string ("compaction = {...} AND ..."), a list of clauses, or a mapping."""
    if not table:
        return []
    if isinstance(table, str):
        text = table.strip()
        if text.upper().startswith("ALTER TABLE"):
            text = text.split(" WITH ", 1)[1] if " WITH " in text else text
        return [text]
    if isinstance(table, list):
        return [str(t) for t in table]
    if isinstance(table, dict):
        return [f"{k} = {cql_literal(v)}" for k, v in table.items()]
    raise ValueError(f"table options must be a string, list or mapping, got {type(table).__name__}")


def parse_per_app(value: str | None, cast: Callable[[str], Any]) -> dict[str, Any] | Any | None:
    """``"4"`` -> 4 for every app; ``"video_analytics=4,lightgbm_forest=3"`` -> per app."""
    if value is None or str(value).strip() == "":
        return None
    text = str(value)
    if "=" not in text:
        return cast(text)
    out = {}
    for part in text.split(","):
        app, v = part.split("=", 1)
        out[app.strip()] = cast(v.strip())
    return out


def app_sizes(app: str, fanout: Any = None, scale: Any = None, small: bool = False) -> dict[str, Any]:
    """The run-config sizes of ``app`` (``{}`` = the app's defaults)."""
    from asgard.pipelines.jobs import SMALL

    sizes: dict[str, Any] = dict(SMALL[app]) if small else {}
    f = fanout.get(app) if isinstance(fanout, dict) else fanout
    s = scale.get(app) if isinstance(scale, dict) else scale
    if f is not None:
        sizes["fanout"] = int(f)
    if s is not None:
        sizes["scale"] = int(s) if app == "lightgbm_forest" else float(s)
    return sizes


@dataclass
class BenchConfig:
    apps: list[str] = field(default_factory=lambda: list(DEFAULT_APPS))
    backends: list[str] = field(default_factory=lambda: list(DEFAULT_BACKENDS))
    repetitions: int = 3
    fanout: Any = None            # int for all apps, or {app: int}
    scale: Any = None             # float for all apps, or {app: float}
    small: bool = False           # start from asgard.pipelines.jobs.SMALL sizes
    cassandra_config: str | None = None
    prices: str | None = None
    out: str | None = None
    fresh_cassandra: bool = False  # restart Cassandra on its default config even if it already is
    max_concurrent: int = 2
    warmup: bool = True            # one untimed run first (starts the executor's forkserver, imports)
    network: str = "loopback"      # the profile of asgard.resources.network the stores are reached over

    def effective_backends(self) -> list[str]:
        out = []
        for b in self.backends:
            if b not in BENCH_BACKENDS:
                raise ValueError(f"unknown backend {b!r}; known: {', '.join(BENCH_BACKENDS)}")
            if b == "cassandra_tuned" and not self.cassandra_config:
                continue  # no tuned configuration given
            out.append(b)
        return out

    def plan(self) -> list[tuple[int, str, str, str]]:
        """(repetition, phase, app, backend) in run order; phase "default" or "tuned"."""
        from asgard.pipelines.jobs import APPS

        for app in self.apps:
            if app not in APPS:
                raise ValueError(f"unknown app {app!r}; known: {', '.join(APPS)}")
        backends = self.effective_backends()
        plain = [b for b in backends if b != "cassandra_tuned"]
        order = []
        for rep in range(self.repetitions):
            k = rep % len(plain) if plain else 0
            rotated = plain[k:] + plain[:k]  # each backend leads a repetition in turn
            for app in self.apps:
                order += [(rep, "default", app, b) for b in rotated]
            if "cassandra_tuned" in backends:
                order += [(rep, "tuned", app, "cassandra_tuned") for app in self.apps]
        return order
