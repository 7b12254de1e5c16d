"""``asgard bench apps``: the paper's applications on every store, priced as on AWS (Nov 2022).

Each pipeline of :mod:`asgard.pipelines.jobs` runs end to end (reconstructable job, multiprocess
executor) on each backend:

* ``cassandra`` -- our CassandraIOManager, the node on its default configuration (no overrides)
* ``cassandra_tuned`` -- the same node with a configuration file: ``yaml:`` overrides of
  cassandra.yaml (a restart, when they differ from the node's), optional ``table:`` and ``keyspace:``
  options (``ALTER TABLE asgard.objects`` / ``ALTER KEYSPACE asgard``) and ``io_manager:`` client
  options of the IO manager (chunk size, requests in flight, codec: the run's config). A file
  ``asgard tune recommend --out`` wrote is one: its pick is applied whole, server and client.
* ``redis``, ``s3`` (our S3IOManager on MinIO), ``s3_stock`` (dagster-aws S3PickleIOManager on
  MinIO), ``local`` (our LocalIOManager on files), ``fs_stock`` (Dagster's FilesystemIOManager)

Order: for each repetition, the cells on the node's default configuration (every app x every
non-tuned backend, backends rotated per repetition), then the node restarted with the tuned
configuration and the ``cassandra_tuned`` cells; the default configuration is restored at the
end. So machine drift hits all backends alike and Cassandra restarts twice per repetition.

Measured per run, from the run's event log:

* E2E latency: RUN_START .. RUN_SUCCESS timestamps (``wall_s``: the client's clock around
  ``execute_job``, which adds the executor's start-up);
* per step: billed seconds from the step process's first event (STEP_WORKER_STARTED or
  RESOURCE_INIT_STARTED: resources, such as an IO manager's client, are built there) to
  STEP_SUCCESS, as a function invocation is billed; compute = STEP_START .. STEP_SUCCESS minus
  the step's write and read time;
* per edge (each stored output and each loaded input): bytes and seconds from the IO manager's
  metadata (``bytes``, ``write_seconds``/``read_seconds``, ``chunks``). The stock managers log
  none: their write time is HANDLED_OUTPUT minus the step's preceding STEP_OUTPUT event, their
  read time LOADED_INPUT minus the step's preceding event (``io_timing = "events"``), and their
  bytes are the stored objects' sizes looked up after the run (S3 HEAD / file size);
* the storage server's CPU seconds (``cpu_seconds()`` of the Cassandra/Redis/MinIO process
  before and after the run; other users of the same server are included, the machine is shared);
* cost and Perf/$ from :mod:`asgard_bench.cost` and ``prices.yaml``.
"""
from __future__ import annotations

import csv
import json
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from asgard.tuner.knobs import cql_literal

from .cost import Prices, perf_per_dollar, run_cost, s3_requests

BENCH_BACKENDS = ("cassandra", "cassandra_tuned", "redis", "s3", "s3_stock", "local", "fs_stock")
DEFAULT_BACKENDS = ("cassandra", "cassandra_tuned", "redis", "s3", "s3_stock", "local")
DEFAULT_APPS = ("video_analytics", "lightgbm_forest", "word_count")
#: the pipeline backend (asgard.pipelines.backends) each bench backend runs on
PIPELINE_BACKEND = {"cassandra_tuned": "cassandra"}
STOCK_BACKENDS = frozenset({"s3_stock", "fs_stock"})
#: the peers every Perf/$ is compared against in the table
PEERS = ("s3", "redis")

