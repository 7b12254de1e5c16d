"""``asgard bench``: the benchmarks, tools for us and for evaluators (not what a pipeline imports;
``asgard.cli`` mounts this group when the package is installed).

    asgard bench io [--json]         store throughput and memory, every backend
    asgard bench apps [--json]       Perf/$ and latency of the apps on every backend
    asgard bench dynamic [--json]    bursts of apps: static default, static tuned, Asgard
    asgard bench day [--json]        a data-heavy day: the stock peer, default, best static, the loop per edge
    asgard bench scaling [--json]    1 and N pinned Cassandra instances against one unpinned
    asgard bench chunks [--json]     an output's put and get against its chunk size, on the day's data
    asgard bench drivers [--json]    the Cassandra store on cassandra-driver against scylla-driver
    asgard bench xcom [--json]       Airflow XCom push+pull: Cassandra, the object-storage backend, the database
    asgard bench nemesis [--json]    faults at random on a ring across 3 hosts under runs and reconfigurations
    asgard bench slow-replica [--json]  other connections' p99 beside requests waiting on a slow replica
    asgard bench keep-rows-heap [--json]  heap held by reads in flight under local-read-keep-rows
    asgard bench load | startup | report
"""
from __future__ import annotations

import contextlib
import json
import sys

import click

from .apps_cli import apps
from .chunks import DATA_KINDS  # the --data choices (a module of the standard library's imports only)
from asgard.resources.network.hosts import I3_LARGE_BASELINE_MBIT  # the --host-link-mbit default (standard library imports)

# --------------------------------------------------------------------------
@click.group()
def bench():
    """Benchmarks that print tables (ratios against peers measured in the same run)."""


@bench.command("io")
@click.option("--json", "as_json", is_flag=True, help="Print rows as JSON instead of a table.")
@click.option("--backends", default="cassandra,redis,s3,s3_stock,local", show_default=True,
              help="Comma-separated backends (s3_stock: dagster-aws's own S3PickleIOManager on the same MinIO).")
@click.option("--sizes-mib", default="1,16,64", show_default=True, help="Object sizes for the MB/s rows.")
@click.option("--small-ops", default=2000, show_default=True, help="10 KiB objects per ops/s measurement.")
@click.option("--repeat", default=3, show_default=True, help="Repetitions per size (best is reported).")
@click.option("--memory-mib", default=256, show_default=True, help="Array size for the memory measurement (0 skips).")
@click.option("--first-puts", default=3, show_default=True,
              help="Fresh processes per backend timing their first 10 KiB put (0 skips).")
@click.option("--nodes", default=1, show_default=True,
              help="Cassandra instances: 1 uses the local node; more start a ring of their own on 127.0.0.11 onwards.")
@click.option("--replication-factor", default=1, show_default=True,
              help="Replication factor on a --nodes or --hosts ring.")
@click.option("--hosts", default=0, show_default=True,
              help="Run Cassandra as one ring across this many emulated hosts (network namespaces, TLS, one "
              "login; made for the bench, torn down after; needs root) and give each host's bytes.")
@click.option("--spread-outputs", default=6, show_default=True,
              help="16 MiB outputs of one run written to measure each Cassandra instance's share (0 skips).")
@click.option("--warmup/--no-warmup", default=True, show_default=True,
              help="Untimed passes over every backend first (JIT, connections).")
@click.option("--warmup-seconds", default=60.0, show_default=True,
              help="Repeat the untimed passes until this many seconds have passed (at least one pass): a "
              "Cassandra restarted a minute ago still compiles its hot paths.")
@click.option("--jit-wait-seconds", default=300.0, show_default=True,
              help="Then warm Cassandra alone until its JIT compiler threads take at most 5% of its CPU over a "
              "pass, for at most this many seconds more: a node started minutes ago spends half its CPU compiling.")
@click.option("--small-seconds", default=30.0, show_default=True,
              help="Time bound of each backend's 10 KiB measurement (fewer objects on a slow link).")
@click.option("--network", default="loopback", show_default=True,
              help="Network profile(s) (resources/network/profiles.yaml), comma-separated: with several (e.g. "
              "loopback,cloud) the bench runs under each in turn and a last table sets them side by side. A "
              "profile's servers are started and left running (`asgard stores down --network ...` stops them).")
