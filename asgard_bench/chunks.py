"""``asgard bench chunks``: one output's put and get against its chunk size and its chunk
requests in flight, on the day's own data (the ETL's orders and joined partitions, log
analytics' landed file and parsed table), each with the codec ``codec="auto"`` chooses for it.

Each round puts and gets every data kind once in every cell (chunk size x requests in flight), the
cells in an order rotated round by round; the store's default cell is listed twice (``A/A``): how
far its two copies land apart is the noise floor beside every ratio. Each cell's figure is the
median of its rounds; its ratio is the default cell's seconds over its own (above 1: faster). The
server's CPU seconds per GB moved (``/proc`` of the node) come beside, since a cell that saves the
client's time may spend the node's. Untimed passes over every cell come first (``--warmup-seconds``).

    asgard bench chunks [--network cloud] [--chunk-kib 1024,2048,4096,8192] [--in-flight 8] [--json]
"""
from __future__ import annotations

import statistics
import time
import uuid
from typing import Callable

MiB = 1 << 20
#: the store's own cell (Cassandra's DEFAULT_CHUNK_SIZE and STORAGE's concurrency), measured twice
DEFAULT_CELL = (1024, 8)
DATA_KINDS = ("etl orders", "etl joined", "log file", "log table")


def day_data(scale: float, fanout: int, kinds: tuple[str, ...] = DATA_KINDS) -> dict[str, object]:
    """One partition of each of ``kinds`` as the day makes it (``scale`` GiB in ``fanout`` partitions);
    a pipeline's data is made only where one of its kinds is asked for."""
    from asgard.pipelines import etl_columnar, log_analytics

    made: dict[str, object] = {}
    if {"etl orders", "etl joined"} & set(kinds):
        orders = etl_columnar.orders_partition(scale, fanout, 0, 0)
        if "etl orders" in kinds:
            made["etl orders"] = orders
        if "etl joined" in kinds:
            made["etl joined"] = etl_columnar._joined(etl_columnar._filtered(orders),
                                                      etl_columnar.customers_table(scale, 0))
    if {"log file", "log table"} & set(kinds):
        raw = log_analytics.log_file(scale, fanout, 0, 0)  # about 1.3 s of CPU per 128 MiB
        if "log file" in kinds:
            made["log file"] = raw
        if "log table" in kinds:
            made["log table"] = log_analytics._parsed(raw)
    return {kind: made[kind] for kind in kinds}


def _cells(chunk_kib: list[int], in_flight: list[int]) -> list[tuple[str, int, int]]:
    """``(label, chunk KiB, in flight)`` of every cell, the default cell twice (A and A')."""
    cells = [(f"{c} KiB x {n}", c, n) for c in chunk_kib for n in in_flight if (c, n) != DEFAULT_CELL]
    c, n = DEFAULT_CELL
    return [(f"{c} KiB x {n} (A)", c, n), (f"{c} KiB x {n} (A')", c, n)] + cells


def run_chunks(network: str = "loopback", chunk_kib: list[int] | None = None, in_flight: list[int] | None = None,
               kinds: tuple[str, ...] = DATA_KINDS, rounds: int = 5, scale: float = 0.5, fanout: int = 4,
               warmup_s: float = 60.0, say: Callable[[str], None] = print) -> dict:
    """The measurements and their medians: ``{network, rounds, data: {kind: {...}}, cells: [...]}``."""
    from asgard.resources.stores.codec_choice import choose_codec, throughput_record
    from asgard.resources.stores.registry import open_store

    from .day_plan import ProfileServersForDay
    from .io import ServerCpu

    cells = _cells(chunk_kib or [1024, 2048, 4096, 8192], in_flight or [8])
    servers = ProfileServersForDay(network, say, kinds=("cassandra",))
    deployment = servers.up()
    try:
        store = open_store("cassandra", **deployment.store_kwargs("cassandra"), keyspace="asgard_bench_chunks")
        store.ping()
        cpu = ServerCpu.for_backend("cassandra", [deployment.server("cassandra")], deployment)
        data = {kind: store.serialize(value) for kind, value in day_data(scale, fanout, kinds).items()}
        codecs = {}
        for kind, serialized in data.items():
            choice = choose_codec(serialized.frames, 1, throughput_record().read(store.identity()))
            codecs[kind] = {"codec": choice.codec, "reason": choice.reason,
                            "mib": round(sum(f.nbytes for f in serialized.frames) / MiB, 1)}
            say(f"{kind}: {codecs[kind]['mib']} MiB, {choice.codec} ({choice.reason})")
        seconds: dict = {(kind, label): {"put": [], "get": [], "server_cpu": [], "chunks": 0}
                         for kind in data for label, *_ in cells}
        # untimed passes: connections, the keyspace made, a node started minutes ago still compiling
        t_warm = time.monotonic()
        while time.monotonic() - t_warm < warmup_s:
            _measure(store, data, codecs, cells, cpu, None)
        for r in range(rounds):
            order = cells[r % len(cells):] + cells[: r % len(cells)]
            _measure(store, data, codecs, order, cpu, seconds)
            say(f"round {r + 1}/{rounds} done")
        store.close()
    finally:
        servers.down()
    return {"network": network, "rounds": rounds, "scale": scale, "fanout": fanout, "data": codecs,
            "cells": _summaries(seconds, cells, data)}


