"""``asgard bench day``: a data-heavy day of pipelines, four ways, in each setting (issue 37, item 5).

A *day* is a mix of pipeline runs (by default the columnar ETL, log analytics and word count) started
``concurrent`` at a time on one Dagster instance, each on the multiprocess executor. It runs
four ways, interleaved round by round (the order rotated each round, so drift hits all alike):

* ``peer``        -- dagster-aws's ``S3PickleIOManager`` on MinIO, the stock peer;
* ``default``     -- our CassandraIOManager with its default fields, the node on its defaults;
* ``best_static`` -- one value of each per-edge lever (copies on a ring of more than one, codec,
  placement, chunk size, requests in flight) for every edge, found by a coordinate search before the
  rounds, each probe the day's mix run as a round runs it (its E2E the probe's), with the server
  configuration the surrogate recommends for the day's workload;
* ``loop``        -- the levers decided per edge (``codec``, ``placement`` and ``replicas`` ``auto``,
  the last one copy of a 1:1 intermediate on the hosts' RF 3 ring; the connection's ``chunk_reads``
  is ``auto`` by default) and the upcoming-runs sensor and the
  retune job before each round, their reconfiguration time counted in the day's E2E: on loopback
  the job manages the local node; under a profile it reaches the profile's node from outside, as a
  user's cluster (keyspace and table options by CQL, the whole retune run counted as its time).

Measured per day: its E2E (the first run's start to the last run's end, wall clock), its cost
and Perf/$ = 1 / (E2E x cost). The cost is the runs' function GB-seconds plus the store: an
instance-priced store is charged once for the day's E2E, which the ``concurrent`` runs share
(not once per run), S3 by the requests the day made (:mod:`asgard_bench.cost`, ``prices.yaml``,
AWS list prices of November 2022). The noise floor beside every ratio is the day's E2E
round-to-round variation of the default variant (A/A: the same configuration each round).

Settings: ``loopback`` (the project's servers on 127.0.0.1), ``cloud`` (the paper's deployment
emulated: :mod:`asgard.resources.network`, each store behind its link) and ``hosts3``: the 3
emulated hosts of ``asgard hosts up`` (brought up for the day unless they run), each run's steps
on dagster-celery's executor, taken by the hosts' workers, its outputs in the ring across the hosts
(replication factor 3, ``LOCAL_QUORUM``, TLS) or, for the peer, in a MinIO on the hosts' bridge.
There the server's knobs stay at the ring's configuration for every variant (a ring is
reconfigured by its hosts' agents, not by this bench), so best_static and the loop differ from the
default by the per-edge levers only; the ring's three instances are charged.
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from asgard.pipelines.hosts import HOSTS_NETWORK

# the day's plan, shared with the Airflow engine, as the CLI and scripts import it from here
from .day_plan import (DEFAULT_MIX, ENGINES, LOOP_FIELDS, PEER_BACKEND, RUNNABLE_SETTINGS, SETTINGS,  # noqa: F401
                       STATIC_LEVERS, VARIANTS, DayConfig, HostsForDay, ProfileServersForDay, cv_pct, empty_tables,
                       median, parse_mix, ratios, search_static, static_levers, store_table_knobs,
                       summarize_variants, variant_order)


class Day:
    """One setting's servers, Dagster instance and node, running the mix as a variant would."""

    def __init__(self, cfg: DayConfig, network: str, instance, prices, say: Callable[[str], None]):
        from asgard.resources.network import Deployment
        from asgard.resources.stores.cql import CassandraObjectStore
        from asgard.tuner.measure import Interleaver

        from .apps_servers import server_for

        self.cfg, self.network, self.instance, self.prices, self.say = cfg, network, instance, prices, say
        self.minio = server_for(PEER_BACKEND, network)
        self.hourly = prices.instances[prices.storage_kind("cassandra")[1]]
        if network == HOSTS_NETWORK:  # the ring across the hosts: three instances, no node to switch
            from asgard.pipelines.hosts import KEYSPACE, REPLICATION_FACTOR, hosts_store_kwargs

            self.node, self.nodes = None, None
            self.store = CassandraObjectStore(**hosts_store_kwargs("cassandra"), keyspace=KEYSPACE,
                                              replication_factor=REPLICATION_FACTOR)
            # made once from here (the loop's single-replica sibling too): first steps on three hosts race
            self.store.ensure_schema(single_replica=True)
            self.hourly *= REPLICATION_FACTOR
            return
        self.deployment = Deployment(network)
        self.node = self.deployment.server("cassandra")
        self.store = CassandraObjectStore(**self.deployment.store_kwargs("cassandra"), keyspace="asgard")
        self.store.ensure_schema()
        self.nodes = Interleaver(self.node, self.store, settle_s=0)  # switches change only what differs

    def connection(self):
        """The retune job's connection to this setting's own node (a profile's: reached from outside)."""
        from asgard_dagster import CassandraResource

        return CassandraResource(**self.deployment.store_kwargs("cassandra"), keyspace="asgard")

    def switch(self, configuration) -> None:
        """The node on ``configuration`` (on the hosts, the ring stays as it is)."""
        if self.nodes is not None:
            self.nodes.switch(configuration)

    def run(self, rnd: int, variant: str, backend: str, client: dict | None, reconf_s: float = 0.0) -> dict[str, Any]:
        """The mix once, ``concurrent`` runs at a time, after ``reconf_s`` seconds of reconfiguring
        (counted in its E2E and in the instance's time); the day's record (runs, E2E, cost)."""
        from .apps_run import run_one
        from .cost import instance_cost, perf_per_dollar, s3_request_cost, s3_requests

        counts = getattr(self.minio, "request_counts", None) if backend == PEER_BACKEND else None
        before = counts() if counts else {}
        t0 = time.perf_counter()
        with ThreadPoolExecutor(self.cfg.concurrent, thread_name_prefix="asgard-day") as pool:
            futures = [pool.submit(run_one, self.instance, rnd, variant, app, backend, sizes, self.prices,
                                   self.cfg.max_concurrent, None, self.network, client) for app, sizes in self.cfg.mix]
            rows = [f.result()[0] for f in futures]
        e2e = time.perf_counter() - t0 + reconf_s
        for r in rows:  # where each run's steps ran: one host, or the hosts' workers that took them
            r["hosts"] = (sorted(set(step_workers(self.instance, r["run_id"]).values()))
                          if self.network == HOSTS_NETWORK and r["run_id"] else ["this host"])
            r["edges"] = edge_decisions(self.instance, r["run_id"]) if r["run_id"] and backend != PEER_BACKEND else {}
        functions = sum(r["function_usd"] for r in rows)
        if counts:  # the day's requests, counted once around all of its runs
            puts, gets = s3_requests(before, counts())
            storage = s3_request_cost(puts, gets, self.prices)
        else:  # one instance for the whole day, shared by the runs in flight
            storage = instance_cost(self.hourly, e2e)
        cost = functions + storage
        failed = [f"{r['app']}: {r['error'] or 'run failed'}" for r in rows if not r["success"]]
        unpurged = [f"{r['app']} {r['run_id']}: {r['purge_error']}" for r in rows if r.get("purge_error")]
        shares = [r["store_share_pct"] for r in rows if r.get("store_share_pct") is not None]
        return {"round": rnd, "variant": variant, "backend": backend, "client": client or {}, "e2e_s": e2e,
                "reconfiguration_s": reconf_s,
                "cost_usd": cost, "storage_usd": storage, "perf_per_dollar": perf_per_dollar(e2e, cost),
                "failed_runs": len(failed), "failures": failed, "purge_errors": unpurged,
                "store_share_pct": statistics.median(shares) if shares else None,
                "runs": [{k: r[k] for k in ("app", "scale", "fanout", "run_id", "success", "e2e_s", "store_share_pct",
                                            "bytes_written", "write_s_total", "read_s_total", "compute_s_total",
                                            "hosts", "edges")}
                         for r in rows]}

    def probe(self, client: dict) -> dict:
        """The day's mix with ``client``'s fields, as a round runs it (its edges and its load: a codec's
        cost depends on the load it meets, a lever's worth on every pipeline of the day)."""
        return self.run(-1, "search", "cassandra", client)

    def search_static(self) -> tuple[dict, list[dict]]:
        return search_static(self.probe, self.cfg.search_probes, self.say,
                             static_levers(self.store.replication_factor or 1))