def bench_io(as_json, backends, sizes_mib, small_ops, repeat, memory_mib, first_puts, nodes, replication_factor, hosts,
             spread_outputs, warmup, warmup_seconds, jit_wait_seconds, small_seconds, network):
    """Write/read MB/s and server CPU s/GB per object size, ops/s and first put for 10 KiB objects,
    peak extra memory, and how one run spreads over the Cassandra instances."""
    from asgard.resources.network import profile_names

    from .io import print_side_by_side, print_table, run_io_bench

    networks = [n.strip() for n in network.split(",") if n.strip()]
    if not networks or any(n not in profile_names() for n in networks):
        raise click.BadParameter(f"{network!r}: known profiles are {', '.join(profile_names())}", param_hint="--network")
    rows = []
    for net in networks:
        rows += run_io_bench(
            backends=[b.strip() for b in backends.split(",") if b.strip()],
            sizes_mib=[int(s) for s in sizes_mib.split(",") if s.strip()],
            small_ops=small_ops, repeat=repeat, memory_mib=memory_mib, progress=not as_json, first_puts=first_puts,
            nodes=nodes, replication_factor=replication_factor, spread_outputs=spread_outputs, warmup=warmup,
            warmup_seconds=warmup_seconds, jit_wait_seconds=jit_wait_seconds, network=net,
            small_seconds=small_seconds, hosts=hosts,
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for net in dict.fromkeys(r["network"] for r in rows):
        print_table([r for r in rows if r["network"] == net])
    if len(networks) > 1:
        print_side_by_side(rows)


@bench.command("xcom")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
@click.option("--sizes", default="67108864,10240", show_default=True, help="Value sizes in bytes (64 MiB, 10 KiB).")
@click.option("--repeat", default=5, show_default=True, help="Repeats; each runs every backend once per size, order rotated.")
@click.option("--small-count", default=50, show_default=True,
              help="Values pushed and pulled per repeat for sizes up to 10 KiB (their pairs/s).")
@click.option("--backends", default="cassandra,object_storage,database", show_default=True,
              help="cassandra (asgard_airflow.CassandraXComBackend), object_storage (common-io's "
              "XComObjectStorageBackend on our MinIO), database (Airflow's BaseXCom).")
@click.option("--threshold-bytes", default=0, show_default=True,
              help="Both store backends' inline threshold: 0 sends every value to the store.")
def bench_xcom(as_json, sizes, repeat, small_count, backends, threshold_bytes):
    """XCom push + pull through Airflow's XCom API in a real task (airflow dags test): Cassandra
    against the stock object-storage backend on MinIO and against Airflow's database."""
    from .xcom import print_report, run_xcom_bench

    report = run_xcom_bench([int(s) for s in sizes.split(",") if s.strip()], repeat=repeat,
                            small_count=small_count, peers=[b.strip() for b in backends.split(",") if b.strip()],
                            threshold=threshold_bytes)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    print_report(report)


@bench.command("drivers")
@click.option("--drivers", default="cassandra-driver,scylla-driver", show_default=True,
              help="Comma-separated Python drivers; the first is the one the others are measured against.")
@click.option("--sizes-mib", default="1,64", show_default=True, help="Object sizes for the MB/s rows.")
@click.option("--rounds", default=8, show_default=True, type=click.IntRange(2), help="Interleaved rounds.")
@click.option("--small-ops", default=500, show_default=True, type=click.IntRange(1),
              help="10 KiB objects put and got per round and variant.")
@click.option("--block-mib", default=128, show_default=True, type=click.IntRange(1),
              help="MiB written then read per round, variant and size (in objects of that size).")
@click.option("--first-puts/--no-first-puts", default=True, show_default=True,
              help="Time a fresh process's first 10 KiB put on each driver, once per round.")
@click.option("--aa/--no-aa", default=True, show_default=True,
              help="Run the first driver twice: the noise floor of the ratio.")
@click.option("--json", "as_json", is_flag=True,
              help="Print {variants, rounds, rows: [{variant, driver, measure, object_bytes, speed_median, "
              "server_cpu_median, client_cpu_median, speed_vs_base, ci_low, ci_high}]}.")
def bench_drivers(drivers, sizes_mib, rounds, small_ops, block_mib, first_puts, aa, as_json):
    """The Cassandra store on cassandra-driver against scylla-driver (a fork with the same API),
    interleaved on the local node: write and read MB/s, 10 KiB ops/s, a fresh process's first put,
    the node's and the client's CPU per GB or per op."""
    from .drivers import DriverNotInstalledError, print_table, run_driver_bench

    sizes = tuple(int(s) for s in sizes_mib.split(",") if s.strip())
    try:
        result = run_driver_bench(drivers=drivers, sizes_mib=sizes, rounds=rounds, small_ops=small_ops,
                                  block_mib=block_mib, first_puts=first_puts, aa=aa, progress=not as_json)
    except (ValueError, DriverNotInstalledError) as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        print_table(result)


@bench.command("chunks")
@click.option("--network", default="loopback", show_default=True,
              help="Network profile (resources/network/profiles.yaml); its node is started and, if this started it, stopped.")
@click.option("--chunk-kib", default="1024,2048,4096,8192", show_default=True, help="Chunk sizes in KiB.")
@click.option("--in-flight", default="8", show_default=True, help="Chunk requests in flight per object.")
@click.option("--data", default=",".join(DATA_KINDS), show_default=True,
              help="The day's data kinds to put and get.")
@click.option("--rounds", default=5, show_default=True, type=click.IntRange(2), help="Interleaved rounds.")
@click.option("--scale", default=0.5, show_default=True, help="GiB of each pipeline's data (the day's: 0.5).")
@click.option("--fanout", default=4, show_default=True, type=click.IntRange(1), help="Partitions (the day's: 4).")
@click.option("--warmup-seconds", default=60.0, show_default=True,
              help="Untimed passes over every cell until this many seconds have passed (a fresh node compiles).")
@click.option("--json", "as_json", is_flag=True,
              help="Print {network, rounds, data: {kind: {mib, codec, reason}}, cells: [{data, cell, chunk_kib, "
              "in_flight, put_s, get_s, put_get_s, ratio, noise_pct, spread_pct, server_cpu_s_per_gb}]}.")
def bench_chunks(network, chunk_kib, in_flight, data, rounds, scale, fanout, warmup_seconds, as_json):
    """One output's put and get against its chunk size and requests in flight, on the day's own data
    with the codec auto chooses, interleaved, the store's default cell twice (the noise floor)."""
    from asgard.resources.network import profile_names

    from .chunks import run_chunks, table

    kinds = tuple(k.strip() for k in data.split(",") if k.strip())
    if network not in profile_names():
        raise click.BadParameter(f"{network!r}: known profiles are {', '.join(profile_names())}", param_hint="--network")
    if not kinds or any(k not in DATA_KINDS for k in kinds):
        raise click.BadParameter(f"{data!r}: choose from {', '.join(DATA_KINDS)}", param_hint="--data")
    result = run_chunks(network, [int(c) for c in chunk_kib.split(",")], [int(n) for n in in_flight.split(",")],
                        kinds, rounds, scale, fanout, warmup_seconds, say=(lambda _: None) if as_json else click.echo)
    click.echo(json.dumps(result, indent=2) if as_json else table(result))


@bench.command("load")
@click.option("--backend", default="cassandra", show_default=True, type=click.Choice(["cassandra", "redis", "s3", "local"]))
@click.option("--processes", default=16, show_default=True, help="Parallel writer/reader processes (step processes).")
@click.option("--objects", default=1000, show_default=True, help="Outputs each process writes (mixed sizes, 1 KiB-2 MiB).")
@click.option("--json", "as_json", is_flag=True)
def bench_load(backend, processes, objects, as_json):
    """Parallel processes write and read back mixed-size outputs through the IO manager's store:
    p50/p99 latency per operation and size, and every object verified (lost, corrupted, failed).
    Exits 1 if anything was lost, corrupted or failed."""
    from .load import print_report, run_load_bench

    report = run_load_bench(backend=backend, processes=processes, objects=objects)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        print_report(report)
    if report["lost"] or report["corrupted"] or report["failed"]:
        raise SystemExit(1)


@bench.command("startup")
@click.option("--repeat", default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def bench_startup(repeat, as_json):
    """Cassandra cold start, warm start and restart: the project's trimmed start against stock."""
    from .startup import run_startup_bench

    rows = run_startup_bench(repeat)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{'variant':<8} {'cold start s':>12} {'stop s':>7} {'warm start s':>12} {'restart s':>9}")
    for r in rows:
        click.echo(f"{r['variant']:<8} {r['cold_start_s']:>12} {r['stop_s']:>7} {r['warm_start_s']:>12} {r['restart_s']:>9}")


@bench.command("dynamic")
@click.option("--apps", default="video_analytics,lightgbm_forest,word_count", show_default=True,
              help="Comma-separated apps, one burst each per round.")
@click.option("--burst", default=2, show_default=True, type=click.IntRange(1), help="Runs per burst (the paper: 5).")
@click.option("--rounds", default=1, show_default=True, type=click.IntRange(1), help="Times the sequence repeats.")
@click.option("--static-app", default="video_analytics", show_default=True,
              help="The app the static_tuned variant is tuned for.")
@click.option("--small", is_flag=True, help="The apps' test sizes (asgard.pipelines.jobs.SMALL).")
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Fitted surrogate (default: the one shipped in tuner/data).")
@click.option("--prices", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Output dir (default reports/bench-dynamic/<timestamp>/).")
@click.option("--json", "as_json", is_flag=True, help="Print {variant: {perf_per_dollar, e2e_s, failed_runs, reconfigurations}}.")
def bench_dynamic(apps, burst, rounds, static_app, small, model_path, prices, out, as_json):
    """The paper's dynamic experiment (Fig. 8): bursts of apps on one Cassandra, static default,
    static tuned and Asgard (sensor + retune job) interleaved; Perf/$ and E2E of the sequence."""
    from .dynamic import DynamicConfig, run_dynamic, table

    cfg = DynamicConfig(apps=[a.strip() for a in apps.split(",") if a.strip()], burst=burst, rounds=rounds,
                        static_app=static_app, small=small, prices=prices, out=out, model_path=model_path)
    try:
        cfg.sequence()
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    result = run_dynamic(cfg, on_event=None if as_json else (lambda m: click.echo(m, err=True)))
    if as_json:
        keep = ("perf_per_dollar", "e2e_s", "failed_runs", "reconfigurations", "perf_per_dollar_vs_default",
                "cost_usd", "runs", "config")
        click.echo(json.dumps({v: {k: d[k] for k in keep} for v, d in result["variants"].items()}, indent=2, default=str))
        return
    click.echo(table(result))
    click.echo(f"written: {result['out']}/dynamic.json, {result['plot']}")


@bench.command("day")
@click.option("--settings", default="loopback,cloud,hosts3", show_default=True,
              help="Comma-separated: loopback, cloud (the paper's deployment, emulated links), hosts3 (the 3 emulated hosts' celery workers and ring; asgard hosts up unless they run).")
@click.option("--mix", default=None, help="The day's runs: app[:scale=X;fanout=N], comma-separated "
              "(default: etl_columnar:scale=0.5, log_analytics:scale=0.5, word_count).")
@click.option("--concurrent", default=2, show_default=True, type=click.IntRange(1), help="Runs of the day at once.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1),
              help="Interleaved rounds of the four variants (2 or more for the noise floor).")
@click.option("--search-probes", default=8, show_default=True, type=click.IntRange(1),
              help="best_static: probes of its coordinate search, per setting (each the day's mix, run "
                   "as a round runs it).")
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Fitted surrogate (default: the one shipped in tuner/data).")
@click.option("--prices", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Output dir (default reports/bench-day/<timestamp>/).")
@click.option("--engine", type=click.Choice(["dagster", "airflow"]), default="dagster", show_default=True,
              help="dagster: the multiprocess (hosts3: celery) executor, the peer dagster-aws's S3PickleIOManager; "
                   "airflow: `airflow dags test` runs (on hosts3 --use-executor, the hosts' Airflow workers), the peer "
                   "common-io's XComObjectStorageBackend.")
@click.option("--host-link-mbit", type=click.IntRange(0), default=I3_LARGE_BASELINE_MBIT, show_default=True,
              help="hosts3: each host's link, Mbit/s each way (the default: an EC2 i3.large's sustained bandwidth, "
                   "the instance the ring is charged as); 0: unshaped, the bridge at memory speed.")
@click.option("--json", "as_json", is_flag=True,
              help="Print {settings: {loopback|cloud|hosts3: {variants, noise_pct, store_share_pct, failed_runs}}}.")
def bench_day(settings, mix, concurrent, rounds, search_probes, model_path, prices, out, engine, host_link_mbit,
              as_json):
    """A data-heavy day of pipelines, N at once, four ways interleaved: the stock S3 peer, Cassandra at
    its defaults, the best single static configuration and the loop per edge; E2E and Perf/$."""
    from .day import DEFAULT_MIX, DayConfig, parse_mix, run_day, summary_json, table

    try:
        cfg = DayConfig(settings=[s.strip() for s in settings.split(",") if s.strip()],
                        mix=parse_mix(mix or DEFAULT_MIX), concurrent=concurrent, rounds=rounds,
                        search_probes=search_probes, prices=prices, out=out, model_path=model_path, engine=engine,
                        host_link_mbit=host_link_mbit)
        cfg.check()
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    # --json: stdout carries the object alone; what libraries print meanwhile (Airflow's logging prints
    # every INFO record, alembic's migrations of Dagster's run storage among them) goes to stderr
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        result = run_day(cfg, on_event=None if as_json else (lambda m: click.echo(m, err=True)))
    if as_json:
        click.echo(json.dumps(summary_json(result), indent=2, default=str))
        return
    click.echo(table(result))
    click.echo(f"written: {result['out']}/day.json")


@bench.command("scaling")
@click.option("--instances", type=click.IntRange(2), default=None,
              help="N (default: the NUMA nodes, or 2 on a one-node machine).")
@click.option("--heap", "heap_mib", default=512, show_default=True, type=click.IntRange(256),
              help="MiB of heap per pinned instance; the unpinned one gets N times this.")
@click.option("--seconds", default=5.0, show_default=True, type=click.FloatRange(0.5),
              help="Seconds of puts, then of gets, per configuration and round.")
@click.option("--repeat", default=1, show_default=True, type=click.IntRange(1), help="Interleaved rounds (median).")
@click.option("--clients", default=4, show_default=True, type=click.IntRange(1), help="Client threads.")
@click.option("--object-mib", default=1, show_default=True, type=click.IntRange(1))
@click.option("--first-index", default=14, show_default=True, type=click.IntRange(1, 254),
              help="Instances run on 127.0.0.<first-index> onwards.")
@click.option("--json", "as_json", is_flag=True)
def bench_scaling(instances, heap_mib, seconds, repeat, clients, object_mib, first_index, as_json):
    """Throughput with 1 and N pinned Cassandra instances against one unpinned instance of the same
    total heap (ICPE'19: one instance per NUMA node). Says what the machine has: on one NUMA node
    the instances are pinned to CPUs, and efficiency means CPU pinning only."""
    from asgard.resources.numa import NumaError

    from .scaling import print_report, run_scaling_bench

    try:
        report = run_scaling_bench(instances=instances, heap_mib=heap_mib, seconds=seconds, repeat=repeat,
                                   clients=clients, object_mib=object_mib, first_index=first_index,
                                   progress=not as_json)
    except (ValueError, NumaError) as exc:
        raise click.BadParameter(str(exc)) from None
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    print_report(report)


@bench.command("nemesis")
@click.option("--faults-per-kind", type=int, default=20, show_default=True,
              help="Faults of each kind (kill_agent, kill_coordinator, pause_member, drop_packets, restart_host).")
@click.option("--reconfigurations", type=int, default=3, show_default=True,
              help="Restart reconfigurations at least (more while faults remain).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--heap", default="768M", show_default=True, help="Heap of each member.")
@click.option("--json", "as_json", is_flag=True)
def bench_nemesis(faults_per_kind, reconfigurations, seed, heap, as_json):
    """Faults at random on a ring across 3 emulated hosts under runs and reconfigurations (after Jepsen)."""
    from .nemesis import print_report, run_nemesis

    rep = run_nemesis(faults_per_kind, reconfigurations, seed, heap, progress=lambda line: click.echo(line, err=True))
    if as_json:
        click.echo(json.dumps(rep, indent=2, default=str))
    else:
        print_report(rep)
    outcomes = rep["outcomes"]
    if (outcomes["runs_failed"] or outcomes["outputs_lost"] or outcomes["two_down_by_orders"] or outcomes["orders_open"]
            or outcomes["faults_not_healed"]):
        raise SystemExit(1)


@bench.command("slow-replica")
@click.option("--rounds", type=int, default=6, show_default=True, help="Rounds, alternating the two rings.")
@click.option("--requests", type=int, default=1500, show_default=True, help="Timed requests of the other connection a round.")
@click.option("--delay-ms", type=int, default=20, show_default=True, help="Delay of every message to the slow replica.")
@click.option("--waiting-connections", type=int, default=4, show_default=True,
              help="Sessions whose writes at ALL wait for the slow replica.")
@click.option("--in-flight", type=int, default=2, show_default=True, help="Writes outstanding per waiting session.")
@click.option("--heap", default="512M", show_default=True, help="Heap of each member.")
@click.option("--json", "as_json", is_flag=True)
def bench_slow_replica(rounds, requests, delay_ms, waiting_connections, in_flight, heap, as_json):
    """Other connections' p99 beside requests waiting on one slow replica: patched / release (RF 3)."""
    from .slow_replica import print_report, run_slow_replica

    if rounds < 2 or requests < 100 or delay_ms < 0 or waiting_connections < 1 or in_flight < 1:
        raise click.BadParameter("--rounds >= 2, --requests >= 100, --delay-ms >= 0, --waiting-connections >= 1, "
                                 "--in-flight >= 1")
    rep = run_slow_replica(rounds, requests, delay_ms, waiting_connections, in_flight, heap,
                           progress=None if as_json else lambda line: click.echo(line, err=True))
    if as_json:
        click.echo(json.dumps(rep, indent=2, default=str))
    else:
        print_report(rep)


@bench.command("keep-rows-heap")
@click.option("--rounds", type=int, default=3, show_default=True)
@click.option("--wide-rows", type=int, default=100_000, show_default=True, help="Rows of 64 B in the wide partition.")
@click.option("--tombstones", type=int, default=50_000, show_default=True,
              help="Rows deleted one by one in the tombstone-heavy partition.")
@click.option("--blobs", type=int, default=8, show_default=True, help="1 MiB cells in the store-shaped partition.")
@click.option("--in-flight", type=int, default=8, show_default=True, help="Concurrent reads.")
@click.option("--samples", type=int, default=5, show_default=True, help="Live-heap samples a round.")
@click.option("--heap", default="1G", show_default=True, help="Heap of each node.")
@click.option("--json", "as_json", is_flag=True)
def bench_keep_rows_heap(rounds, wide_rows, tombstones, blobs, in_flight, samples, heap, as_json):
    """Heap held by reads in flight under the patch local-read-keep-rows: bounded, unbounded, serialized."""
    from .keep_rows_heap import print_report, run_keep_rows_heap

    if rounds < 1 or wide_rows < 1 or not 1 <= tombstones < 100_000 or blobs < 1 or in_flight < 1 or samples < 1:
        raise click.BadParameter("--rounds, --wide-rows, --blobs, --in-flight, --samples >= 1; --tombstones from 1 "
                                 "to 99999 (Cassandra fails a read past 100000 tombstones)")
    rep = run_keep_rows_heap(rounds, wide_rows, tombstones, blobs, in_flight, samples, heap,
                             progress=None if as_json else lambda line: click.echo(line, err=True))
    if as_json:
        click.echo(json.dumps(rep, indent=2, default=str))
    else:
        print_report(rep)


@bench.command("report")
@click.argument("json_file", type=click.Path(exists=True, dir_okay=False))
def bench_report(json_file):
    """Print the table of a saved ``asgard bench io --json`` result."""
    from .io import print_side_by_side, print_table

    with open(json_file) as f:
        rows = json.load(f)
    networks = list(dict.fromkeys(r.get("network", "loopback") for r in rows))
    for net in networks:
        print_table([r for r in rows if r.get("network", "loopback") == net])
    if len(networks) > 1:
        print_side_by_side(rows)


bench.add_command(apps)
