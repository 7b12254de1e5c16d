"""Calibration harness (seed 004 §3.5): measure workloads x configurations on a real node.

Configurations: the default (three times: first, middle, last, which gives the noise level),
then one-knob-at-a-time variations (every knob's minimum and maximum, every non-default choice:
this is both Rafiki's "min, max and default at least once" and the ANOVA design of §3.4), then
random configurations over all calibrated knobs. They are ordered so configurations sharing
their restart-only knobs run back to back: a restart happens only when that group changes.

Each (configuration, workload) measurement appends one JSON line to the dataset file; a rerun
skips pairs already present, so an interrupted calibration resumes where it stopped.
"""
from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .knobs import KNOBS, RESTART, Configuration, KnobConstraintError, apply, random_configuration
from .workload import Workload, run_workload, standard_workloads

#: knobs calibrated by default: Rafiki's five (with 5.0 successors) and the other cheap ones.
#: Not every knob of :data:`~tuner.knobs.KNOBS` is here: ``memtable`` (the table's memtable
#: implementation, live via ALTER TABLE) is available but not calibrated by default -- the
#: shipped dataset and model have no values for it; pass ``knobs=(*CALIBRATED, "memtable")``
#: to measure it.
CALIBRATED = (
    "compaction", "concurrent_writes", "concurrent_reads", "concurrent_compactors",
    "compaction_throughput_mib", "key_cache_size_mib", "compression", "chunk_length_kib",
    "file_cache_size_mib", "memtable_heap_space_mib", "memtable_flush_writers", "memtable_allocation_type",
)


@dataclass(frozen=True)
class PlannedConfig:
    tag: str  # "default", "oat:<knob>", "random"
    config: Configuration

    @property
    def config_id(self) -> str:
        return config_id(self.config)


#: knobs added after the shipped dataset was measured: left out of the id while at their
#: default, so existing ids (and the resume of an interrupted calibration) stay unchanged
_ID_OMIT_AT_DEFAULT = ("memtable",)


def config_id(config: Configuration) -> str:
    d = config.as_dict()
    for name in _ID_OMIT_AT_DEFAULT:
        if d.get(name) == KNOBS[name].default:
            d.pop(name)
    return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:10]


def one_at_a_time(knobs: Sequence[str]) -> list[PlannedConfig]:
    out = []
    for name in knobs:
        kb = KNOBS[name]
        values = [c for c in kb.choices if c != kb.default] if kb.kind == "choice" else \
            [v for v in (kb.low, kb.high) if v != kb.default]
        for v in values:
            try:
                out.append(PlannedConfig(f"oat:{name}", Configuration({name: v})))
            except KnobConstraintError:
                continue
    return out


def plan(knobs: Sequence[str] = CALIBRATED, n_random: int = 10, seed: int = 0,
         oat: bool = True, default_repeats: int = 3) -> list[PlannedConfig]:
    rng = random.Random(seed)
    default = PlannedConfig("default", Configuration())
    body = one_at_a_time(knobs) if oat else []
    seen = {p.config for p in body} | {default.config}
    randoms = []
    while len(randoms) < n_random:
        c = random_configuration(knobs, rng)
        if c not in seen:
            seen.add(c)
            randoms.append(PlannedConfig("random", c))
    ordered = order_for_restarts(body + randoms)
    if default_repeats <= 1:
        return [default] + ordered
    # repeats of the default measure the noise: one after the default restart group (no
    # extra restart), the rest at the very end (one restart)
    default_key = default.config.restart_part()
    n_default_group = sum(1 for p in ordered if p.config.restart_part() == default_key)
    extra = [PlannedConfig("default", Configuration()) for _ in range(default_repeats - 1)]
    return [default] + ordered[:n_default_group] + extra[:1] + ordered[n_default_group:] + extra[1:]


def order_for_restarts(items: Iterable[PlannedConfig]) -> list[PlannedConfig]:
    """Group by restart-only knob values, the default group first, so restarts = groups."""
    default_key = Configuration().restart_part()
    groups: dict[tuple, list[PlannedConfig]] = {}
    for p in items:
        groups.setdefault(p.config.restart_part(), []).append(p)
    keys = sorted(groups, key=lambda k: (k != default_key, repr(k)))
    return [p for k in keys for p in groups[k]]


def count_restarts(items: Sequence[PlannedConfig]) -> int:
    prev = Configuration().restart_part()
    n = 0
    for p in items:
        if p.config.restart_part() != prev:
            n += 1
            prev = p.config.restart_part()
    return n


def read_rows(path: Path | str) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by an interruption
                continue
    return rows