def _measure(store, data: dict, codecs: dict, cells: list, cpu, seconds: dict | None) -> None:
    from asgard.resources.stores import ObjectKey

    scope = f"bench-chunks-{uuid.uuid4().hex[:8]}"
    for label, chunk, flight in cells:
        store.set_client_options(chunk * 1024, flight, store.codec.name)
        for kind, serialized in data.items():
            key = ObjectKey(scope, f"{kind.replace(' ', '-')}/{chunk}-{flight}")
            cpu0 = cpu.seconds()
            t0 = time.perf_counter()
            put = store.put_serialized(key, serialized, codec=codecs[kind]["codec"])
            t1 = time.perf_counter()
            store.get(key)
            t2 = time.perf_counter()
            if seconds is not None:
                cell = seconds[(kind, label)]
                cell["put"].append(t1 - t0)
                cell["get"].append(t2 - t1)
                cell["server_cpu"].append((cpu.seconds() or 0.0) - (cpu0 or 0.0))
                cell["chunks"] = put.manifest.chunks
    store.purge_scope(scope)


def _summaries(seconds: dict, cells: list, data: dict) -> list[dict]:
    rows = []
    for kind, serialized in data.items():
        gb = sum(f.nbytes for f in serialized.frames) / 1e9
        base = None
        for label, chunk, flight in cells:
            s = seconds[(kind, label)]
            total = [p + g for p, g in zip(s["put"], s["get"])]
            row = {"data": kind, "cell": label, "chunk_kib": chunk, "in_flight": flight, "chunks": s["chunks"],
                   "put_s": round(statistics.median(s["put"]), 4), "get_s": round(statistics.median(s["get"]), 4),
                   "put_get_s": round(statistics.median(total), 4),
                   "spread_pct": round(100 * (max(total) - min(total)) / statistics.median(total), 1),
                   "server_cpu_s_per_gb": round(statistics.median(s["server_cpu"]) / gb / 2, 3)}
            base = base or row
            row["ratio"] = round(base["put_get_s"] / row["put_get_s"], 3)
            rows.append(row)
        a, a2 = rows[-len(cells)], rows[-len(cells) + 1]
        noise = round(100 * abs(a["put_get_s"] - a2["put_get_s"]) / a["put_get_s"], 1)
        for row in rows[-len(cells):]:
            row["noise_pct"] = noise
    return rows


def table(result: dict) -> str:
    lines = [f"asgard bench chunks: {result['network']}, {result['rounds']} rounds, the day's partitions "
             f"(scale {result['scale']}, fanout {result['fanout']})"]
    for kind, d in result["data"].items():
        lines.append(f"  {kind}: {d['mib']} MiB, codec {d['codec']}")
    lines.append(f"{'data':<11} {'cell':<22} {'put s':>7} {'get s':>7} {'put+get':>8} {'vs A':>6} {'A/A %':>6} "
                 f"{'spread %':>8} {'srv CPU s/GB':>12}")
    for r in result["cells"]:
        lines.append(f"{r['data']:<11} {r['cell']:<22} {r['put_s']:>7.3f} {r['get_s']:>7.3f} {r['put_get_s']:>8.3f} "
                     f"{r['ratio']:>6.3f} {r['noise_pct']:>6.1f} {r['spread_pct']:>8.1f} {r['server_cpu_s_per_gb']:>12.3f}")
    return "\n".join(lines)