#: the paper's claims (seed 000, §4.1-4.3), each set beside the same ratio measured here:
#: (app, claim, metric, mine, peer, paper's ratio). ``perf``: Perf/$ of mine over peer's;
#: ``speed``: peer's E2E over mine (>1: mine is faster); ``what_if``: Perf/$ of Cassandra priced
#: on instance ``mine`` over instance ``peer``.
PAPER_CLAIMS = (
    ("video_analytics", "Cassandra (default) over S3, Perf/$: +189%", "perf", "cassandra", "s3", 2.89),
    ("video_analytics", "Cassandra (default) over Redis, Perf/$: +326%", "perf", "cassandra", "redis", 4.26),
    ("video_analytics", "Asgard Lite (tuned) over default Cassandra, Perf/$: +47%", "perf", "cassandra_tuned", "cassandra", 1.47),
    ("video_analytics", "tuned Cassandra faster than S3, E2E: 150%", "speed", "cassandra_tuned", "s3", 2.50),
    ("video_analytics", "tuned Cassandra faster than Redis, E2E: 106%", "speed", "cassandra_tuned", "redis", 2.06),
    ("video_analytics", "Redis faster than S3, E2E: 21%", "speed", "redis", "s3", 1.21),
    ("video_analytics", "what-if: c5.large over i3.large, Perf/$: +29%", "what_if", "c5.large", "i3.large", 1.29),
    ("video_analytics", "what-if: c5.large over m5.large, Perf/$: +75%", "what_if", "c5.large", "m5.large", 1.75),
    ("lightgbm_forest", "Redis over tuned Cassandra, Perf/$: +16% (Redis best)", "perf", "redis", "cassandra_tuned", 1.16),
    ("lightgbm_forest", "Cassandra (default) over S3, Perf/$: about +32%", "perf", "cassandra", "s3", 1.32),
    ("lightgbm_forest", "tuned Cassandra over S3, Perf/$: about +32%", "perf", "cassandra_tuned", "s3", 1.32),
    ("lightgbm_forest", "what-if: m5.large over i3.large, Perf/$: +8.9%", "what_if", "m5.large", "i3.large", 1.089),
    ("lightgbm_forest", "what-if: m5.large over c5.large, Perf/$: +8.1%", "what_if", "m5.large", "c5.large", 1.081),
)
#: backends that cannot pass data between two Lambda functions (a function's disk is its own);
#: they are measured as a floor, not as a deployable peer
NOT_DEPLOYABLE = frozenset({"local", "fs_stock"})


def paper_comparison(cells: list[dict]) -> list[dict]:
    """Each of :data:`PAPER_CLAIMS` with the ratio measured in this bench (None where a backend
    was not run)."""
    by = {(c["app"], c["backend"]): c for c in cells}
    rows = []
    for app, claim, metric, mine, peer, paper in PAPER_CLAIMS:
        ours = None
        if metric == "what_if":
            c = by.get((app, "cassandra"))
            w = c.get("what_if", {}) if c else {}
            a, b = (w.get(mine) or {}).get("median"), (w.get(peer) or {}).get("median")
            ours = a / b if a and b else None
        else:
            m, p = by.get((app, mine)), by.get((app, peer))
            if m and p:
                key = "perf_per_usd" if metric == "perf" else "e2e_s"
                a, b = m[key]["median"], p[key]["median"]
                if a and b:
                    ours = a / b if metric == "perf" else b / a
        rows.append({"app": app, "claim": claim, "metric": metric, "paper": paper, "ours": ours})
    return rows


# --- configuration ---------------------------------------------------------------------------
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
        # recommend's io_manager section repeats the keyspace's durable_writes (the IO manager's
        # field for a keyspace it creates); the keyspace here exists already, so it is ALTERed
        if "durable_writes" in client:
            keyspace.setdefault("durable_writes", client.pop("durable_writes"))
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
    """CassandraIOManager's own fields (how outputs are chunked, sent, coded and kept), not the
    connection's (those are the nested CassandraResource's)."""
    from asgard_dagster import CassandraIOManager, CassandraResource

    return [f for f in CassandraIOManager.model_fields if f not in CassandraResource.model_fields and f != "cassandra"]


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


# --- servers -------------------------------------------------------------------------------------
def server_for(backend: str, network: str = "loopback"):
    """The managed server process a backend stores into under ``network`` (None for local files)."""
    from asgard.resources.network import Deployment

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


# --- one run -------------------------------------------------------------------------------------
def _md(metadata: dict, key: str) -> Any:
    v = metadata.get(key)
    return getattr(v, "value", v) if v is not None else None


def _stored_size(uri: str | None, path: str | None, backend: str, endpoint: str | None = None) -> int | None:
    """Size of a stock manager's stored object (after the run, outside the timed window)."""
    try:
        if backend == "fs_stock" and path:
            return Path(path).stat().st_size
        if backend == "s3_stock" and uri and uri.startswith("s3://"):
            from asgard.resources.stores.s3 import LOCAL_ENDPOINT, resolve_credentials, s3_client

            endpoint = endpoint or LOCAL_ENDPOINT
            bucket, key = uri[5:].split("/", 1)
            access, secret = resolve_credentials(endpoint, None, None)
            client = s3_client(endpoint, "us-east-1", access, secret, None, 10, 10, 60)
            return int(client.head_object(Bucket=bucket, Key=key)["ContentLength"])
    except Exception:
        return None
    return None


