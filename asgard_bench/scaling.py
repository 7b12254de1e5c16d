"""``asgard bench scaling``: throughput of 1 and N pinned Cassandra instances against one unpinned
instance of the same total heap (ICPE'19: one instance per NUMA node, 98% in-socket and 90%
system scaling efficiency on a 2-socket, 8-node EPYC server).

Configurations, each on a ring of its own started fresh on 127.0.0.<first_index> onwards (own
directories, wiped first and removed at the end), through :class:`CassandraCluster` and so the
NUMA plan and the launch-time check of every binding in /proc:

* ``1 pinned``: one instance bound to one unit, heap ``H``;
* ``N pinned``: N instances, one per unit, heap ``H`` each, one ring (replication factor 1);
* ``unpinned``: one instance, not bound, heap ``N x H``.

A unit is a NUMA node where the machine has several (its CPUs and ``--membind``); on a
one-node machine it is ``cpus // N`` CPUs of node 0 (``--physcpubind``), and the efficiency then
measures CPU pinning and instance count only: every byte is node-local either way. The table says
which.

Load: ``clients`` threads of this process share one :class:`CassandraObjectStore` (the project's
store, one driver session) and put ``object_mib`` MiB objects for ``seconds``, then get them
back for ``seconds``; objects land on the ring's instances by token. The client runs on the same
machine (on a small one it competes with the servers for CPU; it is the same client for every
configuration). Rounds are interleaved (1 pinned, N pinned, unpinned; again), and each figure is
the median over rounds. Server CPU per GB is read from /proc as ``asgard bench io`` does.

Scaling efficiency = ``MB/s(N pinned) / (N x MB/s(1 pinned))``.
"""
from __future__ import annotations

import os
import shutil
import statistics
import threading
import time
import uuid

from asgard.resources.numa import format_cpulist, numa_nodes

from .io import MiB, ServerCpu

#: ICPE'19 (Sec. 7): average scaling efficiency across YCSB workloads, one instance per die
SEED_IN_SOCKET_EFFICIENCY = 0.98
SEED_SYSTEM_EFFICIENCY = 0.90


def topology() -> dict:
    """What the machine offers: nodes with CPUs, CPUs this process may use, the pinning unit."""
    allowed = os.sched_getaffinity(0)
    nodes = [n for n in numa_nodes() if any(c in allowed for c in n.cpus)]
    return {"numa_nodes": len(nodes), "cpus": len(allowed),
            "nodes": {n.node_id: format_cpulist([c for c in n.cpus if c in allowed]) for n in nodes}}


def _configs(instances: int, heap_mib: int, topo: dict) -> list[dict]:
    if topo["numa_nodes"] > 1:
        if instances > topo["numa_nodes"]:
            raise ValueError(f"{instances} instances on {topo['numa_nodes']} NUMA nodes: one per node at most")
        pin = {"pin_numa": True}
    else:
        per = topo["cpus"] // instances
        if per < 1:
            raise ValueError(f"{instances} instances need {instances} CPUs; this process may use {topo['cpus']}")
        pin = {"cpus_per_instance": per}
    return [
        {"config": "1 pinned", "nodes": 1, "heap": f"{heap_mib}M", **pin},
        {"config": f"{instances} pinned", "nodes": instances, "heap": f"{heap_mib}M", **pin},
        {"config": "unpinned", "nodes": 1, "heap": f"{instances * heap_mib}M", "pin_numa": False},
    ]


def _prewrite(store, clients: int, payload: bytes, scope: str) -> list[list]:
    """One object per client, untimed: the get phase reads it when the client wrote nothing in
    its put window (its thread started after the deadline on a starved CPU)."""
    from asgard.resources.stores import ObjectKey

    written: list[list] = []
    for c in range(clients):
        key = ObjectKey.for_run(scope, f"c{c}", "seed")
        store.put(key, payload)
        written.append([key])
    return written


def _phase(store, phase: str, clients: int, seconds: float, payload: bytes, scope: str,
           written: list[list]) -> tuple[list[int], float]:
    """``clients`` threads put (appending to ``written``) or get (cycling over their own
    ``written`` list) until ``seconds`` after the start: (operations per client, elapsed s)."""
    from asgard.resources.stores import ObjectKey

    errors: list[BaseException] = []
    done = [0] * clients

    def run(c: int, deadline: float) -> None:
        try:
            i = 0
            while time.perf_counter() < deadline:
                if phase == "put":
                    key = ObjectKey.for_run(scope, f"c{c}", f"o{i}")
                    store.put(key, payload)
                    written[c].append(key)
                else:
                    back, _ = store.get(written[c][i % len(written[c])])
                    assert len(back) == len(payload)
                i += 1
            done[c] = i
        except BaseException as exc:  # reported after the join: a failed client fails the bench
            errors.append(exc)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(c, t0 + seconds)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return done, elapsed