def step_workers(instance, run_id: str) -> dict[str, str]:
    """Each step of a run on dagster-celery's executor and the worker that took it (the executor's
    engine event names it: ``Celery worker`` = ``dagster@<host>``)."""
    import dagster as dg

    found = {}
    for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        metadata = e.dagster_event.event_specific_data.metadata or {}
        if e.step_key and "Celery worker" in metadata:
            found[e.step_key] = getattr(metadata["Celery worker"], "value", metadata["Celery worker"])
    return found


def edge_decisions(instance, run_id: str) -> dict[str, dict]:
    """Each output's codec, placement and replicas as its IO manager chose them, by op and output (a
    mapped op's instances counted together), and what the edge cost: ``{"op.output": {"codec": {name:
    n}, "placement": {name: n}, "replicas": {count: n}, "reasons": [one reason of each], "bytes": raw
    bytes written, "write_s": its puts' seconds, "read_s": its readers' loads' seconds}}``, from the
    outputs' and inputs' metadata."""
    import dagster as dg

    edges: dict[str, dict] = {}

    def edge(step_key: str, output: str) -> dict:
        return edges.setdefault(f"{step_key.split('[', 1)[0]}.{output}", {
            "codec": {}, "placement": {}, "replicas": {}, "reasons": [], "bytes": 0, "write_s": 0.0, "read_s": 0.0})

    for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.HANDLED_OUTPUT):
        data = e.dagster_event.event_specific_data
        metadata = {k: getattr(v, "value", v) for k, v in (data.metadata or {}).items()}
        out = edge(e.step_key, data.output_name)
        for lever, default in (("codec", "none"), ("placement", "ring"), ("replicas", "store")):
            choice = metadata.get(lever, default)
            out[lever][choice] = out[lever].get(choice, 0) + 1
            reason = metadata.get(f"{lever}_reason")
            if reason and not any(r.startswith(f"{lever} {choice}:") for r in out["reasons"]):
                out["reasons"].append(f"{lever} {choice}: {reason}")
        out["bytes"] += int(metadata.get("bytes") or 0)
        out["write_s"] += float(metadata.get("write_seconds") or 0.0)
    for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.LOADED_INPUT):
        data = e.dagster_event.event_specific_data
        if data.upstream_step_key and data.upstream_output_name:
            seconds = getattr((data.metadata or {}).get("read_seconds"), "value", None)
            edge(data.upstream_step_key, data.upstream_output_name)["read_s"] += float(seconds or 0.0)
    return edges


