"""``asgard bench apps`` as a Dagster job: one op runs the bench and logs the summary as metadata.

    dagster job execute -m asgard_bench.apps_job -j bench_apps \\
        -c config.yaml   # ops: {run_apps_bench: {config: {apps: [...], repetitions: 1, small: true}}}

or from Python: ``bench_apps_job.execute_in_process(run_config=...)``. The bench's own pipeline
runs are separate Dagster runs (in a temporary instance, multiprocess executor).
"""

from typing import Optional

import dagster as dg

from .apps import DEFAULT_APPS, DEFAULT_BACKENDS, BenchConfig, markdown, run_bench


class AppsBenchConfig(dg.Config):
    apps: list[str] = list(DEFAULT_APPS)
    backends: list[str] = list(DEFAULT_BACKENDS)
    repetitions: int = 3
    fanout: Optional[int] = None
    scale: Optional[float] = None
    small: bool = False
    cassandra_config: Optional[str] = None
    prices: Optional[str] = None
    out: Optional[str] = None
    fresh_cassandra: bool = False
    warmup: bool = True


@dg.op(description="Run every app on every backend and price it (asgard bench apps).")
def run_apps_bench(context: dg.OpExecutionContext, config: AppsBenchConfig) -> dict:
    cfg = BenchConfig(apps=config.apps, backends=config.backends, repetitions=config.repetitions,
                      fanout=config.fanout, scale=config.scale, small=config.small,
                      cassandra_config=config.cassandra_config, prices=config.prices, out=config.out,
                      fresh_cassandra=config.fresh_cassandra, warmup=config.warmup)

    def on_run(row: dict) -> None:
        context.log.info(f"{row['app']} on {row['backend']} rep {row['rep'] + 1}: "
                         f"{'%.2f s' % row['e2e_s'] if row['success'] else 'FAILED'}")

    summary = run_bench(cfg, on_run=on_run)
    md: dict = {"summary": dg.MetadataValue.md(markdown(summary)),
                "out": dg.MetadataValue.path(summary["meta"]["out"]),
                "failed_runs": len(summary["failed_runs"])}
    for c in summary["cells"]:
        if c["perf_per_usd"]["median"] is not None:
            md[f"perf_per_usd/{c['app']}/{c['backend']}"] = dg.MetadataValue.float(c["perf_per_usd"]["median"])
            md[f"e2e_s/{c['app']}/{c['backend']}"] = dg.MetadataValue.float(c["e2e_s"]["median"])
    context.add_output_metadata(md)
    return summary


@dg.job(description="asgard bench apps: Perf/$ of the paper's apps on Cassandra, Redis, S3 and local files.",
        executor_def=dg.in_process_executor)
def bench_apps():
    run_apps_bench()


defs = dg.Definitions(jobs=[bench_apps])