def _load(store, clients: int, seconds: float, payload: bytes, scope: str) -> tuple[float, float]:
    """Put for ``seconds`` from ``clients`` threads, then get what was put for ``seconds``:
    (put MB/s, get MB/s). A client that completes nothing in a window counts 0 operations."""
    written = _prewrite(store, clients, payload, scope)
    rates = []
    for phase in ("put", "get"):
        done, elapsed = _phase(store, phase, clients, seconds, payload, scope, written)
        rates.append(sum(done) * len(payload) / MiB / elapsed)
    return rates[0], rates[1]


def _measure(config: dict, first_index: int, workdir, clients: int, seconds: float, payload: bytes) -> dict:
    from asgard.resources.cassandra import CassandraCluster
    from asgard.resources.stores.cql import CassandraObjectStore

    spec = {k: v for k, v in config.items() if k != "config"}
    ring = CassandraCluster(first_index=first_index, workdir=workdir / config["config"].replace(" ", "_"), **spec)
    store = None
    try:
        ring.start()
        store = CassandraObjectStore(contact_points=ring.contact_points, keyspace="asgard_scaling",
                                     consistency="ONE")
        # once, before the client threads: concurrent CREATEs through both coordinators of a
        # fresh ring raced here ("keyspace asgard_scaling does not exist" on a prepare)
        store.ensure_schema()
        scope = f"scaling-{uuid.uuid4().hex[:8]}"
        _load(store, clients, min(seconds, 2.0), payload, scope + "-warm")  # JIT and connections, untimed
        store.purge_scope(f"run/{scope}-warm")
        cpu = ServerCpu(ring.nodes)
        c0 = cpu.seconds()
        put, get = _load(store, clients, seconds, payload, scope)
        moved_gb = (put + get) * seconds / 1024
        server_cpu = (cpu.seconds() - c0) / moved_gb if moved_gb else None
        store.purge_scope(f"run/{scope}")
        bindings = [n.binding_status() for n in ring.nodes]
        return {"put_mb_s": put, "get_mb_s": get, "server_cpu_s_per_gb": server_cpu,
                "plan": [p.describe() for p in ring.plan],
                "verified": [b["text"] if b else "not running" for b in bindings],
                "binding_ok": all(b is not None and b["ok"] for b in bindings)}
    except Exception as exc:
        # the ring's directories are removed at the end: say here what its instances logged
        logs = "\n".join(f"--- {n.name} ({'running' if n.is_running() else 'NOT running'}), "
                         f"last lines of {n.log_file}:\n{n.tail_log(15)}" for n in ring.nodes)
        raise RuntimeError(f"bench scaling, configuration {config['config']!r}: {type(exc).__name__}: {exc}\n"
                           f"{logs}") from exc
    finally:
        session = store.connection.established() if store is not None else None
        if session is not None:
            # the ring goes away: a session left open would keep trying to reconnect to it
            session.cluster.shutdown()
        ring.stop()