def step_parallelism(spans: list[tuple[float, float]]) -> tuple[float, int]:
    """``(mean, max)`` steps running at once over the steps' ``(start, end)`` spans: mean is the
    steps' summed time over the span from the first start to the last end."""
    spans = [(a, b) for a, b in spans if b is not None and b >= a]
    if not spans:
        return 0.0, 0
    total = sum(b - a for a, b in spans)
    width = max(b for _, b in spans) - min(a for a, _ in spans)
    running = peak = 0
    for _, delta in sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1])):
        running += delta
        peak = max(peak, running)
    return (total / width if width > 0 else float(len(spans))), peak


def measure_run(instance, run_id: str, backend: str, s3_endpoint: str | None = None) -> dict[str, Any]:
    """Latency, steps and edges of one finished run from its event log."""
    import dagster as dg

    T = dg.DagsterEventType
    run_start = run_end = None
    status = "unknown"
    steps: dict[str, dict] = {}
    writes: list[dict] = []
    reads: list[dict] = []
    last_event_ts: dict[str, float] = {}
    last_output_ts: dict[str, float] = {}
    invoked: dict[str, float] = {}
    for rec in instance.all_logs(run_id):
        ev = rec.dagster_event
        if ev is None:
            continue
        et, ts, step = ev.event_type, rec.timestamp, rec.step_key
        if et == T.RUN_START:
            run_start = ts
        elif et in (T.RUN_SUCCESS, T.RUN_FAILURE):
            run_end, status = ts, ("success" if et == T.RUN_SUCCESS else "failure")
        elif et in (T.STEP_WORKER_STARTED, T.RESOURCE_INIT_STARTED) and step:
            # the step's process starts and builds its resources (an IO manager's client) before
            # STEP_START; a function invocation is billed for that too
            invoked[step] = min(invoked.get(step, ts), ts)
        elif et == T.STEP_START:
            steps[step] = {"step": step, "start": ts, "end": None}
        elif et in (T.STEP_SUCCESS, T.STEP_FAILURE) and step in steps:
            steps[step]["end"] = ts
        elif et == T.STEP_OUTPUT:
            last_output_ts[step] = ts
        elif et == T.HANDLED_OUTPUT:
            d = ev.event_specific_data
            md = d.metadata or {}
            secs = _md(md, "write_seconds")
            timing = "metadata"
            if secs is None:
                secs, timing = ts - last_output_ts.get(step, last_event_ts.get(step, ts)), "events"
            uri = _md(md, "dagster/uri") or _md(md, "uri")
            writes.append({"step": step, "output": d.output_name, "bytes": _md(md, "bytes"),
                           "chunks": _md(md, "chunks"), "seconds": float(secs), "timing": timing,
                           "uri": uri, "path": _md(md, "path")})
        elif et == T.LOADED_INPUT:
            d = ev.event_specific_data
            md = d.metadata or {}
            secs = _md(md, "read_seconds")
            timing = "metadata"
            if secs is None:
                secs, timing = ts - last_event_ts.get(step, ts), "events"
            reads.append({"step": step, "input": d.input_name, "upstream_step": d.upstream_step_key,
                          "upstream_output": d.upstream_output_name, "bytes": _md(md, "bytes"),
                          "seconds": float(secs), "timing": timing})
        if step:
            last_event_ts[step] = ts

    if backend in STOCK_BACKENDS:
        for w in writes:
            if w["bytes"] is None or backend in STOCK_BACKENDS:
                w["bytes"] = _stored_size(w["uri"], w["path"], backend, s3_endpoint)
    # each read's chunks and (for stock) bytes: from the output it loads
    by_output: dict[tuple, list[dict]] = {}
    for w in writes:
        by_output.setdefault((w["step"], w["output"]), []).append(w)
    for r in reads:
        cands = by_output.get((r["upstream_step"], r["upstream_output"]), [])
        src = None
        if len(cands) == 1:
            src = cands[0]
        elif cands and "[" in r["step"]:
            mk = r["step"].split("[", 1)[1].rstrip("]")
            src = next((c for c in cands if str(c.get("uri") or c.get("path") or "").rstrip("/").endswith(mk)), None)
        if src is not None:
            r["chunks"] = src.get("chunks")
            if r["bytes"] is None:
                r["bytes"] = src.get("bytes")
        else:
            r["chunks"] = None

    io_by_step: dict[str, float] = {}
    for e in writes + reads:
        io_by_step[e["step"]] = io_by_step.get(e["step"], 0.0) + e["seconds"]
    step_rows = []
    for s in steps.values():
        dur = (s["end"] - s["start"]) if s["end"] else 0.0
        init = max(s["start"] - invoked.get(s["step"], s["start"]), 0.0)
        io = io_by_step.get(s["step"], 0.0)
        # seconds: what a function invocation bills (process start and resource init included)
        step_rows.append({"step": s["step"], "seconds": init + dur, "init_seconds": init, "io_seconds": io,
                          "compute_seconds": max(dur - io, 0.0)})
    e2e = (run_end - run_start) if (run_start and run_end) else float("nan")
    timing = sorted({e["timing"] for e in writes + reads}) or ["none"]
    # how parallel the steps really ran: from the step processes' first event to STEP_SUCCESS
    mean_par, max_par = step_parallelism([(invoked.get(s["step"], s["start"]), s["end"]) for s in steps.values()])
    return {"status": status, "e2e_s": e2e, "steps": step_rows, "writes": writes, "reads": reads,
            "io_timing": "+".join(timing), "parallel_mean": mean_par, "parallel_max": max_par}


