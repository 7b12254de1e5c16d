"""``asgard bench day --engine airflow``: the day's mix as Airflow DAG runs (:mod:`asgard.pipelines.airflow_apps`),
the same four variants interleaved round by round as the Dagster day (:mod:`asgard_bench.day`):

* ``peer``        -- common-io's stock ``XComObjectStorageBackend`` on MinIO (through the amazon
  provider's s3fs), its threshold the same as ours (64 KiB: smaller values stay in Airflow's table);
  Airflow's serde, which it stores through, has no Arrow serializer, so its ETL runs pass pandas
  DataFrames (the DAG's ``tables`` param; serde writes them as parquet, hex in JSON);
* ``default``     -- ``asgard_airflow.CassandraXComBackend`` with its default ``[asgard]`` settings;
* ``best_static`` -- one value of each per-edge lever (``[asgard] codec``, ``placement``,
  ``chunk_size_bytes``, ``concurrency``) for every value pushed, from the same coordinate search;
* ``loop``        -- the levers decided per value (``codec``, ``placement`` and ``replicas = auto``).

Each run is ``airflow dags test`` (its tasks one after the other, in one process) in an
``AIRFLOW_HOME`` of its slot: ``concurrent`` slots, each with its own SQLite database, so runs at
once never wait on one file's lock. The server's knobs stay at the node's configuration for every
variant (the retune DAG is not part of this day), so best_static and the loop differ from the
default by the per-edge levers only.

On ``hosts3`` (:class:`AirflowHostsDay`) each run is ``airflow dags test --use-executor`` on the
deployment's database, its tasks on the hosts' Airflow celery workers, which restart on each
variant's settings before its day (outside its E2E).

A day's E2E is its first DAG run's start to its last run's end, from the runs' own records (the
CLI's start-up and DAG parsing are outside it); the cost and Perf/$ as the Dagster day's. The
store's share of the tasks' time: our backend's pushes (each reference's ``write_s``: encoding and
writing) and pulls (the task log's line per value read, values of 256 KiB and over, in the run's
output) over the tasks' seconds; not measured for the stock peer.
"""
from __future__ import annotations

import json
import os
import queue
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from asgard.pipelines.airflow_apps import TABLE_APPS

from .apps_airflow import DAG_RUN_FINISHED, make_airflow_home, measure
from .apps_run import store_share_pct
from .apps_summary import price_row
from .xcom import PEERS, stock_peer_settings
from .day_plan import (LOOP_FIELDS, PEER_BACKEND, DayConfig, HostsForDay, ProfileServersForDay, cv_pct, empty_tables,
                       median, ratios, search_static, static_levers, summarize_variants, variant_order)

ENGINE = "airflow"
KEYSPACE = "asgard_bench_day_airflow"
STOCK_XCOM = PEERS["object_storage"]
#: ours and the peer's: values up to this many bytes (as JSON) stay in Airflow's table
THRESHOLD_BYTES = 64 * 1024
PEER_CONN_ID = "asgard_bench_day_minio"
PEER_BUCKET = "asgard"
PEER_PREFIX = "bench-day-airflow"
SETTINGS = ("loopback", "cloud", "hosts3")
#: the peer's runs pass DataFrames where ours pass Arrow tables: the ETL's tables param
PEER_CONF = {app: {"tables": "pandas"} for app in TABLE_APPS}
#: the XCom backend's task log line per pull of a stored value (asgard_airflow.xcom._log_read)
READ_LINE = re.compile(r"Read .*?: \d+ bytes in ([0-9.]+) s")


class AirflowDayError(ValueError):
    """A day the Airflow engine cannot run (a setting it does not cover)."""


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