def calibrate(
    path: Path | str,
    node: Any,
    store: Any,
    workloads: Sequence[Workload] | None = None,
    configs: Sequence[PlannedConfig] | None = None,
    duration_s: float = 2.0,
    warmup_s: float = 0.3,
    settle_s: float = 1.0,
    progress: bool = True,
    on_row: Callable[[dict], None] | None = None,
) -> dict[str, Any]:
    """Run every planned (configuration, workload) not yet in ``path``; returns a summary."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    workloads = list(workloads or standard_workloads())
    configs = list(configs or plan())
    done_keys: dict[tuple[str, str], int] = {}
    for row in read_rows(path):
        k = (row["run_slot"], row["workload"]["name"])
        done_keys[k] = done_keys.get(k, 0) + 1
    # a slot = position-independent identity of a planned item (default repeats are distinct)
    slots, seen_count = [], {}
    for p in configs:
        seen_count[p.config_id] = seen_count.get(p.config_id, 0) + 1
        slots.append(f"{p.config_id}#{seen_count[p.config_id]}")
    todo = [(i, p) for i, p in enumerate(configs) if any((slots[i], w.name) not in done_keys for w in workloads)]
    summary = {"planned_configs": len(configs), "todo_configs": len(todo), "rows_written": 0,
               "restarts": 0, "restart_seconds": [], "seconds": 0.0}
    t_start = time.perf_counter()
    previous: Configuration | None = None  # unknown on (re)start: first apply is a full one

    bar = _Progress(len(todo) * len(workloads), progress)
    try:
        with path.open("a") as out:
            for i, p in todo:
                res = apply(node, store, p.config, previous)
                previous = p.config
                if res.restarted:
                    summary["restarts"] += 1
                    summary["restart_seconds"].append(round(res.restart_seconds, 2))
                # warm up: JIT after a restart, and let a compaction switch start
                run_workload(store, Workload(0.5, 64), duration_s=settle_s * (2 if res.restarted else 1),
                             warmup_s=0, seed=i)
                for j, w in enumerate(workloads):
                    if (slots[i], w.name) in done_keys:
                        bar.advance()
                        continue
                    m = run_workload(store, w, duration_s=duration_s, warmup_s=warmup_s, seed=1000 * i + j)
                    row = {
                        "ts": time.time(), "config_id": p.config_id, "run_slot": slots[i], "tag": p.tag,
                        "knobs": p.config.as_dict(), **m.as_dict(), "workload": w.as_dict(),
                        "applied": {"restarted": res.restarted, "restart_seconds": round(res.restart_seconds, 3),
                                    "node_restart_seconds": round(res.node_restart_seconds, 3),
                                    "apply_seconds": round(res.seconds, 3)},
                    }
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    summary["rows_written"] += 1
                    if on_row:
                        on_row(row)
                    bar.advance(f"{p.tag} {w.name} {m.ops_per_s:.0f} op/s")
    finally:
        bar.close()
    summary["seconds"] = round(time.perf_counter() - t_start, 1)
    return summary


class _Progress:
    def __init__(self, total: int, enabled: bool):
        self.p = None
        if enabled and total:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.p = Progress(TextColumn("[bold]calibrate"), BarColumn(), MofNCompleteColumn(),
                              TimeRemainingColumn(), TextColumn("{task.description}"))
            self.p.start()
            self.task = self.p.add_task("", total=total)

    def advance(self, text: str | None = None) -> None:
        if self.p:
            self.p.update(self.task, advance=1, **({"description": text} if text else {}))

    def close(self) -> None:
        if self.p:
            self.p.stop()


def run_calibration(out: Path | str, index: int = 5, heap: str = "2G", duration_s: float = 2.0,
                    n_random: int = 10, seed: int = 0, knobs: Sequence[str] = CALIBRATED,
                    workloads: Sequence[Workload] | None = None, keyspace: str = "asgard_tuner",
                    stop_after: bool = True, progress: bool = True) -> dict[str, Any]:
    """Start the tuner's own node (127.0.0.<index>), calibrate into ``out``, stop the node."""
    from resources.stores.cassandra import CassandraObjectStore

    from .node import TunerNode

    node = TunerNode(index=index, heap=heap)
    if not node.is_running():
        node.start()
    store = CassandraObjectStore(contact_points=[node.address], port=node.native_port, keyspace=keyspace)
    try:
        store.ping()
        summary = calibrate(out, node, store, workloads=workloads, configs=plan(knobs, n_random, seed),
                            duration_s=duration_s, progress=progress)
    finally:
        if stop_after:
            node.stop()
    return summary