def _sum(xs: Iterable[Any]) -> float:
    return float(sum(x for x in xs if x is not None))


def price_row(row: dict, prices: Prices, puts: int = 0, gets: int = 0) -> dict:
    """Add cost, Perf/$ and the instance what-if columns to a run row (``puts``/``gets``: the S3
    requests the run made, priced for backends whose storage is priced by request)."""
    b = row["backend"]
    kind, _ = prices.storage_kind(b)
    if kind != "s3_requests":
        puts = gets = 0
    c = run_cost(b, row["e2e_s"], row["step_s_total"], row["invocations"], puts, gets, prices)
    row.update(s3_puts=puts, s3_gets=gets, function_gb_s=c.function_gb_s, function_usd=c.function_usd,
               storage_usd=c.storage_usd, storage_basis=c.storage_basis, cost_usd=c.total,
               perf_per_usd=perf_per_dollar(row["e2e_s"], c.total))
    if PIPELINE_BACKEND.get(b, b) == "cassandra":
        for inst in prices.what_if_instances:
            wc = run_cost(b, row["e2e_s"], row["step_s_total"], row["invocations"], 0, 0, prices, instance=inst)
            row[f"cost_usd@{inst}"] = wc.total
            row[f"perf_per_usd@{inst}"] = perf_per_dollar(row["e2e_s"], wc.total)
    return row


def run_one(instance, rep: int, phase: str, app: str, backend: str, sizes: dict, prices: Prices,
            max_concurrent: int = 2, cassandra_overrides: dict | None = None,
            network: str = "loopback", io_manager_config: dict | None = None,
            cassandra_keyspace: dict | None = None) -> tuple[dict, list[dict], list[dict]]:
    """Run ``app`` on ``backend`` once, reached over ``network`` (``io_manager_config``: the IO
    manager's run config); (run row, step rows, edge rows)."""
    from asgard.pipelines.jobs import run_app
    from asgard.resources.network import Deployment

    pb = PIPELINE_BACKEND.get(backend, backend)
    server = server_for(backend, network)
    cpu0 = server.cpu_seconds() if server is not None else 0.0
    counts = getattr(server, "request_counts", None)  # S3: the server counts every request
    requests0 = counts() if counts else {}
    t0 = time.perf_counter()
    error = ""
    try:
        ar = run_app(app, pb, instance=instance, max_concurrent=max_concurrent, raise_on_error=False,
                     network=network, io_manager_config=io_manager_config, **sizes)
        run_id, ok = ar.run_id, ar.success
    except Exception as exc:  # a crash outside the run (e.g. the server is down): record it
        run_id, ok, error = "", False, f"{type(exc).__name__}: {exc}"
    wall = time.perf_counter() - t0
    cpu1 = server.cpu_seconds() if server is not None else 0.0
    puts, gets = s3_requests(requests0, counts()) if counts else (0, 0)
    s3_endpoint = Deployment(network).store_kwargs("s3").get("endpoint_url")
    m = measure_run(instance, run_id, pb, s3_endpoint) if run_id else {
        "status": "error", "e2e_s": float("nan"), "steps": [], "writes": [], "reads": [], "io_timing": "none",
        "parallel_mean": None, "parallel_max": None}
    if run_id and ok and pb in ("cassandra", "redis", "s3", "local"):
        try:  # ephemeral data: drop it (outside the timed window)
            from asgard.pipelines.backends import io_manager_for

            io_manager_for(pb, network).purge_run(run_id)
        except Exception:
            pass
    writes, reads, steps = m["writes"], m["reads"], m["steps"]
    row = {
        "rep": rep, "app": app, "backend": backend, "phase": phase,
        "fanout": sizes.get("fanout", ""), "scale": sizes.get("scale", ""),
        "run_id": run_id, "success": bool(ok and m["status"] == "success"), "error": error,
        "e2e_s": m["e2e_s"], "wall_s": wall,
        "invocations": len(steps),
        "step_s_total": _sum(s["seconds"] for s in steps),
        "compute_s_total": _sum(s["compute_seconds"] for s in steps),
        "write_s_total": _sum(w["seconds"] for w in writes),
        "read_s_total": _sum(r["seconds"] for r in reads),
        "n_writes": len(writes), "n_reads": len(reads),
        "bytes_written": int(_sum(w["bytes"] for w in writes)),
        "bytes_read": int(_sum(r["bytes"] for r in reads)),
        "io_timing": m["io_timing"],
        "network": network,
        "steps_parallel_mean": m["parallel_mean"], "steps_parallel_max": m["parallel_max"],
        "server_cpu_s": cpu1 - cpu0 if server is not None else 0.0,
        "cassandra_overrides": json.dumps(cassandra_overrides, sort_keys=True) if cassandra_overrides is not None else "",
        "io_manager_config": json.dumps(io_manager_config, sort_keys=True) if io_manager_config else "",
        "cassandra_keyspace": json.dumps(cassandra_keyspace, sort_keys=True) if cassandra_keyspace else "",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - wall)),
    }
    price_row(row, prices, puts, gets)
    base = {"rep": rep, "app": app, "backend": backend, "run_id": run_id}
    step_rows = [{**base, **s} for s in steps]
    edge_rows = ([{**base, "kind": "write", "step": w["step"], "name": w["output"], "upstream": "",
                   "bytes": w["bytes"], "chunks": w["chunks"], "seconds": w["seconds"], "timing": w["timing"]}
                  for w in writes]
                 + [{**base, "kind": "read", "step": r["step"], "name": r["input"],
                     "upstream": f"{r['upstream_step']}.{r['upstream_output']}",
                     "bytes": r["bytes"], "chunks": r.get("chunks"), "seconds": r["seconds"], "timing": r["timing"]}
                    for r in reads])
    return row, step_rows, edge_rows