class AirflowDay:
    """One setting's servers and ``concurrent`` Airflow homes, running the mix as a variant would."""

    #: flags of `airflow dags test` (on the hosts: --use-executor, the CeleryExecutor)
    dags_test_flags: tuple[str, ...] = ()

    def __init__(self, cfg: DayConfig, network: str, prices, say: Callable[[str], None], tmp: Path):
        from asgard.resources.minio.server import local_credentials
        from asgard.resources.network import Deployment

        from .apps_servers import server_for

        self.cfg, self.network, self.prices, self.say = cfg, network, prices, say
        self.replication_factor = 1  # the profile's one node
        self.deployment = Deployment(network)
        self.minio = server_for("s3", network)
        self.minio.ensure_bucket(PEER_BUCKET)
        self.s3_endpoint = self.deployment.store_kwargs("s3").get("endpoint_url") or self.minio.endpoint
        self.s3_keys = local_credentials()
        self.hourly = prices.instances[prices.storage_kind("cassandra")[1]]
        cassandra = self.deployment.store_kwargs("cassandra")
        self.store_env = {"AIRFLOW__ASGARD__KEYSPACE": KEYSPACE,
                          "AIRFLOW__ASGARD__THRESHOLD_BYTES": str(THRESHOLD_BYTES),
                          "AIRFLOW__ASGARD__CONTACT_POINTS": ",".join(cassandra.get("contact_points", ["127.0.0.1"])),
                          "AIRFLOW__ASGARD__PORT": str(cassandra.get("port", 9042))}
        self.homes: queue.Queue = queue.Queue()
        for slot in range(cfg.concurrent):  # `airflow db migrate` each: about 10 s
            self.homes.put(make_airflow_home(tmp / f"slot{slot}", 4))

    def variant_env(self, variant: str, client: dict | None) -> dict[str, str]:
        """The XCom backend of ``variant`` and the levers of ``client``, as Airflow settings."""
        env = {}
        if variant == "peer":
            env.update(stock_peer_settings(self.s3_endpoint, *self.s3_keys, PEER_CONN_ID, f"{PEER_BUCKET}/{PEER_PREFIX}",
                                           THRESHOLD_BYTES), AIRFLOW__CORE__XCOM_BACKEND=STOCK_XCOM)
        for lever, value in (client or {}).items():  # [asgard] codec, placement, chunk_size_bytes, concurrency
            env[f"AIRFLOW__ASGARD__{lever.upper()}"] = str(value)
        return env

    def environment(self, home: dict, variant: str, client: dict | None) -> dict[str, str]:
        """A run's environment: its home's, the store's, and :meth:`variant_env`."""
        return {**home["env"], **self.store_env, **self.variant_env(variant, client)}

    def prepare(self, variant: str, client: dict | None) -> None:
        """Before a day or a probe of ``variant``: here nothing (each run's process reads its settings)."""

    def restore(self) -> None:
        """After the day: the bench's keyspace emptied, its disk given back now. A purged run's rows
        stay on disk until a compaction drops them: two settings' days left 44 GB here and filled
        the disk under the next day's ring."""
        from asgard.resources.stores.cql import CassandraObjectStore

        empty_tables(CassandraObjectStore(**self.deployment.store_kwargs("cassandra"), keyspace=KEYSPACE))

    def run_hosts(self, home: dict, dag_id: str, run_id: str) -> list[str]:
        return ["this host"]

    def pulls_seconds(self, output: str, dag_id: str, run_id: str) -> float:
        return read_seconds(output)  # `dags test` prints its tasks' logs

    def run_one(self, rnd: int, variant: str, app: str, sizes: dict, client: dict | None) -> dict[str, Any]:
        """One DAG run of ``app`` in a free slot's home: a row as the Dagster day's, with its start and end."""
        from asgard.pipelines.airflow_apps import dag_id_for

        home = self.homes.get()
        try:
            env = {**self.environment(home, variant, client),
                   "ASGARD_BENCH_REDUCERS": str(int(sizes.get("reducers", 4)))}
            conf = {k: sizes[k] for k in ("fanout", "scale") if k in sizes}
            if variant == "peer":  # what the stock backend can carry (its serde has no Arrow serializer)
                conf.update(PEER_CONF.get(app, {}))
            out = subprocess.run([str(Path(sys.executable).with_name("airflow")), "dags", "test", dag_id_for(app),
                                  "-c", json.dumps(conf), *self.dags_test_flags], env=env, capture_output=True,
                                 text=True, timeout=1800)
            text = out.stdout + out.stderr
            found = DAG_RUN_FINISHED.search(text)
            run_id = found.group(1) if found else ""
            m = measure(home["db"], dag_id_for(app), run_id) if run_id else {
                "status": "error", "e2e_s": float("nan"), "steps": [], "writes": [], "start": None, "end": None}
            hosts = self.run_hosts(home, dag_id_for(app), run_id) if run_id else []
            if run_id and variant != "peer":  # ephemeral data: drop the run's values (its slot waits, not the day)
                subprocess.run([sys.executable, "-m", "asgard.cli", "airflow", "purge", "--dag-id", dag_id_for(app),
                                "--run-id", run_id], env=env, capture_output=True, timeout=300)
        finally:
            self.homes.put(home)
        steps = m["steps"]
        step_s = sum(s["seconds"] for s in steps)
        # our backend's pushes (their references' write_s) and pulls (the tasks' log lines); the stock one's: not timed
        write_s = sum(w["write_s"] or 0.0 for w in m["writes"]) if variant != "peer" else None
        read_s = self.pulls_seconds(text, dag_id_for(app), run_id) if variant != "peer" and run_id else None
        io_s = write_s + read_s if write_s is not None and read_s is not None else None
        error = "" if out.returncode == 0 and run_id and m["status"] == "success" else text[-500:]
        row = {"round": rnd, "app": app, "backend": PEER_BACKEND if variant == "peer" else "cassandra",
               "scale": sizes.get("scale", ""), "fanout": sizes.get("fanout", ""), "run_id": run_id,
               "success": not error, "error": error, "e2e_s": m["e2e_s"], "start": m["start"], "end": m["end"],
               "invocations": len(steps), "step_s_total": step_s,
               "compute_s_total": step_s - io_s if io_s is not None else step_s, "write_s_total": write_s,
               "read_s_total": read_s, "bytes_written": sum(w["bytes"] for w in m["writes"]),
               "store_share_pct": store_share_pct(step_s - io_s, io_s) if io_s is not None else None,
               "hosts": hosts,
               "edges": {f"{w['step']}.{w['output']}": {"codec": w["codec"], "placement": w["placement"] or "ring",
                                                        "replicas": w["replicas"] or "store"}
                         for w in m["writes"] if w["stored"]}}
        return price_row(row, self.prices)

    def run(self, rnd: int, variant: str, client: dict | None) -> dict[str, Any]:
        """The mix once, ``concurrent`` runs at a time; the day's record as the Dagster day's."""
        from .cost import instance_cost, perf_per_dollar, s3_request_cost, s3_requests

        self.prepare(variant, client)
        before = self.minio.request_counts() if variant == "peer" else {}
        with ThreadPoolExecutor(self.cfg.concurrent, thread_name_prefix="asgard-day-airflow") as pool:
            rows = list(pool.map(lambda entry: self.run_one(rnd, variant, entry[0], entry[1], client), self.cfg.mix))
        starts = [_stamp(r["start"]) for r in rows if r["start"]]
        ends = [_stamp(r["end"]) for r in rows if r["end"]]
        e2e = max(ends) - min(starts) if starts and ends else float("nan")
        functions = sum(r["function_usd"] for r in rows)
        if variant == "peer":  # the day's requests, counted once around all of its runs
            storage = s3_request_cost(*s3_requests(before, self.minio.request_counts()), self.prices)
            self.clear_peer()
        else:  # one instance for the whole day, shared by the runs in flight
            storage = instance_cost(self.hourly, e2e)
        cost = functions + storage
        failed = [f"{r['app']}: {r['error'] or 'run failed'}" for r in rows if not r["success"]]
        return {"round": rnd, "variant": variant, "backend": rows[0]["backend"], "client": client or {},
                "e2e_s": e2e, "reconfiguration_s": 0.0, "cost_usd": cost, "storage_usd": storage,
                "perf_per_dollar": perf_per_dollar(e2e, cost), "failed_runs": len(failed), "failures": failed,
                "store_share_pct": median([r["store_share_pct"] for r in rows]),
                "runs": [{k: r[k] for k in ("app", "scale", "fanout", "run_id", "success", "e2e_s", "store_share_pct",
                                            "bytes_written", "write_s_total", "read_s_total", "compute_s_total",
                                            "hosts", "edges")} for r in rows]}

    def probe(self, client: dict) -> dict:
        """The day's mix with ``client``'s levers, as a round runs it."""
        return self.run(-1, "search", client)

    def clear_peer(self) -> None:
        """What the stock backend stored (it never deletes): removed after its day, outside its E2E."""
        from asgard.resources.stores.s3 import s3_client

        client = s3_client(self.s3_endpoint, "us-east-1", *self.s3_keys, None, 10, 10, 60)
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=PEER_BUCKET, Prefix=f"{PEER_PREFIX}/"):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=PEER_BUCKET, Delete={"Objects": keys})