def run_scaling_bench(instances: int | None = None, heap_mib: int = 512, seconds: float = 5.0, repeat: int = 1,
                      clients: int = 4, object_mib: int = 1, first_index: int = 14, progress: bool = True) -> dict:
    """``{machine, note, rows, efficiency}``; rows per configuration with the median put/get MB/s
    over ``repeat`` interleaved rounds and every round's figures."""
    from rich.progress import Progress

    from asgard.resources.paths import run_dir

    topo = topology()
    if instances is None:
        instances = topo["numa_nodes"] if topo["numa_nodes"] > 1 else min(2, topo["cpus"])
    if instances < 2:
        raise ValueError(f"scaling needs at least 2 instances, got {instances}")
    configs = _configs(instances, heap_mib, topo)
    payload = os.urandom(object_mib * MiB)
    workdir = run_dir("cassandra", "scaling-bench")
    shutil.rmtree(workdir, ignore_errors=True)
    results: dict[str, list[dict]] = {c["config"]: [] for c in configs}
    try:
        with Progress(disable=not progress, transient=True) as bar:
            task = bar.add_task("bench scaling", total=repeat * len(configs))
            for _ in range(repeat):
                for config in configs:  # interleaved: drift hits every configuration alike
                    bar.update(task, description=f"scaling: {config['config']}")
                    results[config["config"]].append(
                        _measure(config, first_index, workdir, clients, seconds, payload))
                    bar.advance(task)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    rows = []
    for config in configs:
        runs = results[config["config"]]
        rows.append({
            "config": config["config"], "instances": config["nodes"], "heap_mib_each": int(config["heap"][:-1]),
            "total_heap_mib": config["nodes"] * int(config["heap"][:-1]),
            "pinning": ("numa node" if config.get("pin_numa") else
                        f"{config['cpus_per_instance']} cpu(s) each" if "cpus_per_instance" in config else "none"),
            "put_mb_s": round(statistics.median(r["put_mb_s"] for r in runs), 1),
            "get_mb_s": round(statistics.median(r["get_mb_s"] for r in runs), 1),
            "server_cpu_s_per_gb": round(statistics.median(r["server_cpu_s_per_gb"] for r in runs), 2),
            "rounds": [{k: round(r[k], 1) for k in ("put_mb_s", "get_mb_s")} for r in runs],
            "plan": runs[-1]["plan"], "verified": runs[-1]["verified"],
            "binding_ok": all(r["binding_ok"] for r in runs),
        })
    one, many, unpinned = rows

    def ratio(a, b):
        return round(a / b, 3) if b else None

    efficiency = {
        op: {"scaling_efficiency": ratio(many[f"{op}_mb_s"], instances * one[f"{op}_mb_s"]),
             "pinned_vs_unpinned": ratio(many[f"{op}_mb_s"], unpinned[f"{op}_mb_s"])}
        for op in ("put", "get")
    }
    if topo["numa_nodes"] > 1:
        note = (f"{topo['numa_nodes']} NUMA nodes: each pinned instance is bound to one node's CPUs and memory "
                f"(numactl --physcpubind=<node CPUs> --membind), as in the ICPE'19 study.")
    else:
        note = (f"this machine has ONE NUMA node ({topo['cpus']} CPUs): pinned instances are bound to "
                f"{topo['cpus'] // instances} CPU(s) each of node 0 (numactl --physcpubind), so the efficiency "
                "measures CPU pinning and instance count only, not NUMA locality; the client shares the same CPUs.")
    return {"machine": topo, "instances": instances, "object_mib": object_mib, "clients": clients,
            "seconds": seconds, "repeat": repeat, "note": note, "rows": rows, "efficiency": efficiency,
            "seed_002": {"in_socket_efficiency": SEED_IN_SOCKET_EFFICIENCY,
                         "system_efficiency": SEED_SYSTEM_EFFICIENCY}}


def print_report(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    n = report["instances"]
    table = Table(title=f"asgard bench scaling: {report['object_mib']} MiB objects, {report['clients']} client "
                        f"threads, {report['seconds']:g} s per phase, median of {report['repeat']} interleaved round(s)")
    for col in ("configuration", "instances", "heap each", "total heap", "pinning", "put MB/s", "get MB/s",
                "server CPU s/GB", "binding (/proc)"):
        table.add_column(col, justify="right" if col not in ("configuration", "pinning", "binding (/proc)") else "left")
    for r in report["rows"]:
        table.add_row(r["config"], str(r["instances"]), f"{r['heap_mib_each']} MiB", f"{r['total_heap_mib']} MiB",
                      r["pinning"], f"{r['put_mb_s']:,.1f}", f"{r['get_mb_s']:,.1f}", f"{r['server_cpu_s_per_gb']:.2f}",
                      ("verified" if r["binding_ok"] else "MISMATCH") if r["pinning"] != "none" else "-")
    console = Console(width=max(140, Console().width))
    console.print(table)
    e, seed = report["efficiency"], report["seed_002"]
    for op in ("put", "get"):
        console.print(f"{op}: scaling efficiency {n} pinned / ({n} x 1 pinned) = {e[op]['scaling_efficiency']:.0%}; "
                      f"{n} pinned vs unpinned of the same total heap = {e[op]['pinned_vs_unpinned']:.2f}x")
    console.print(f"ICPE'19 (2-socket EPYC, one instance per NUMA node): {seed['in_socket_efficiency']:.0%} in-socket, "
                  f"{seed['system_efficiency']:.0%} system scaling efficiency.")
    console.print(f"note: {report['note']}")
    for r in report["rows"]:
        for plan, seen in zip(r["plan"], r["verified"]):
            console.print(f"  {r['config']}: plan {plan}; /proc: {seen}")