# --- the bench -------------------------------------------------------------------------------------
def default_out_dir() -> Path:
    return Path("reports/bench-apps") / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def run_bench(cfg: BenchConfig, on_start: Callable[[int, int, str], None] | None = None,
              on_run: Callable[[dict], None] | None = None) -> dict:
    """Run the whole bench; writes the CSVs, markdown and PNGs into ``cfg.out``; returns the summary."""
    import dagster as dg

    prices = Prices.load(cfg.prices)
    plan = cfg.plan()
    out = Path(cfg.out) if cfg.out else default_out_dir()
    out.mkdir(parents=True, exist_ok=True)
    tuned = CassandraConfigFile.load(cfg.cassandra_config) if cfg.cassandra_config else None
    uses_cassandra = any(PIPELINE_BACKEND.get(b, b) == "cassandra" for _, _, _, b in plan)
    from asgard.resources.network import Deployment

    deployment = Deployment(cfg.network)
    pipeline_backends = {PIPELINE_BACKEND.get(b, b) for _, _, _, b in plan}
    if deployment.emulated:  # namespaces, links, servers and proxies of the profile
        deployment.up(tuple(b for b in pipeline_backends if deployment.server(b) is not None))
    else:
        for b in pipeline_backends:
            srv = server_for(b)
            if srv is not None:
                srv.start()
    configurator = CassandraConfigurator(node=deployment.server("cassandra"), tuned=tuned,
                                         fresh=cfg.fresh_cassandra) if uses_cassandra else None
    sizes = {app: app_sizes(app, cfg.fanout, cfg.scale, cfg.small) for app in cfg.apps}
    rows: list[dict] = []
    steps: list[dict] = []
    edges: list[dict] = []
    t_start = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="asgard-bench-apps-") as tmp:
            with dg.DagsterInstance.local_temp(tempdir=tmp) as instance:
                if cfg.warmup and plan:
                    from asgard.pipelines.jobs import run_app

                    if on_start:
                        on_start(0, len(plan), f"warm-up: {plan[0][2]} on local (not measured)")
                    run_app(plan[0][2], "local", instance=instance, max_concurrent=cfg.max_concurrent,
                            raise_on_error=False, **sizes[plan[0][2]])
                for i, (rep, phase, app, backend) in enumerate(plan):
                    if configurator is not None and PIPELINE_BACKEND.get(backend, backend) == "cassandra":
                        configurator.use(phase)
                    if on_start:
                        on_start(i, len(plan), f"rep {rep + 1}/{cfg.repetitions} {app} on {backend}")
                    on_cassandra = configurator is not None and PIPELINE_BACKEND.get(backend, backend) == "cassandra"
                    overrides = configurator.node.overrides() if on_cassandra else None
                    client = configurator.io_manager_config(phase) if on_cassandra else None
                    keyspace = configurator.keyspace_options() if on_cassandra else None  # in force, read back
                    row, srows, erows = run_one(instance, rep, phase, app, backend, sizes[app], prices,
                                                cfg.max_concurrent, overrides, cfg.network, client, keyspace)
                    rows.append(row)
                    steps += srows
                    edges += erows
                    if on_run:
                        on_run(row)
    finally:
        if configurator is not None:
            configurator.restore_default()
    meta = {
        "apps": cfg.apps, "backends": cfg.effective_backends(), "repetitions": cfg.repetitions,
        "network": {"profile": cfg.network, "description": deployment.profile.description,
                    "links": {b: link.describe() for b, link in deployment.profile.links.items()}},
        "max_concurrent": cfg.max_concurrent,
        "sizes": sizes, "cassandra_config": cfg.cassandra_config,
        "cassandra_tuned": tuned.describe() if tuned else None,
        "cassandra_restarts": configurator.restarts if configurator else [],
        "cassandra_overrides_before": configurator.initial_overrides if configurator else None,
        "prices": str(Path(cfg.prices) if cfg.prices else Path(__file__).with_name("prices.yaml")),
        "function_memory_mb": prices.memory_mb,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
        "seconds": round(time.time() - t_start, 1), "out": str(out),
    }
    summary = summarize(rows, prices, meta)
    write_outputs(out, rows, steps, edges, summary)
    return summary