class AirflowHostsDay(AirflowDay):
    """The day on the 3 emulated hosts (``asgard hosts up``): each run ``airflow dags test
    --use-executor`` on the deployment's database, its tasks on the hosts' Airflow celery workers,
    its values in the ring (RF 3) or, for the peer, the MinIO on the hosts' bridge. A task's XCom
    backend reads its settings in the worker's process, so the workers restart on a variant's
    settings before its day (outside the day's E2E); the ring's three instances are charged."""

    dags_test_flags = ("--use-executor",)

    def __init__(self, cfg: DayConfig, prices, say: Callable[[str], None]):
        from asgard.pipelines.hosts import REPLICATION_FACTOR
        from asgard.resources.paths import REPO_ROOT
        from asgard.resources.stores.cql import CassandraObjectStore
        from asgard.resources.workers.deployment import DEFAULT_AIRFLOW_DAGS, RING_KEYSPACE, EmulatedDeployment

        self.cfg, self.network, self.prices, self.say = cfg, "hosts3", prices, say
        self.replication_factor = REPLICATION_FACTOR
        self.hosts = EmulatedDeployment()
        if Path(self.hosts.airflow_dags) != DEFAULT_AIRFLOW_DAGS.resolve():
            raise AirflowDayError(f"the hosts' Airflow workers run the DAGs of {self.hosts.airflow_dags}, not the "
                                  f"apps' ({DEFAULT_AIRFLOW_DAGS}): `asgard hosts down`, then run the day again")
        odd = [a for a, sizes in cfg.mix if "reducers" in sizes and sizes["reducers"] != 4]
        if odd:
            raise AirflowDayError(f"on the hosts word count has the apps' DAG file's 4 reducers; drop reducers= from {odd}")
        self.minio = self.hosts.object_store()
        self.minio.ensure_bucket(PEER_BUCKET)
        self.s3_endpoint, self.s3_keys = self.minio.endpoint, (self.minio.access_key, self.minio.secret_key)
        self.hourly = prices.instances[prices.storage_kind("cassandra")[1]] * REPLICATION_FACTOR
        self.store_env = {"AIRFLOW__ASGARD__THRESHOLD_BYTES": str(THRESHOLD_BYTES)}  # the ring's: the deployment's
        # made once from here: first tasks on three hosts creating them at once race
        CassandraObjectStore(**self.hosts.ring().client_options(), keyspace=RING_KEYSPACE,
                             replication_factor=REPLICATION_FACTOR).ensure_schema(single_replica=True)
        self.hosts.airflow_api_server().start()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")},
               **self.hosts.airflow_coordinator_environment(), "PYTHONPATH": str(REPO_ROOT)}
        self.db = self.hosts.state_dir() / "airflow" / "airflow.db"
        self.homes = queue.Queue()
        for _ in range(cfg.concurrent):  # one database: every run's coordinator on it
            self.homes.put({"env": env, "db": self.db})
        self.worker_env: dict | None = None

    def prepare(self, variant: str, client: dict | None) -> None:
        from asgard.resources.process import start_all, stop_all

        overrides = self.variant_env(variant, client)
        if overrides == self.worker_env:
            return
        t0 = time.perf_counter()
        workers = self.hosts.airflow_workers(overrides)
        stop_all(workers)
        start_all(workers)
        self.worker_env = overrides
        self.say(f"[hosts3/airflow] the workers on {variant}'s settings in {time.perf_counter() - t0:.1f}s")

    def restore(self) -> None:
        """The workers back on the deployment's own settings."""
        self.prepare("default", None)

    def run_hosts(self, home: dict, dag_id: str, run_id: str) -> list[str]:
        """The hosts (their addresses: each task instance's ``hostname``) that ran the run's tasks."""
        with sqlite3.connect(home["db"]) as con:
            return sorted({h for (h,) in con.execute("SELECT hostname FROM task_instance WHERE dag_id = ? AND "
                                                      "run_id = ?", (dag_id, run_id)) if h})

    def pulls_seconds(self, output: str, dag_id: str, run_id: str) -> float:
        """From the task logs on each host's root (a worker's tasks log there, not to the coordinator)."""
        return sum(read_seconds(log.read_text(errors="replace"))
                   for host in self.hosts.hosts.hosts
                   for log in (host.root / "airflow" / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}").rglob("*.log"))


def read_seconds(output: str) -> float:
    """The seconds a run's tasks spent reading stored values: our backend's log line per pull
    ("Read ... bytes in X s", at INFO for values of 256 KiB and over) in ``airflow dags test``'s
    output, which carries its tasks' logs."""
    return sum(float(x) for x in READ_LINE.findall(output))


def run_setting_airflow(cfg: DayConfig, network: str, prices, say: Callable[[str], None]) -> dict[str, Any]:
    """The day's four variants on Airflow in one setting, interleaved; its summary (and every day's record)."""
    if network not in SETTINGS:
        raise AirflowDayError(f"--engine airflow runs the settings {', '.join(SETTINGS)}; drop {network}")
    if network == "hosts3":
        from asgard.resources.workers.deployment import DEFAULT_AIRFLOW_DAGS

        hosts = HostsForDay(say, airflow_dags=DEFAULT_AIRFLOW_DAGS, link_mbit=cfg.host_link_mbit)
        try:
            description = hosts.up()
            return _run_setting(cfg, network, say, description, lambda tmp: AirflowHostsDay(cfg, prices, say))
        finally:
            hosts.down()
    servers = ProfileServersForDay(network, say)
    try:
        return _run_setting(cfg, network, say, servers.up().profile.description,
                            lambda tmp: AirflowDay(cfg, network, prices, say, tmp))
    finally:
        servers.down()


def _run_setting(cfg: DayConfig, network: str, say: Callable[[str], None], description: str,
                 make_day: Callable[[Path], AirflowDay]) -> dict[str, Any]:
    t_start = time.time()
    days: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="asgard-bench-day-airflow-") as tmp:
        day = make_day(Path(tmp))
        try:
            # untimed: the first run's imports and schema, and on the loop's per-edge fields the
            # throughput record it chooses from (as best_static learns from its untimed probes)
            day.prepare("loop", dict(LOOP_FIELDS))
            for app, sizes in dict((a, s) for a, s in cfg.mix).items():
                say(f"[{network}/airflow] warm-up: {app}")
                day.run_one(-1, "loop", app, sizes, dict(LOOP_FIELDS))
            say(f"[{network}/airflow] best_static: searching the levers ({cfg.search_probes} probe runs at most)")
            t_search = time.perf_counter()
            static_client, trials = search_static(day.probe, cfg.search_probes, say,
                                                  static_levers(day.replication_factor))
            search_s = time.perf_counter() - t_search
            say(f"[{network}/airflow] best_static: {static_client}")
            clients = {"peer": None, "default": None, "best_static": static_client, "loop": dict(LOOP_FIELDS)}
            for rnd in range(cfg.rounds):
                for variant in variant_order(rnd):
                    record = day.run(rnd, variant, clients[variant])
                    days.append(record)
                    say(f"[{network}/airflow] round {rnd + 1}/{cfg.rounds} {variant:<12} day E2E {record['e2e_s']:.1f}s"
                        + (f", {record['failed_runs']} failed: {record['failures']}" if record["failed_runs"] else ""))
        finally:
            day.restore()
    variants = summarize_variants(days)
    variants["peer"]["config"] = {"xcom_backend": STOCK_XCOM, "threshold_bytes": THRESHOLD_BYTES}
    variants["best_static"]["config"] = {"asgard": static_client, "server": "the node's"}
    variants["loop"]["config"] = {"asgard": dict(LOOP_FIELDS), "server": "the node's (no retune in this day)"}
    noise = cv_pct([d["e2e_s"] for d in days if d["variant"] == "default"])
    default_runs = [r for d in days if d["variant"] == "default" for r in d["runs"]]
    share = median([r["store_share_pct"] for r in default_runs])
    return {"engine": ENGINE, "variants": variants, "noise_pct": round(noise, 2) if noise is not None else None,
            "store_share_pct": round(share, 1) if share is not None else None,
            "failed_runs": sum(d["failed_runs"] for d in days), "runs": sum(len(d["runs"]) for d in days),
            "runs_on_several_hosts": sum(len(r["hosts"]) > 1 for d in days for r in d["runs"]),
            "ratios": ratios(variants),
            "store_share_by_app": {app: median([r["store_share_pct"] for r in default_runs if r["app"] == app])
                                   for app, _ in cfg.mix},
            "search": {"trials": trials, "seconds": round(search_s, 1)}, "decisions": [], "days": days,
            "seconds": round(time.time() - t_start, 1),
            "network": {"profile": network, "description": description}}

