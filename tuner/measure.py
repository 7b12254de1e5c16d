"""Paired, interleaved measurement: how a configuration compares with a baseline on a shared,
noisy 2-core machine.

A configuration is never measured alone. Each *pair* measures the baseline and the candidate
back to back on the same workloads, in ABBA order (A B, then B A, ...), so a drift of the
machine that is linear over a pair cancels. The result of a pair is the ratio candidate /
baseline of the workload's throughput, and of the Cassandra process's CPU seconds per GB moved
(read from /proc: what Perf/$ charges for, and far steadier than wall-clock throughput here).
Over the pairs: the geometric mean ratio and a Student-t confidence interval on the log ratios.
The *noise floor* is the same statistic for the baseline against itself.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .knob_apply import apply
from .knobs import Configuration
from .workload import Workload, run_workload

GB = 1 << 30
#: how :meth:`Interleaver.compare` orders a pair's samples over several workloads
ORDERS = ("grouped", "per-workload")


@dataclass
class Sample:
    """One workload measured once under one configuration."""

    ops_per_s: float
    mb_per_s: float
    cpu_s_per_gb: float  # server CPU seconds per GB moved (reads + writes)
    errors: int

    def as_dict(self) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


@dataclass
class Comparison:
    """Candidate over baseline on one workload, from ``len(ratios)`` pairs."""

    workload: Workload
    baseline: list[Sample] = field(default_factory=list)
    candidate: list[Sample] = field(default_factory=list)

    @property
    def ratios(self) -> list[float]:
        return [c.ops_per_s / b.ops_per_s for b, c in zip(self.baseline, self.candidate) if b.ops_per_s > 0]

    @property
    def cpu_ratios(self) -> list[float]:
        return [c.cpu_s_per_gb / b.cpu_s_per_gb for b, c in zip(self.baseline, self.candidate)
                if b.cpu_s_per_gb > 0 and c.cpu_s_per_gb > 0]

    def ratio(self) -> float:
        return geomean(self.ratios)

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        return ratio_interval(self.ratios, level)

    def summary(self, level: float = 0.95) -> dict[str, Any]:
        lo, hi = self.interval(level)
        return {
            "workload": self.workload.name, "pairs": len(self.ratios),
            "ratio": round(self.ratio(), 4), "ci_low": round(lo, 4), "ci_high": round(hi, 4),
            "gain_pct": round((self.ratio() - 1) * 100, 2),
            "cpu_ratio": round(geomean(self.cpu_ratios), 4) if self.cpu_ratios else None,
            "baseline_ops_per_s": round(float(np.mean([s.ops_per_s for s in self.baseline])), 1),
            "candidate_ops_per_s": round(float(np.mean([s.ops_per_s for s in self.candidate])), 1),
            "baseline_cpu_s_per_gb": round(float(np.mean([s.cpu_s_per_gb for s in self.baseline])), 2),
            "candidate_cpu_s_per_gb": round(float(np.mean([s.cpu_s_per_gb for s in self.candidate])), 2),
            "ratios": [round(r, 4) for r in self.ratios],
        }


def geomean(values: Sequence[float]) -> float:
    values = [v for v in values if v > 0]
    return float(math.exp(np.mean(np.log(values)))) if values else float("nan")


def ratio_interval(ratios: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Confidence interval of the geometric mean ratio (t on the log ratios); infinite for one pair."""
    from scipy import stats

    logs = np.log([r for r in ratios if r > 0])
    if len(logs) < 2:
        return 0.0, float("inf")
    half = stats.t.ppf(0.5 + level / 2, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
    return float(math.exp(logs.mean() - half)), float(math.exp(logs.mean() + half))


def measure(node: Any, store: Any, workload: Workload, duration_s: float, warmup_s: float = 0.3,
            seed: int = 0) -> Sample:
    """Run ``workload`` once, with the server's CPU seconds over the same window."""
    c0 = node.cpu_seconds()
    m = run_workload(store, workload, duration_s=duration_s, warmup_s=warmup_s, seed=seed)
    cpu = node.cpu_seconds() - c0  # includes the warm-up: same share on both sides of a pair
    moved = max(m.bytes, 1) * (1 + warmup_s / max(m.seconds, 1e-9))
    return Sample(m.ops_per_s, m.mb_per_s, cpu / moved * GB, m.errors)


def ops_during(store: Any, workload: Workload, action: Callable[[], Any], slice_s: float = 0.25,
               seed: int = 0) -> tuple[Any, float]:
    """Run ``action()`` while ``workload`` drives ``store`` from another thread, in short slices
    until the action returns: (the action's result, the workload's ops/s over that time). What a
    live change costs the runs it meets (its dip) is this against the ops/s measured before it."""
    import threading

    done = threading.Event()
    totals = {"ops": 0.0, "seconds": 0.0}

    def drive() -> None:
        i = 0
        while not done.is_set():
            m = run_workload(store, workload, duration_s=slice_s, warmup_s=0, seed=seed + i)
            totals["ops"] += m.ops_per_s * m.seconds
            totals["seconds"] += m.seconds
            i += 1

    worker = threading.Thread(target=drive, name="asgard-live-dip", daemon=True)
    worker.start()
    try:
        result = action()
    finally:
        done.set()
        worker.join()
    return result, totals["ops"] / totals["seconds"] if totals["seconds"] > 0 else 0.0


class Interleaver:
    """Applies configurations to one node and measures workloads under them, remembering what is
    applied so each switch changes only what differs (a restart only for restart-only knobs)."""

    def __init__(self, node: Any, store: Any, duration_s: float = 1.5, warmup_s: float = 0.3,
                 settle_s: float = 1.0, on_apply: Callable[[Any], None] | None = None):
        self.node, self.store = node, store
        self.duration_s, self.warmup_s, self.settle_s = duration_s, warmup_s, settle_s
        self.current: Configuration | None = None  # unknown until the first apply
        self.on_apply = on_apply
        self.restarts: list[float] = []
        self._seed = 0

    def switch(self, config: Configuration, workloads: Sequence[Workload] = ()) -> None:
        if config == self.current:
            return
        res = apply(self.node, self.store, config, self.current)
        self.current = config
        if res.restarted:
            self.restarts.append(res.node_restart_seconds)
            self.warm(workloads)
        if self.on_apply:
            self.on_apply(res)

    def warm(self, workloads: Sequence[Workload]) -> None:
        """Unmeasured passes over the workloads: a restarted JVM runs its first seconds
        interpreted (measured: a pair right after a restart read 0.5x-1.6x, one later 1.0x)."""
        for w in workloads or [Workload(0.5, 64)]:
            run_workload(self.store, w, duration_s=self.settle_s, warmup_s=0)

    def run(self, config: Configuration, workloads: Sequence[Workload]) -> list[Sample]:
        self.switch(config, workloads)
        out = []
        for w in workloads:
            self._seed += 1
            out.append(measure(self.node, self.store, w, self.duration_s, self.warmup_s, seed=self._seed))
        return out

    def compare(self, baseline: Configuration, candidate: Configuration, workloads: Sequence[Workload],
                pairs: int = 2, order: str = "grouped") -> list[Comparison]:
        """``pairs`` paired measurements of every workload, ABBA order (starting from whichever of
        the two is applied now, which saves a switch). ``order``: ``"grouped"`` measures every
        workload on one side before switching (two switches a pair); ``"per-workload"`` takes one
        workload's pairs back to back before the next, so a pair's two samples are one window
        apart instead of a pass over all workloads (two switches a pair for each workload; measured
        noisier here: docs/results/issue37-label-noise.txt)."""
        if order not in ORDERS:
            raise ValueError(f"order {order!r} is not one of {ORDERS}")
        result = [Comparison(w) for w in workloads]
        groups = [list(zip(result, workloads))] if order == "grouped" else [[cw] for cw in zip(result, workloads)]
        for group in groups:
            comps, ws = [c for c, _ in group], [w for _, w in group]
            first_is_candidate = self.current == candidate and candidate != baseline
            for p in range(pairs):
                sides = ("b", "c") if (p % 2 == 0) != first_is_candidate else ("c", "b")
                for side in sides:
                    samples = self.run(baseline if side == "b" else candidate, ws)
                    for comp, s in zip(comps, samples):
                        (comp.baseline if side == "b" else comp.candidate).append(s)
        return result