# --- summary -------------------------------------------------------------------------------------
def _stats(xs: list[float]) -> dict:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not xs:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def summarize(rows: list[dict], prices: Prices, meta: dict | None = None) -> dict:
    cells: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        cells.setdefault((r["app"], r["backend"]), []).append(r)
    out_cells = []
    for (app, backend), rs in cells.items():
        ok = [r for r in rs if r["success"]]
        cell = {"app": app, "backend": backend, "runs": len(rs), "ok": len(ok)}
        for key in ("e2e_s", "wall_s", "cost_usd", "function_usd", "storage_usd", "perf_per_usd",
                    "compute_s_total", "write_s_total", "read_s_total", "step_s_total", "server_cpu_s",
                    "bytes_written", "bytes_read", "s3_puts", "s3_gets", "steps_parallel_mean", "steps_parallel_max"):
            cell[key] = _stats([r.get(key) for r in ok])
        if PIPELINE_BACKEND.get(backend, backend) == "cassandra":
            cell["what_if"] = {inst: _stats([r.get(f"perf_per_usd@{inst}") for r in ok])
                               for inst in prices.what_if_instances}
        cell["io_timing"] = sorted({r["io_timing"] for r in rs})
        out_cells.append(cell)
    by = {(c["app"], c["backend"]): c for c in out_cells}
    for c in out_cells:
        c["ratios"] = {}
        for peer in PEERS + ("cassandra",):
            p = by.get((c["app"], peer))
            mine, theirs = c["perf_per_usd"]["median"], p["perf_per_usd"]["median"] if p else None
            if mine and theirs:
                c["ratios"][f"perf_vs_{peer}"] = mine / theirs
            me2e, pe2e = c["e2e_s"]["median"], p["e2e_s"]["median"] if p else None
            if me2e and pe2e:
                c["ratios"][f"e2e_vs_{peer}"] = me2e / pe2e
        if "what_if" in c:
            base = c["what_if"].get("i3.large", {}).get("median")
            c["what_if_vs_i3"] = {k: (v["median"] / base if base and v["median"] else None)
                                  for k, v in c["what_if"].items()}
    return {"meta": meta or {}, "cells": out_cells, "paper": paper_comparison(out_cells), "failed_runs": [
        {k: r[k] for k in ("rep", "app", "backend", "run_id", "error")} for r in rows if not r["success"]]}


def _pct(ratio: float | None) -> str:
    return "" if ratio is None else f"{ratio:.2f}x ({(ratio - 1) * 100:+.0f}%)"


def _f(x: float | None, nd: int = 2, scale: float = 1.0) -> str:
    return "" if x is None else f"{x * scale:.{nd}f}"


