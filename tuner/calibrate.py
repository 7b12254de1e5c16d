"""Calibration harness: every configuration measured as a paired ratio against the default.

A row of the dataset is one (configuration, workload): the geometric mean over ``pairs`` ABBA
pairs of candidate/default throughput, its confidence interval, and the server-CPU-per-GB
ratio (see :mod:`asgard.tuner.measure`). The surrogate learns that ratio, so the machine's drift
over a long calibration (a shared 2-core box) never enters the target.

Configurations (:func:`plan`):

* ``aa`` -- the default against itself: the noise floor of a ratio, and ANOVA's default level;
* ``oat:<knob>`` -- one knob at a time at each of its other values (its minimum and maximum
  for numbers), the others default: Rafiki's "min, max and default at least once" and the
  ANOVA design; a knob that is inactive at the defaults (UCS's scaling with STCS) is skipped;
* ``cross:<a>*<b>`` -- two knobs over the full grid of both, the others default, for the pairs
  in :data:`CROSSED`: one-at-a-time rows cannot show an effect that needs both knobs moved;
* ``random`` -- random configurations of the knobs that apply without a restart (the
  restart-only ones cost two restarts a pair, so they are measured one at a time only).

Configurations sharing restart-only values run back to back. Each configuration appends its
rows as it finishes; a rerun skips what is there, so an interrupted calibration resumes.
"""
from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from dataclasses import dataclass

from .knobs import KNOBS, NO_RESTART, RESTART, Configuration, KnobConstraintError, grid, random_configuration
from .workload import Workload, dag_workloads

#: knobs calibrated by default: the ones for ephemeral data, Rafiki's five (with their 5.0
#: successors) and the store's client knobs. Left out: knobs only active under a non-default
#: value of another (their parent's OAT rows say whether that branch matters) and
#: ``memtable_offheap_space_mib`` (only read with offheap allocation types).
CALIBRATED = (
    "durable_writes", "compression", "chunk_length_kib", "gc_grace_seconds", "compaction", "memtable",
    "concurrent_writes", "concurrent_reads", "concurrent_compactors", "compaction_throughput_mib",
    "key_cache_size_mib", "row_cache_size_mib",
    "file_cache_size_mib", "memtable_heap_space_mib", "memtable_flush_writers", "memtable_allocation_type",
    "commitlog_sync", "commitlog_segment_size_mib",
    "client_chunk_kib", "client_in_flight", "client_codec",
)


#: pairs of knobs calibrated over the grid of both (:func:`crossed`). ``durable_writes`` with the
#: store's chunk size: without the commit log, how many rows an output takes is the write's
#: cost (a 1 MiB output pickles to a little over 1 MiB: a head, an index and two chunks with
#: 1 MiB chunks, one inline row with 2 MiB ones); hand-picked, the pair measured +33% and +47%
#: on write-heavy scatter against +17% and +27% for durable_writes alone in the same runs
#: (docs/results/issue9-after-in-place-read.txt), while chunk size alone changed nothing.
CROSSED = (("durable_writes", "client_chunk_kib"),)


@dataclass(frozen=True)
class PlannedConfig:
    tag: str  # "aa", "oat:<knob>", "cross:<a>*<b>", "random"
    config: Configuration

    @property
    def config_id(self) -> str:
        return config_id(self.config)


def config_id(config: Configuration) -> str:
    return hashlib.sha1(json.dumps(config.as_dict(), sort_keys=True, default=str).encode()).hexdigest()[:10]


def _active_at_default(name: str) -> bool:
    parent = KNOBS[name].active_when
    return parent is None or KNOBS[parent[0]].default in parent[1]


def one_at_a_time(knobs: Sequence[str]) -> list[PlannedConfig]:
    out = []
    for name in knobs:
        kb = KNOBS[name]
        if not _active_at_default(name):
            continue
        if kb.kind == "choice":
            values = [c for c in kb.choices if c != kb.default]
        else:
            axis = kb.values_for_grid()
            values = [v for v in (min(axis), max(axis)) if v != kb.default]
        for v in values:
            try:
                config = Configuration({name: v})
            except KnobConstraintError:
                continue
            if config != Configuration():  # memtable "skiplist" is the default's implementation
                out.append(PlannedConfig(f"oat:{name}", config))
    return out


def crossed(pairs: Sequence[tuple[str, str]] = CROSSED) -> list[PlannedConfig]:
    """Each pair of knobs at every combination of their grid values, the others default."""
    return [PlannedConfig(f"cross:{a}*{b}", c) for a, b in pairs for c in grid([a, b])]


#: calibration designs: the shipped one, and random configurations alone
DESIGNS = ("grid", "random")


def plan(knobs: Sequence[str] = CALIBRATED, n_random: int = 14, seed: int = 0, oat: bool = True,
         noise_repeats: int = 2, crossed_pairs: Sequence[tuple[str, str]] = CROSSED) -> list[PlannedConfig]:
    rng = random.Random(seed)
    body = one_at_a_time(knobs) if oat else []
    seen = {p.config for p in body} | {Configuration()}
    for p in crossed([(a, b) for a, b in crossed_pairs if a in knobs and b in knobs]):
        if p.config not in seen:  # the corners one-at-a-time rows already measure stay theirs
            seen.add(p.config)
            body.append(p)
    live = [k for k in knobs if KNOBS[k].apply in NO_RESTART]
    randoms = []
    while len(randoms) < n_random:
        c = random_configuration(live, rng)
        if c not in seen:
            seen.add(c)
            randoms.append(PlannedConfig("random", c))
    noise = [PlannedConfig("aa", Configuration()) for _ in range(noise_repeats)]
    ordered = order_for_restarts(body + randoms)
    # one noise measurement first, the other last: the floor at both ends of the run
    return noise[:1] + ordered + noise[1:]


