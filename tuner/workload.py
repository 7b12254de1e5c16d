"""Workload model (Rafiki, Middleware'17, §3.3, extended for DAGs) and a generator that drives the real store.

A :class:`Workload` is what the tuner conditions on: read ratio (RR), object-size distribution,
fan-out degree, client concurrency and key reuse distance (KRD). The generator turns it into
DAG-shaped traffic against any :class:`asgard.resources.stores.base.ObjectStore` (the Cassandra one in
calibration), one *round* per DAG run, each round in its own scope (the purge unit)::

    scatter(k)     one op writes k objects, k readers read one each          RR = 0.5
    broadcast(k)   one op writes 1 object, k readers read it                 RR = k/(k+1)
    fanin(k)       k writers, then one reader reads all k (serially)         RR = 0.5
    shuffle(m, r)  m mappers write r partitions each, r reducers read m      RR = 0.5
    mixed(RR)      stage of writes then stage of reads, counts chosen so the long-run
                   read fraction is RR; reads pick keys by an exponential KRD

Writes of one stage run concurrently (``concurrency`` threads), then the stage's reads do, as
Dagster would run the downstream ops. Finished rounds are purged (ephemeral data), keeping the
last ``retain_rounds`` so reads can reach back ``key_reuse_distance`` writes.

Bounded: stops at ``duration_s`` seconds or ``max_ops`` operations, whichever first.
"""
from __future__ import annotations

import math
import random
import threading
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

PATTERNS = ("mixed", "scatter", "broadcast", "fanin", "shuffle")
KiB = 1024


@dataclass(frozen=True)
class Workload:
    read_ratio: float = 0.5
    object_kib: int = 64  # median object size
    size_sigma: float = 0.0  # lognormal sigma of sizes; 0 = fixed size
    pattern: str = "mixed"
    fanout: int = 8  # k (and r for shuffle)
    mappers: int = 4  # m for shuffle
    concurrency: int = 8  # client threads in a stage (parallel ops)
    key_reuse_distance: float = 4.0  # mean writes back a read reaches (exponential)
    retain_rounds: int = 4
    #: share of each payload that compresses (repeated text); the rest is random bytes.
    #: Video, encoded images and pickled float arrays are near 0, text and JSON near 1.
    compressibility: float = 0.5
    name: str = ""

    def __post_init__(self):
        if not 0.0 <= self.read_ratio <= 1.0:
            raise ValueError(f"read_ratio must be in [0, 1], got {self.read_ratio}")
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {PATTERNS}, got {self.pattern!r}")
        if self.object_kib < 1 or self.fanout < 1 or self.concurrency < 1 or self.mappers < 1:
            raise ValueError("object_kib, fanout, mappers and concurrency must be >= 1")
        if not 0.0 <= self.compressibility <= 1.0:
            raise ValueError(f"compressibility must be in [0, 1], got {self.compressibility}")
        if self.pattern == "mixed" and self.read_ratio >= 1.0:
            raise ValueError("a mixed workload needs some writes (read_ratio < 1)")
        if not self.name:
            object.__setattr__(self, "name", self.default_name())

    def default_name(self) -> str:
        if self.pattern == "mixed":
            name = f"mixed-rr{self.read_ratio:.2f}-{self.object_kib}k"
        else:
            name = f"{self.pattern}{self.fanout}-{self.object_kib}k"
        return name if self.compressibility == 0.5 else f"{name}-c{self.compressibility:g}"

    @property
    def nominal_read_ratio(self) -> float:
        if self.pattern == "broadcast":
            return self.fanout / (self.fanout + 1)
        if self.pattern in ("scatter", "fanin", "shuffle"):
            return 0.5
        return self.read_ratio

    @classmethod
    def from_dag(cls, pattern: str, fanout: int, object_kib: int, **kw) -> "Workload":
        rr = fanout / (fanout + 1) if pattern == "broadcast" else 0.5
        return cls(read_ratio=rr, object_kib=object_kib, pattern=pattern, fanout=fanout, **kw)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    # the surrogate's workload features: what the topology analyzer reads off a job's DAG
    FEATURES = (*(f"pattern={p}" for p in PATTERNS), "read_ratio", "log2_object_kib", "log2_fanout",
                "log2_concurrency", "compressibility")

    def features(self) -> list[float]:
        return [*(1.0 if self.pattern == p else 0.0 for p in PATTERNS), self.nominal_read_ratio,
                math.log2(self.object_kib), math.log2(self.fanout), math.log2(self.concurrency),
                self.compressibility]