def edge_costs(days: list[dict]) -> dict[str, dict[str, dict]]:
    """Per edge (``app:op.output``) and Cassandra variant, over the day's runs of that app: the seconds
    its puts and its readers' loads took a run (mean), and the codec most of its values got: where
    one variant's edges gain or lose against another's."""
    found: dict[str, dict[str, dict]] = {}
    for d in days:
        for run in d["runs"]:
            for name, e in (run.get("edges") or {}).items():
                cell = found.setdefault(f"{run['app']}:{name}", {}).setdefault(
                    d["variant"], {"runs": 0, "write_s": 0.0, "read_s": 0.0, "codecs": {}})
                cell["runs"] += 1
                cell["write_s"] += e["write_s"]
                cell["read_s"] += e["read_s"]
                for codec, n in e["codec"].items():
                    cell["codecs"][codec] = cell["codecs"].get(codec, 0) + n
    return {edge: {v: {"write_s": round(c["write_s"] / c["runs"], 3), "read_s": round(c["read_s"] / c["runs"], 3),
                       "codec": max(c["codecs"], key=c["codecs"].get) if c["codecs"] else None}
                   for v, c in by_variant.items()} for edge, by_variant in sorted(found.items())}


def run_setting(cfg: DayConfig, network: str, prices, say: Callable[[str], None]) -> dict[str, Any]:
    """The day's four variants in one setting, interleaved; its summary (and every day's record)."""
    if network == HOSTS_NETWORK:
        hosts = HostsForDay(say, link_mbit=cfg.host_link_mbit)
        try:
            return _run_setting(cfg, network, prices, say, hosts.up())
        finally:
            hosts.down()
    servers = ProfileServersForDay(network, say)
    deployment = servers.up()
    try:
        return _run_setting(cfg, network, prices, say, deployment.profile.description)
    finally:
        if network != "loopback":  # the profile's own node: its disk back now (a purge leaves tombstones
            # until a compaction drops them; three cloud days left 24 GB of them here). Loopback's is the user's
            from asgard.resources.stores.cql import CassandraObjectStore

            try:
                empty_tables(CassandraObjectStore(**deployment.store_kwargs("cassandra")))
            except Exception as exc:  # said, not raised: a day that failed keeps its own error
                say(f"[{network}] could not empty the node's tables ({type(exc).__name__}: {exc}); "
                    f"to give the disk back: `asgard stores down --network {network}`, then remove "
                    f"$ASGARD_HOME/run/net/{network}/cassandra/data")
        servers.down()