def design_plan(design: str = "grid", knobs: Sequence[str] = CALIBRATED, n_random: int = 14,
                seed: int = 0) -> list[PlannedConfig]:
    """The plan of a calibration design: ``grid`` (one knob at a time, the crossed pairs and
    ``n_random`` random configurations) or ``random`` (the random ones alone, as Rafiki sampled
    its training set, so a held-out configuration sits among levels training has)."""
    if design not in DESIGNS:
        raise ValueError(f"design {design!r} is not one of {DESIGNS}")
    grid_design = design == "grid"
    return plan(knobs, n_random, seed, oat=grid_design, crossed_pairs=CROSSED if grid_design else ())


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
    duration_s: float = 1.0,
    warmup_s: float = 0.25,
    pairs: int = 2,
    settle_s: float = 1.0,
    progress: bool = True,
    on_row: Callable[[dict], None] | None = None,
) -> dict[str, Any]:
    """Measure every planned configuration not yet in ``path`` against the default; returns a summary."""
    from .measure import Interleaver

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    workloads = list(workloads or dag_workloads())
    configs = list(configs or plan())
    done = {(row["run_slot"], row["workload"]["name"]) for row in read_rows(path)}
    # a slot = position-independent identity of a planned item (repeats are distinct)
    slots, seen_count = [], {}
    for p in configs:
        key = f"aa-{p.config_id}" if p.tag == "aa" else p.config_id
        seen_count[key] = seen_count.get(key, 0) + 1
        slots.append(f"{key}#{seen_count[key]}")
    todo = [(i, p) for i, p in enumerate(configs) if any((slots[i], w.name) not in done for w in workloads)]
    summary = {"planned_configs": len(configs), "todo_configs": len(todo), "rows_written": 0,
               "restarts": 0, "restart_seconds": [], "seconds": 0.0, "pairs": pairs}
    t_start = time.perf_counter()
    applied: list[Any] = []
    bench = Interleaver(node, store, duration_s=duration_s, warmup_s=warmup_s, settle_s=settle_s,
                        on_apply=applied.append)
    default = Configuration()
    bar = _Progress(len(todo), progress)
    try:
        if todo:
            bench.switch(default)
            bench.warm(workloads)
        with path.open("a") as out:
            for i, p in todo:
                applied.clear()
                comparisons = bench.compare(default, p.config, workloads, pairs)
                restarts = [round(a.node_restart_seconds, 3) for a in applied if a.restarted]
                summary["restarts"] += len(restarts)
                summary["restart_seconds"] += restarts
                for comp in comparisons:
                    if (slots[i], comp.workload.name) in done:
                        continue
                    stats = comp.summary()
                    row = {
                        "ts": time.time(), "config_id": p.config_id, "run_slot": slots[i], "tag": p.tag,
                        "knobs": p.config.as_dict(), "workload": comp.workload.as_dict(),
                        **{k: stats[k] for k in ("ratio", "ci_low", "ci_high", "ratios", "cpu_ratio",
                                                 "baseline_ops_per_s", "candidate_ops_per_s",
                                                 "baseline_cpu_s_per_gb", "candidate_cpu_s_per_gb")},
                        "errors": sum(s.errors for s in comp.baseline + comp.candidate),
                        "duration_s": duration_s,
                        "applied": {"restarts": restarts},
                    }
                    out.write(json.dumps(row, default=str) + "\n")
                    summary["rows_written"] += 1
                    if on_row:
                        on_row(row)
                out.flush()
                bar.advance(f"{p.tag} {p.config.short()[:40]}")
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


def run_calibration(out: Path | str, index: int = 5, heap: str = "2G", duration_s: float = 1.0,
                    pairs: int = 2, n_random: int = 14, seed: int = 0, knobs: Sequence[str] = CALIBRATED,
                    workloads: Sequence[Workload] | None = None, keyspace: str = "asgard_tuner",
                    stop_after: bool = True, progress: bool = True, design: str = "grid") -> dict[str, Any]:
    """Start the tuner's own node (127.0.0.<index>), calibrate into ``out`` the configurations of
    ``design`` (:func:`design_plan`), stop the node."""
    configs = design_plan(design, knobs, n_random, seed)
    from asgard.resources.stores.cql import CassandraObjectStore

    from .node import TunerNode

    node = TunerNode(index=index, heap=heap)
    if not node.is_running():
        node.start()
    store = CassandraObjectStore(**node.client_options(), keyspace=keyspace)
    try:
        store.ping()
        summary = calibrate(out, node, store, workloads=workloads, configs=configs, duration_s=duration_s,
                            pairs=pairs, progress=progress)
    finally:
        if stop_after:
            node.stop()
    return summary
