"""``asgard bench apps``: the click command (the lead mounts it on the ``bench`` group).

    asgard bench apps [--apps video_analytics,lightgbm_forest] [--backends cassandra,redis,s3,...]
                      [--repetitions 3] [--fanout N | app=N,...] [--scale X | app=X,...] [--small]
                      [--cassandra-config tuned.yaml] [--prices prices.yaml] [--out DIR] [--json]
                      [--network loopback,cloud]
"""
from __future__ import annotations

import json

import click


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


@click.command("apps")
@click.option("--apps", default="video_analytics,lightgbm_forest,word_count", show_default=True,
              help="Comma-separated apps (asgard.pipelines.jobs.APPS).")
@click.option("--backends", default="cassandra,cassandra_tuned,redis,s3,s3_stock,local", show_default=True,
              help="Comma-separated: cassandra, cassandra_tuned (needs --cassandra-config), redis, s3, s3_stock, local, fs_stock.")
@click.option("--repetitions", "-r", default=3, show_default=True, type=click.IntRange(1))
@click.option("--fanout", default=None, help="Fan-out for every app (N) or per app (video_analytics=4,...). Default: each app's.")
@click.option("--scale", default=None, help="Data scale for every app (X) or per app (lightgbm_forest=5,...). Default: each app's.")
@click.option("--small", is_flag=True, help="Start from the test sizes (asgard.pipelines.jobs.SMALL); --fanout/--scale still apply.")
@click.option("--cassandra-config", type=click.Path(exists=True, dir_okay=False), default=None,
              help="YAML with 'yaml:' cassandra.yaml overrides and optional 'table:' options: the cassandra_tuned backend.")
@click.option("--fresh-cassandra", is_flag=True, help="Restart Cassandra for the default cells even if it has no overrides.")
@click.option("--prices", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Price table (default: asgard_bench/prices.yaml, AWS Nov 2022).")
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Output dir (default reports/bench-apps/<timestamp>/).")
@click.option("--max-concurrent", default=2, show_default=True, help="Steps in parallel (multiprocess executor).")
@click.option("--warmup/--no-warmup", default=True, show_default=True,
              help="One untimed run first (the executor's forkserver and imports), so no cell pays it.")
@click.option("--network", default="loopback", show_default=True,
              help="Network profile(s) of resources/network/profiles.yaml, comma-separated: with several "
              "(e.g. loopback,cloud) the bench runs under each and out/summary.md sets them side by side.")
@click.option("--engine", default="dagster", show_default=True, type=click.Choice(["dagster", "airflow", "dagster,airflow"]),
              help="Run the apps as Dagster jobs, as Airflow DAGs (the XCom backend on each store; "
              "asgard_bench/apps_airflow.py), or both, with a Perf/$ table setting them side by side.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (no progress bar).")
def apps(apps, backends, repetitions, fanout, scale, small, cassandra_config, fresh_cassandra, prices, out,
         max_concurrent, warmup, network, engine, as_json):
    """Each app on each backend: E2E latency, step/edge times, server CPU, cost and Perf/$ (Asgard Figs 4-7)."""
    from asgard.resources.network import profile_names

    from .apps import BenchConfig, markdown, parse_per_app, run_bench, run_networks

    networks = _csv(network)
    unknown = [n for n in networks if n not in profile_names()]
    if unknown or not networks:
        raise click.BadParameter(f"unknown profile(s) {unknown}; known: {', '.join(profile_names())}",
                                 param_hint="--network")

    cfg = BenchConfig(apps=_csv(apps), backends=_csv(backends), repetitions=repetitions,
                      fanout=parse_per_app(fanout, int), scale=parse_per_app(scale, float), small=small,
                      cassandra_config=cassandra_config, prices=prices, out=out, fresh_cassandra=fresh_cassandra,
                      max_concurrent=max_concurrent, warmup=warmup, network=networks[0])
    try:
        plan = cfg.plan()
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if "cassandra_tuned" in cfg.backends and not cassandra_config and not as_json:
        click.echo("cassandra_tuned skipped: no --cassandra-config given", err=True)
    def run(**callbacks):
        if engine != "dagster":
            return _with_airflow(cfg, engine, **callbacks)
        return run_networks(cfg, networks, **callbacks) if len(networks) > 1 else run_bench(cfg, **callbacks)

    if as_json:
        click.echo(json.dumps(run(), indent=2, default=str))
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task("starting", total=len(plan) * len(networks) * len(engine.split(",")))

        def on_start(i, n, label):
            progress.update(task, description=label)

        def on_run(row):
            status = f"{row['e2e_s']:.1f}s" if row["success"] else "FAILED"
            progress.console.print(f"  {row['app']:<16} {row['backend']:<16} {row.get('network', '')} rep {row['rep'] + 1}: {status}")
            progress.advance(task)

        summary = run(on_start=on_start, on_run=on_run)
    if len(networks) > 1 or engine == "dagster,airflow":
        click.echo(open(summary["markdown"]).read())
        click.echo(f"written: {summary['out']}/ (one folder per profile, summary.md side by side)")
        return
    click.echo(markdown(summary))
    click.echo(f"written: {json.dumps(summary['files'], indent=1)}")


def _with_airflow(cfg, engine: str, on_start=None, on_run=None) -> dict:
    """``--engine airflow`` (the Airflow DAGs alone) or ``dagster,airflow`` (both, in ``out/dagster``
    and ``out/airflow``, and ``out/summary.md`` with their Perf/$ side by side)."""
    import dataclasses
    from pathlib import Path

    from .apps import default_out_dir, run_bench
    from .apps_airflow import AIRFLOW_BACKENDS, AirflowBenchError, run_bench_airflow, side_by_side

    out = Path(cfg.out) if cfg.out else default_out_dir()
    try:
        if engine == "airflow":
            return run_bench_airflow(cfg, out, on_start, on_run)
        dagster = run_bench(dataclasses.replace(cfg, out=str(out / "dagster")), on_start, on_run)
        # the stock and tuned cells are Dagster's: Airflow runs the XCom backend's stores
        on_airflow = dataclasses.replace(cfg, backends=[b for b in cfg.backends if b in AIRFLOW_BACKENDS])
        airflow = run_bench_airflow(on_airflow, out / "airflow", on_start, on_run)
    except AirflowBenchError as exc:
        raise click.BadParameter(str(exc), param_hint="--engine") from None
    (out / "summary.md").write_text(side_by_side(dagster, airflow))
    return {"out": str(out), "markdown": str(out / "summary.md"), "dagster": dagster["files"],
            "airflow": airflow["files"]}