def _run_setting(cfg: DayConfig, network: str, prices, say: Callable[[str], None], description: str
                 ) -> dict[str, Any]:
    import dagster as dg

    from asgard.pipelines.jobs import make_job
    from asgard.tuner.dataset import DEFAULT_MODEL, Dataset
    from asgard.tuner.anova import key_knobs
    from asgard.tuner.knobs import CLIENT, KNOBS, Configuration
    from asgard.resources.network import Deployment
    from asgard.tuner.retune import applied_config_file, current_configuration
    from asgard.tuner.surrogates import Surrogate
    from asgard.tuner.validate import recommend

    from .apps_run import run_one
    from .dynamic import AsgardLoop, NodeState

    on_hosts = network == HOSTS_NETWORK
    t_start = time.time()
    days: list[dict] = []
    decisions: list[dict] = []
    warm_up: list[dict] = []
    # the retune job reconfigures the local node (127.0.0.1) as the project runs it, and a profile's
    # own node from outside (keyspace and table options by CQL, as on a user's cluster)
    server_retune = not on_hosts
    # the retune job's record of what it applied to this setting's node (a file per ring; none on the hosts)
    state_file = applied_config_file(Deployment(network).host("cassandra")) if server_retune else None
    saved_state = state_file.read_text() if state_file is not None and state_file.exists() else None
    with tempfile.TemporaryDirectory(prefix="asgard-bench-day-") as tmp, \
            dg.DagsterInstance.local_temp(tempdir=tmp) as instance:
        day = Day(cfg, network, instance, prices, say)
        initial_overrides = day.node.overrides() if day.node else None
        # the table's options, put back at the end
        found = NodeState(day.store.session, "asgard", "objects") if day.node else None
        try:
            # Cassandra at its defaults, on the table as the store creates it (the knob space's own default
            # is Cassandra's stock table: LZ4 and gc_grace 10 days, which no CassandraIOManager() user has)
            base = Configuration().replace(**store_table_knobs())
            day.switch(base)
            apps = list(dict.fromkeys(app for app, _ in cfg.mix))
            # one untimed run of each pipeline: the forkserver, the history the topology analyzer reads,
            # and, on the loop's per-edge fields, the throughput record it chooses from (as best_static
            # learns from its untimed probes)
            warm: dict[str, float] = {}
            warm_client = dict(LOOP_FIELDS)
            for app, sizes in cfg.mix:
                if app not in warm:
                    say(f"[{network}] warm-up: {app}")
                    row, _, _ = run_one(instance, -1, "warmup", app, "cassandra", sizes, prices, cfg.max_concurrent,
                                        None, network, warm_client)
                    warm[app] = row["e2e_s"]
                    warm_up.append({"app": app, "e2e_s": round(row["e2e_s"], 2), "client": warm_client,
                                    "edges": edge_decisions(instance, row["run_id"]) if row["run_id"] else {}})
            from asgard.tuner.topology import heaviest
            from asgard_dagster.topology import analyze_with_history

            model = Surrogate.load(cfg.model_path or DEFAULT_MODEL)
            jobs = {app: make_job(app, "cassandra", cfg.max_concurrent, network=network) for app in apps}
            # the peer's jobs made once too, here, in one thread: its first day's runs, making them two threads
            # at once, failed one with "No module named 'dagster_aws'" (the cloud day of 2026-11-29)
            for app in apps:
                make_job(app, PEER_BACKEND, cfg.max_concurrent, network=network)
            server_knobs = [k for k in key_knobs(model) if KNOBS[k].apply != CLIENT]
            static_server = base  # on the hosts the ring keeps its configuration
            if not on_hosts:  # the searched knobs over the base, as the retune job changes only those
                # for the mix's heaviest job, as the loop's retune plans for the upcoming runs
                heaviest_job = heaviest((app, analyze_with_history(jobs[app], instance)) for app in apps)
                if heaviest_job is None:
                    raise ValueError(f"--mix: none of {apps} passes data between its steps; nothing to tune")
                recommended, _ = recommend(model, heaviest_job[1].workload(), server_knobs)
                static_server = base.replace(**{k: recommended[k] for k in server_knobs})
            say(f"[{network}] best_static: searching the levers ({cfg.search_probes} probe runs at most)")
            day.switch(static_server)
            t_search = time.perf_counter()
            static_client, trials = day.search_static()
            search_s = time.perf_counter() - t_search
            server_text = "the ring as it is" if on_hosts else static_server.non_default() or "the default server"
            say(f"[{network}] best_static: {static_client} on {server_text}")
            loop = None
            if server_retune:
                state_file.unlink(missing_ok=True)  # the loop starts on the default
                lookahead = {app: sum(warm.values()) / cfg.concurrent for app in apps}
                loop = AsgardLoop(instance, jobs, Dataset.load().median_restart_seconds(), lookahead, cfg.model_path,
                                  **({} if network == "loopback" else {"connection": day.connection(), "node_index": None}))
            loop_config = base
            for rnd in range(cfg.rounds):
                for variant in variant_order(rnd):
                    reconf_s = 0.0
                    if variant == "peer":
                        backend, client = PEER_BACKEND, None
                    elif variant == "default":
                        backend, client = "cassandra", None
                        day.switch(base)
                    elif variant == "best_static":
                        backend, client = "cassandra", static_client
                        day.switch(static_server)
                    else:
                        backend, client = "cassandra", dict(LOOP_FIELDS)
                        day.switch(loop_config)
                        if loop is not None:
                            record = loop.before_burst(apps[0], len(cfg.mix), mix=[a for a, _ in cfg.mix])
                            if network == "loopback":
                                loop_config = current_configuration()  # what the retune job left in force
                            elif record.get("in_force") is not None:  # read back from the node after the change
                                loop_config = Configuration(record["in_force"])
                            day.nodes.current = loop_config
                            reconf_s = record["seconds"] if record["reconfigured"] else 0.0
                            decisions.append({**record, "round": rnd})
                            say(f"[{network}] loop before round {rnd + 1}: {record.get('reason', record['sensor'])}")
                    record = day.run(rnd, variant, backend, client, reconf_s)
                    days.append(record)
                    say(f"[{network}] round {rnd + 1}/{cfg.rounds} {variant:<12} day E2E {record['e2e_s']:.1f}s"
                        + (f", {record['failed_runs']} failed: {record['failures']}" if record["failed_runs"] else "")
                        + (f", purge failed: {record['purge_errors']}" if record["purge_errors"] else ""))
        finally:
            say(f"[{network}] restoring the node")
            try:
                if not on_hosts and day.node.overrides() != initial_overrides:
                    from asgard.tuner.knob_apply import wait_store_ready

                    day.node.restart_with(initial_overrides, replace=True)
                    wait_store_ready(day.store)
                if found is not None:
                    found.restore(day.store.session)
            finally:
                if saved_state is not None:
                    state_file.write_text(saved_state)
                elif state_file is not None:
                    state_file.unlink(missing_ok=True)
    variants = summarize_variants(days)
    variants["best_static"]["config"] = {"io_manager": static_client,
                                         "server": {k: static_server[k] for k in base.diff(static_server)}}
    variants["loop"]["config"] = {"io_manager": dict(LOOP_FIELDS),
                                  "server": "retune job per round" if server_retune else
                                  "the ring's (its hosts' agents reconfigure it)"}
    # A/A: the default's day, same configuration every round
    noise = cv_pct([d["e2e_s"] for d in days if d["variant"] == "default"])
    default_runs = [r["store_share_pct"] for d in days if d["variant"] == "default" for r in d["runs"]
                    if r["store_share_pct"] is not None]
    return {
        "variants": variants, "noise_pct": round(noise, 2) if noise is not None else None,
        "store_share_pct": round(median(default_runs), 1) if default_runs else None,
        "failed_runs": sum(d["failed_runs"] for d in days),
        "runs": sum(len(d["runs"]) for d in days),
        "runs_on_several_hosts": sum(len(r["hosts"]) > 1 for d in days for r in d["runs"]),
        "ratios": ratios(variants),
        "store_share_by_app": {app: median([r["store_share_pct"] for d in days if d["variant"] == "default"
                                             for r in d["runs"] if r["app"] == app]) for app, _ in cfg.mix},
        "search": {"trials": trials, "seconds": round(search_s, 1)},
        "decisions": decisions, "warm_up": warm_up, "edge_costs": edge_costs(days), "days": days,
        "seconds": round(time.time() - t_start, 1),
        "network": {"profile": network, "description": description},
    }