@dataclass
class Measurement:
    workload: str
    ops: int
    reads: int
    writes: int
    seconds: float
    bytes: int
    ops_per_s: float
    mb_per_s: float
    read_p50_ms: float
    read_p99_ms: float
    write_p50_ms: float
    write_p99_ms: float
    p50_ms: float
    p99_ms: float
    errors: int = 0
    rounds: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q) * 1000.0) if values else float("nan")


class _Payloads:
    """Pre-made payloads, ``compressibility`` of each a repeated text and the rest random, mixed
    at 4 KiB grain (so every compression chunk sees the same mix); generating them costs no
    time during measurement."""

    def __init__(self, workload: Workload, seed: int):
        self.rng = np.random.default_rng(seed)
        self.w = workload
        top = int(workload.object_kib * KiB * (math.exp(3 * workload.size_sigma) if workload.size_sigma else 1))
        grain = 4 * KiB
        blocks = top // grain + 1
        text = np.frombuffer((b"asgard-ephemeral" * (grain // 16)), dtype=np.uint8)
        pool = self.rng.integers(0, 256, size=(blocks, grain), dtype=np.uint8)
        repeated = int(round(grain * workload.compressibility))
        pool[:, :repeated] = text[:repeated]
        self.pool = pool.tobytes()[: top + 1]
        self.top = top

    def next(self) -> bytes:
        size = self.w.object_kib * KiB
        if self.w.size_sigma:
            size = int(min(self.top, max(1, size * math.exp(self.rng.normal(0, self.w.size_sigma)))))
        return self.pool[:size]


def _plan_round(w: Workload, carry: list[float]) -> list[tuple[str, list]]:
    """The stages of one round: a list of ("put", [n objects]) / ("get", [(which, count)])."""
    k = w.fanout
    if w.pattern == "scatter":
        return [("put", k), ("get", [("own", i) for i in range(k)])]
    if w.pattern == "broadcast":
        return [("put", 1), ("get", [("own", 0)] * k)]
    if w.pattern == "fanin":
        return [("put", k), ("get_serial", [("own", i) for i in range(k)])]
    if w.pattern == "shuffle":
        m, r = w.mappers, k
        return [("put", m * r), ("get", [("own", i) for i in range(m * r)])]
    # mixed: 2k ops per round, Bresenham-style so the long-run read share is exact
    n = 2 * k
    carry[0] += n * (1.0 - w.read_ratio)
    writes = max(1, int(carry[0]))
    carry[0] -= writes
    reads = max(0, n - writes) if w.read_ratio > 0 else 0
    return [("put", writes), ("get", [("krd", None)] * reads)]


def run_workload(store: Any, w: Workload, duration_s: float = 3.0, max_ops: int = 100_000,
                 warmup_s: float = 0.5, seed: int = 0, scope_prefix: str = "tuner") -> Measurement:
    """Drive ``store`` with ``w`` for a bounded time; returns ops/s, MB/s and latency percentiles."""
    from asgard.resources.stores.base import ObjectKey

    rng = random.Random(seed)
    payloads = _Payloads(w, seed)
    pool = ThreadPoolExecutor(max_workers=w.concurrency)
    live: deque[tuple[str, list[ObjectKey]]] = deque()  # rounds not purged yet
    history: deque[ObjectKey] = deque(maxlen=10_000)  # written keys, newest last
    lock = threading.Lock()
    stats = {"r": [], "w": [], "bytes": 0, "errors": 0}
    carry = [0.0]
    t_run = uuid.uuid4().hex[:8]

    def put(key: ObjectKey) -> None:
        data = payloads.next()
        try:
            res = store.put(key, data)
        except Exception:
            with lock:
                stats["errors"] += 1
            return
        with lock:
            stats["w"].append(res.seconds)
            stats["bytes"] += res.manifest.size
            history.append(key)

    def get(key: ObjectKey) -> None:
        try:
            _, res = store.get(key)
        except Exception:
            with lock:
                stats["errors"] += 1
            return
        with lock:
            stats["r"].append(res.seconds)
            stats["bytes"] += res.manifest.size

    def pick_krd() -> ObjectKey | None:
        with lock:
            if not history:
                return None
            d = int(rng.expovariate(1.0 / max(w.key_reuse_distance, 1e-9))) if w.key_reuse_distance > 0 else 0
            return history[-1 - min(d, len(history) - 1)]

    def one_round(r: int) -> int:
        scope = f"{scope_prefix}/{t_run}/{r}"
        own: list[ObjectKey] = []
        ops = 0
        for kind, spec in _plan_round(w, carry):
            if kind == "put":
                keys = [ObjectKey(scope, f"op{i}/out") for i in range(spec)]
                own.extend(keys)
                list(pool.map(put, keys))
                ops += len(keys)
            else:
                targets = []
                for which, i in spec:
                    key = own[i % len(own)] if which == "own" and own else pick_krd()
                    if key is not None:
                        targets.append(key)
                if kind == "get_serial":
                    for key in targets:
                        get(key)
                else:
                    list(pool.map(get, targets))
                ops += len(targets)
        live.append((scope, own))
        while len(live) > w.retain_rounds:
            old_scope, old_keys = live.popleft()
            with lock:
                gone = set(old_keys)
                remaining = [k for k in history if k not in gone]
                history.clear()
                history.extend(remaining)
            store.purge_scope(old_scope)
        return ops

    try:
        r = 0
        t_end = time.perf_counter() + warmup_s
        while warmup_s > 0 and time.perf_counter() < t_end:
            one_round(r)
            r += 1
        with lock:
            stats.update(r=[], w=[], bytes=0, errors=0)
        t0 = time.perf_counter()
        deadline = t0 + duration_s
        ops = rounds = 0
        while time.perf_counter() < deadline and ops < max_ops:
            ops += one_round(r)
            r += 1
            rounds += 1
        elapsed = time.perf_counter() - t0
    finally:
        for scope, _ in live:
            try:
                store.purge_scope(scope)
            except Exception:
                pass
        pool.shutdown(wait=True)
    reads, writes = stats["r"], stats["w"]
    done = len(reads) + len(writes)
    return Measurement(
        workload=w.name, ops=done, reads=len(reads), writes=len(writes), seconds=elapsed,
        bytes=stats["bytes"], ops_per_s=done / elapsed, mb_per_s=stats["bytes"] / 2**20 / elapsed,
        read_p50_ms=_pct(reads, 50), read_p99_ms=_pct(reads, 99),
        write_p50_ms=_pct(writes, 50), write_p99_ms=_pct(writes, 99),
        p50_ms=_pct(reads + writes, 50), p99_ms=_pct(reads + writes, 99),
        errors=stats["errors"], rounds=rounds,
    )


#: the DAG-shaped calibration grid: every pattern the topology analyzer names, at several
#: sizes and both ends of compressibility (video/arrays vs text), fan-out as the apps have it
DAG_WORKLOADS = (
    ("scatter", 8, 1024, 0.0), ("scatter", 8, 64, 0.5), ("broadcast", 8, 1024, 0.0),
    ("shuffle", 4, 16, 0.5), ("shuffle", 4, 256, 0.0), ("fanin", 8, 256, 0.5),
)


#: twice the shapes, for the surrogate's unseen-workload error: the grid above and six between its
#: points (each pattern at another fan-out and size), so a quarter held out leaves nine to learn from
WIDE_DAG_WORKLOADS = DAG_WORKLOADS + (
    ("scatter", 4, 256, 0.5), ("broadcast", 4, 64, 0.5), ("broadcast", 16, 256, 0.0),
    ("shuffle", 8, 64, 0.0), ("fanin", 4, 1024, 0.0), ("fanin", 16, 64, 0.5),
)
#: twelve more, in the wide grid's gaps (each pattern at the fan-outs and sizes it lacks there), so a
#: held-out shape has neighbours: the wide grid's extremes (broadcast 8 x 1 MiB, shuffle 4 x 16 KiB) had none
GAP_DAG_WORKLOADS = (
    ("scatter", 16, 16, 0.5), ("scatter", 4, 1024, 0.5), ("scatter", 16, 256, 0.0),
    ("broadcast", 4, 1024, 0.5), ("broadcast", 8, 64, 0.0), ("broadcast", 16, 16, 0.5),
    ("shuffle", 8, 16, 0.0), ("shuffle", 16, 64, 0.5), ("shuffle", 8, 1024, 0.5),
    ("fanin", 4, 64, 0.0), ("fanin", 8, 1024, 0.5), ("fanin", 16, 256, 0.0),
)
#: the grids ``asgard tune calibrate --workloads`` takes by name
WORKLOAD_GRIDS = {"dag": DAG_WORKLOADS, "wide": WIDE_DAG_WORKLOADS, "gaps": GAP_DAG_WORKLOADS,
                  "dense": WIDE_DAG_WORKLOADS + GAP_DAG_WORKLOADS}


def dag_workloads(spec=DAG_WORKLOADS) -> list[Workload]:
    return [Workload.from_dag(p, k, kib, compressibility=c) for p, k, kib, c in spec]
