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

The bench is one module per job: ``apps_config`` (apps, backends, the tuned configuration file),
``apps_servers`` (the servers and the Cassandra node's configuration), ``apps_run`` (one run,
measured) and ``apps_summary`` (pricing, summaries, report files); this module runs the whole
bench, and every name of those modules is importable from here.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Callable

from .apps_config import (BENCH_BACKENDS, DEFAULT_APPS, DEFAULT_BACKENDS, PIPELINE_BACKEND, STOCK_BACKENDS,
                          BenchConfig, CassandraConfigFile, app_sizes, client_fields, parse_per_app, table_clauses)
from .apps_run import measure_run, run_one, step_parallelism
from .apps_servers import CassandraConfigurator, server_for
from .apps_summary import (NOT_DEPLOYABLE, PAPER_CLAIMS, PEERS, markdown, paper_comparison, price_row, side_by_side,
                           summarize, write_outputs)
from .cost import Prices

# what other modules and the tests import from here; all but the bench's own functions are
# defined in the job modules above
__all__ = ["BENCH_BACKENDS", "DEFAULT_APPS", "DEFAULT_BACKENDS", "PIPELINE_BACKEND", "STOCK_BACKENDS", "PEERS",
           "PAPER_CLAIMS", "NOT_DEPLOYABLE", "BenchConfig", "CassandraConfigFile", "CassandraConfigurator",
           "app_sizes", "client_fields", "parse_per_app", "table_clauses", "server_for", "measure_run",
           "step_parallelism", "run_one", "price_row", "paper_comparison", "summarize", "markdown",
           "side_by_side", "write_outputs", "default_out_dir", "run_bench", "run_networks"]


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