def run_day(cfg: DayConfig, on_event: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every selected setting, one after the other; the result (also written to ``out/day.json``)."""
    cfg.check()
    say = on_event or (lambda _: None)
    from .cost import Prices

    prices = Prices.load(cfg.prices)
    settings: dict[str, Any] = {}
    for name in SETTINGS:
        if name not in cfg.settings:
            settings[name] = {"run": False, "reason": "not selected (--settings)"}
        else:
            settings[name] = {"run": True, **(run_setting(cfg, name, prices, say) if cfg.engine == "dagster" else
                                              _run_setting_airflow(cfg, name, prices, say))}
    out = Path(cfg.out) if cfg.out else Path("reports/bench-day") / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    result = {"engine": cfg.engine, "host_link_mbit": cfg.host_link_mbit, "settings": settings, "mix": [{"app": a, **s} for a, s in cfg.mix], "concurrent": cfg.concurrent,
              "rounds": cfg.rounds, "prices": prices.raw.get("function", {}).get("source"),
              "pricing": "function GB-s (AWS Lambda) + the Cassandra instance (EC2 i3.large) for the day's E2E, "
                         "shared by its concurrent runs; S3 by its requests (prices.yaml, AWS list prices Nov 2022)",
              "out": str(out)}
    (out / "day.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "day.txt").write_text(table(result) + "\n")
    return result


def _run_setting_airflow(cfg: DayConfig, network: str, prices, say: Callable[[str], None]) -> dict[str, Any]:
    # imported for an Airflow day only: importing Airflow puts a handler on the root logger that prints
    # every library's INFO records to stdout (a Dagster day's --json carried alembic's lines before it)
    from .day_airflow import run_setting_airflow

    return run_setting_airflow(cfg, network, prices, say)


def summary_json(result: dict[str, Any]) -> dict[str, Any]:
    """The ``--json`` object: per setting its variants' E2E and Perf/$, noise, store share, failures."""
    out: dict[str, Any] = {}
    for name, s in result["settings"].items():
        if not s.get("run"):
            out[name] = {"run": False, "reason": s["reason"]}
            continue
        out[name] = {"variants": {v: {"e2e_s": d["e2e_s"], "perf_per_dollar": d["perf_per_dollar"],
                                      "failed_runs": d["failed_runs"]} for v, d in s["variants"].items()},
                     "noise_pct": s["noise_pct"], "store_share_pct": s["store_share_pct"],
                     "failed_runs": s["failed_runs"], "ratios": s["ratios"],
                     "runs": s["runs"], "runs_on_several_hosts": s["runs_on_several_hosts"]}
    return {"engine": result.get("engine", "dagster"), "settings": out, "mix": result["mix"], "concurrent": result["concurrent"], "rounds": result["rounds"],
            "out": result["out"]}


def table(result: dict[str, Any]) -> str:
    mix = ", ".join(f"{m['app']}" + "".join(f" {k}={v}" for k, v in m.items() if k != "app") for m in result["mix"])
    lines = [f"day ({result.get('engine', 'dagster')}): {mix}; {result['concurrent']} runs at once; "
             f"{result['rounds']} rounds, variants interleaved",
             f"pricing: {result['pricing']}"]
    for name, s in result["settings"].items():
        lines.append("")
        if not s.get("run"):
            lines.append(f"[{name}] {s['reason']}")
            continue
        lines.append(f"[{name}] {s['network']['description'].strip()[:100]}")
        lines.append(f"{'variant':<12}{'day E2E s':>10}{'  [min, max]':<18}{'Perf/$':>9}{'store %':>9}{'failed':>8}"
                     f"{'reconf s':>10}  config")
        for v in VARIANTS:
            d = s["variants"][v]
            rng = d["e2e_s_range"] or [0, 0]
            share = f"{d['store_share_pct']:.0f}" if d["store_share_pct"] is not None else "-"
            lines.append(f"{v:<12}{d['e2e_s'] or 0:>10.1f}  [{rng[0]:.1f}, {rng[1]:.1f}]".ljust(40)
                         + f"{d['perf_per_dollar'] or 0:>9.2f}{share:>9}{d['failed_runs']:>8}{d['reconfiguration_s']:>10.1f}"
                         f"  {json.dumps(d.get('config', ''), default=str) if d.get('config') else ''}")
        r = s["ratios"]
        noise = f"{s['noise_pct']:.1f}%" if s["noise_pct"] is not None else "n/a (one round)"
        lines.append(f"noise floor: the default's day E2E varies {noise} round to round (A/A)")
        lines.append(f"runs: {s['runs']}, {s['runs_on_several_hosts']} with steps on several hosts")
        lines.append(f"loop over best_static, E2E: {r['loop_over_best_static_e2e']}x; over the peer: E2E "
                     f"{r['loop_over_peer_e2e']}x, Perf/$ {r['loop_over_peer_perf_per_dollar']}x; "
                     f"default over the peer, E2E: {r['default_over_peer_e2e']}x")
        if s["store_share_pct"] is None:
            lines.append(f"store share of the steps' time: {s.get('store_share_note', 'not measured')}")
        else:
            lines.append(f"store share of the steps' time (default): {s['store_share_pct']}% "
                         + "; ".join(f"{a} {p:.0f}%" for a, p in s["store_share_by_app"].items() if p is not None))
        for t in s["search"]["trials"]:
            store = f"store {t['store_s']:.1f}s, " if "store_s" in t else ""  # a record from before the store criterion
            lines.append(f"  search probe {json.dumps(t['client'])}: {store}E2E {t['e2e_s']:.1f}s")
        costs = s.get("edge_costs") or {}
        if costs:
            lines.append("each edge's store seconds a run, write + read (codec most of its values got):")
            for edge, by_variant in costs.items():
                lines.append(f"  {edge:<34}" + "  ".join(
                    f"{v} {c['write_s'] + c['read_s']:.2f} ({c['codec']})" for v, c in by_variant.items()))
        for rec in s["decisions"]:
            lines.append(f"  loop before round {rec['round'] + 1}: {rec['sensor']}; "
                         f"{'reconfigured in %.2fs' % rec['seconds'] if rec['reconfigured'] else 'kept'}"
                         f" -- {rec.get('reason', '')}")
    return "\n".join(lines)