def markdown(summary: dict) -> str:
    meta = summary["meta"]
    lines = ["# asgard bench apps", ""]
    if meta:
        lines += [f"Started {meta.get('started_at')}, {meta.get('seconds')} s; repetitions {meta.get('repetitions')}; "
                  f"sizes {json.dumps(meta.get('sizes'))}; function memory {meta.get('function_memory_mb')} MB; "
                  f"prices {meta.get('prices')} (AWS us-east-1, Nov 2022).", ""]
        lines += [f"Steps of a run in parallel: at most {meta.get('max_concurrent', 2)} (the multiprocess executor's "
                  "max_concurrent; the paper runs a stage's k = 6 functions at once: `--max-concurrent 6` starts a "
                  "stage's readers as that many processes even on 2 cores). The table's \"steps at once\" is measured "
                  "from the run's events: summed step time over the steps' span (mean), and the peak.", ""]
        net = meta.get("network") or {"profile": "loopback", "links": {}}
        lines += [f"Network profile **{net['profile']}**" + (f": {net.get('description', '')}" if net.get("links") else
                  ": every store on this machine's loopback.")]
        lines += [f"- {b}: {d}" for b, d in net.get("links", {}).items()] + [""]
        if meta.get("cassandra_tuned"):
            lines += [f"cassandra_tuned: `{meta.get('cassandra_config')}` = {json.dumps(meta['cassandra_tuned'])}", ""]
    lines += ["Medians over successful runs, [min, max] in brackets. Perf/$ = 1 / (E2E s x cost $). "
              "Cost = Lambda GB-s + requests + storage service (Cassandra on i3.large, Redis on cache.r5.large, "
              "both x E2E time; S3 by PUT/GET requests; local files: no service, the function's disk).", ""]
    lines += ["| app | backend | ok/runs | E2E s | cost µ$ | Perf/$ (1/s$) | vs S3 | vs Redis | compute s | write s | read s | MB written | MB read | server CPU s | steps at once mean/max | IO timing |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in sorted(summary["cells"], key=lambda c: (c["app"], BENCH_BACKENDS.index(c["backend"]))):
        e, p = c["e2e_s"], c["perf_per_usd"]
        r = c["ratios"]
        lines.append(
            f"| {c['app']} | {c['backend']}{' *' if c['backend'] in NOT_DEPLOYABLE else ''} | {c['ok']}/{c['runs']} | {_f(e['median'])} [{_f(e['min'])}, {_f(e['max'])}] | "
            f"{_f(c['cost_usd']['median'], 1, 1e6)} | {_f(p['median'], 0)} [{_f(p['min'], 0)}, {_f(p['max'], 0)}] | "
            f"{_pct(r.get('perf_vs_s3'))} | {_pct(r.get('perf_vs_redis'))} | {_f(c['compute_s_total']['median'])} | "
            f"{_f(c['write_s_total']['median'], 3)} | {_f(c['read_s_total']['median'], 3)} | "
            f"{_f(c['bytes_written']['median'], 2, 1 / 2**20)} | {_f(c['bytes_read']['median'], 2, 1 / 2**20)} | "
            f"{_f(c['server_cpu_s']['median'])} | {_f((c.get('steps_parallel_mean') or {}).get('median'), 1)}/"
            f"{_f((c.get('steps_parallel_max') or {}).get('median'), 0)} | {'/'.join(c['io_timing'])} |")
    if any(c["backend"] in NOT_DEPLOYABLE for c in summary["cells"]):
        lines += ["", "\\* local files: a floor, not a peer. A Lambda function's disk cannot pass data to "
                      "another function, and its storage is priced at $0 here."]
    wi = [c for c in summary["cells"] if "what_if" in c]
    if wi:
        insts = list(wi[0]["what_if"])
        lines += ["", "## Instance what-if (paper Figs 6-7): the same Cassandra runs priced on each instance", "",
                  "| app | backend | " + " | ".join(f"Perf/$ {i}" for i in insts) + " | "
                  + " | ".join(f"{i} vs i3.large" for i in insts if i != "i3.large") + " |",
                  "|---|---|" + "---|" * (2 * len(insts) - (1 if "i3.large" in insts else 0))]
        for c in wi:
            lines.append(f"| {c['app']} | {c['backend']} | "
                         + " | ".join(_f(c["what_if"][i]["median"], 0) for i in insts) + " | "
                         + " | ".join(_pct(c["what_if_vs_i3"][i]) for i in insts if i != "i3.large") + " |")
        lines += ["", "Only the price changes: the latency is the one measured on this machine (the paper "
                      "measured each instance type)."]
    lines += ["", "## Beside the paper (seed 000, §4.1-4.3)", "",
              "| app | the paper's claim | paper | ours |", "|---|---|---|---|"]
    for r in summary["paper"]:
        lines.append(f"| {r['app']} | {r['claim']} | {r['paper']:.2f}x | {_f(r['ours'])}{'x' if r['ours'] else 'not run'} |")
    lines += ["", "perf: Perf/$ of the first over the second; speed: E2E of the second over the first; what-if: "
                  "Perf/$ of the same runs priced on each instance."]
    if summary["failed_runs"]:
        lines += ["", "## Failed runs", ""] + [f"- {json.dumps(f)}" for f in summary["failed_runs"]]
    return "\n".join(lines) + "\n"


def run_networks(cfg: BenchConfig, networks: list[str], on_start: Callable[[int, int, str], None] | None = None,
                 on_run: Callable[[dict], None] | None = None) -> dict:
    """The bench once per network profile (in ``out/<profile>/``, one after the other), and
    ``out/summary.md`` setting their figures side by side."""
    import dataclasses

    out = Path(cfg.out) if cfg.out else default_out_dir()
    summaries = {}
    for network in networks:
        summaries[network] = run_bench(dataclasses.replace(cfg, network=network, out=str(out / network)),
                                       on_start, on_run)
    text = side_by_side(summaries)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(text)
    return {"networks": summaries, "markdown": str(out / "summary.md"), "out": str(out)}


def side_by_side(summaries: dict[str, dict]) -> str:
    """Markdown: the paper's claims and each cell's E2E and Perf/$ under every network profile."""
    nets = list(summaries)
    first = summaries[nets[0]]
    lines = [f"# asgard bench apps: {' beside '.join(nets)}", "",
             "The same bench under each network profile, run one after the other on this machine "
             "(not interleaved between profiles; within a profile, backends rotate per repetition as always). "
             "Each profile's full report is in its own folder.", ""]
    for net in nets:
        info = summaries[net]["meta"].get("network") or {}
        links = "; ".join(f"{b}: {d}" for b, d in (info.get("links") or {}).items()) or "loopback, no added delay"
        lines.append(f"- **{net}**: {links}")
    lines += ["", "## Beside the paper (seed 000, §4.1-4.3)", "",
              "| app | the paper's claim | paper | " + " | ".join(nets) + " |",
              "|---|---|---|" + "---|" * len(nets)]
    for i, r in enumerate(first["paper"]):
        ours = [summaries[n]["paper"][i]["ours"] for n in nets]
        lines.append(f"| {r['app']} | {r['claim']} | {r['paper']:.2f}x | "
                     + " | ".join(f"{_f(o)}x" if o else "not run" for o in ours) + " |")
    lines += ["", "## Every cell: E2E s and Perf/$ (medians)", "",
              "| app | backend | " + " | ".join(f"E2E s {n}" for n in nets) + " | "
              + " | ".join(f"Perf/$ {n}" for n in nets) + " | " + " | ".join(f"steps at once {n}" for n in nets) + " |",
              "|---|---|" + "---|" * (3 * len(nets))]
    cells = {n: {(c["app"], c["backend"]): c for c in summaries[n]["cells"]} for n in nets}
    for key in sorted(cells[nets[0]], key=lambda k: (k[0], BENCH_BACKENDS.index(k[1]))):
        got = [cells[n].get(key) for n in nets]
        lines.append(f"| {key[0]} | {key[1]} | "
                     + " | ".join(_f(c["e2e_s"]["median"]) if c else "" for c in got) + " | "
                     + " | ".join(_f(c["perf_per_usd"]["median"], 0) if c else "" for c in got) + " | "
                     + " | ".join(_f((c.get("steps_parallel_mean") or {}).get("median"), 1) if c else "" for c in got)
                     + " |")
    return "\n".join(lines) + "\n"


def _write_csv(path: Path, rows: list[dict]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def write_outputs(out: Path, rows: list[dict], steps: list[dict], edges: list[dict], summary: dict) -> dict:
    from .plots import plot_all

    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "runs.csv", rows)
    _write_csv(out / "steps.csv", steps)
    _write_csv(out / "edges.csv", edges)
    (out / "summary.md").write_text(markdown(summary))
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    pngs = plot_all(summary, out)
    summary["files"] = {"runs_csv": str(out / "runs.csv"), "steps_csv": str(out / "steps.csv"),
                        "edges_csv": str(out / "edges.csv"), "markdown": str(out / "summary.md"),
                        "json": str(out / "summary.json"), "png": [str(p) for p in pngs]}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary["files"]
