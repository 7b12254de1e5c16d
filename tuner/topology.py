"""The orchestrator-free half of the topology analyzer: stages, a job's topology, and the edge
classification both the Dagster analyzer (:mod:`asgard_dagster.topology`) and the Airflow one
(:mod:`asgard_airflow.topology`) feed with their own graph.

A graph is given as data edges, :class:`Dep` ``(consumer, how, sources)``: ``how`` is ``direct``
(the consumer reads one producer's output; once per mapping key if either side is mapped),
``collect`` (an unmapped consumer reads every mapped instance of the producer) or ``multi`` (one
input made of several producers' outputs). ``dynamic`` names the outputs that fan out (a Dagster
``DynamicOutput``; an Airflow list that ``.expand()`` maps over); ``mapped`` is filled in with how
many instances each mapped node runs.

    >>> deps = [Dep("work", "direct", [("split", "out")]), Dep("join", "collect", [("work", "result")])]
    >>> topo = classify("demo", ["split", "work", "join"], deps, dynamic={("split", "out")}, degree=lambda n: 4)
    >>> [(s.kind, s.writes, s.reads) for s in topo.stages]
    [('scatter', 4, 4), ('fanin', 4, 4)]
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable

DEFAULT_OBJECT_BYTES = 64 * 1024
DEFAULT_DYNAMIC_DEGREE = 8


class NoDataFlowError(ValueError):
    """A job or DAG with no output read by another step: no workload for the store."""


@dataclass
class Stage:
    producer: str  # node name (alias)
    output: str
    kind: str  # scatter | broadcast | fanin | shuffle | pipe
    writes: int
    reads: int
    consumers: list[str] = field(default_factory=list)
    object_bytes: int = DEFAULT_OBJECT_BYTES

    @property
    def bytes_moved(self) -> int:
        return (self.writes + self.reads) * self.object_bytes


@dataclass
class JobTopology:
    job_name: str
    stages: list[Stage]

    @property
    def writes(self) -> int:
        return sum(s.writes for s in self.stages)

    @property
    def reads(self) -> int:
        return sum(s.reads for s in self.stages)

    @property
    def read_ratio(self) -> float:
        total = self.writes + self.reads
        return self.reads / total if total else 0.0

    def reads_per_object(self, producer: str, output: str) -> int:
        """How many times each object ``producer`` writes as ``output`` is read (an output of
        ``*``: every output of the producer's); 1 where no stage says."""
        for stage in self.stages:
            if stage.producer == producer and stage.output in (output, "*") and stage.writes:
                return max(1, round(stage.reads / stage.writes))
        return 1

    def dominant(self) -> Stage:
        """The stage that moves the most bytes (ties: the widest fan-out); :class:`NoDataFlowError`
        for a job whose steps pass nothing to each other (nothing of it reaches the store)."""
        if not self.stages:
            raise NoDataFlowError(f"{self.job_name} passes no data between its steps: nothing of it goes through "
                                  "the store, so there is no workload to tune for")
        return max(self.stages, key=lambda s: (s.bytes_moved, s.writes + s.reads))

    def workload(self, concurrency: int = 8):
        """The :class:`asgard.tuner.workload.Workload` of the dominant stage, at the job's read ratio."""
        from .workload import Workload

        stage = self.dominant()
        kib = max(1, stage.object_bytes // 1024)
        if stage.kind in ("scatter", "broadcast", "fanin", "shuffle"):
            # an asset job's fan-in over partitions that other runs wrote: its reads are the degree
            fanout = stage.reads if stage.kind == "broadcast" or not stage.writes else max(stage.writes, 1)
            if stage.kind == "shuffle":
                fanout = len(stage.consumers)
            return Workload.from_dag(stage.kind, max(1, fanout), kib, concurrency=concurrency)
        return Workload(read_ratio=min(self.read_ratio, 0.95), object_kib=kib, concurrency=concurrency)

    def as_rows(self) -> list[dict]:
        return [
            {"producer": s.producer, "output": s.output, "kind": s.kind, "writes": s.writes, "reads": s.reads,
             "object_bytes": s.object_bytes, "consumers": len(s.consumers)}
            for s in self.stages
        ]


@dataclass(frozen=True)
class Dep:
    """One data edge into ``consumer``: ``how`` it reads ``sources`` (``[(producer, output)]``)."""

    consumer: str
    how: str  # direct | collect | multi
    sources: tuple | list


def classify(name: str, nodes: Iterable[str], deps: list[Dep], dynamic: set[tuple[str, str]],
             degree: Callable[[str], int], object_bytes: dict[tuple[str, str], int] | None = None,
             mapped: dict[str, int] | None = None) -> JobTopology:
    """Classify every edge of a graph into stages (see the module docstring).

    ``degree(node)``: the fan-out of ``node``'s dynamic outputs; ``mapped``: nodes known to run
    mapped, with their instance counts (an Airflow task expanded over a literal list); the
    mapping propagates along ``direct`` edges from dynamic outputs and mapped nodes.
    """
    object_bytes = object_bytes or {}
    nodes = list(nodes)
    mapped = dict(mapped or {})
    edges: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)  # (producer, output) -> [(consumer, how)]
    for _ in range(len(nodes)):  # propagate mapping through chained .map calls
        for dep in deps:
            if dep.how == "direct":
                up = tuple(dep.sources[0])
                if up in dynamic:
                    mapped[dep.consumer] = degree(up[0])
                elif up[0] in mapped:
                    mapped[dep.consumer] = mapped[up[0]]
    for dep in deps:
        for up in dep.sources:
            edges[tuple(up)].append((dep.consumer, dep.how))

    stages: list[Stage] = []
    handled: set[tuple[str, str]] = set()
    # shuffle: a mapped node whose several outputs are each collected by a different reducer
    for producer in mapped:
        collected = [(key, cons) for key, cons in edges.items() if key[0] == producer and cons
                     and all(how == "collect" for _, how in cons)]
        if len(collected) >= 2:
            m = mapped[producer]
            reducers = [c for _, cons in collected for c, _ in cons]
            size = statistics.median([object_bytes.get(key, DEFAULT_OBJECT_BYTES) for key, _ in collected])
            stages.append(Stage(producer, "*", "shuffle", writes=m * len(collected), reads=m * len(collected),
                                consumers=reducers, object_bytes=int(size)))
            handled.update(key for key, _ in collected)
    for key, consumers in edges.items():
        if key in handled or not consumers:
            continue
        producer, output = key
        writes = mapped.get(producer, 1) * (degree(producer) if key in dynamic else 1)
        names = [c for c, _ in consumers]
        hows = {h for _, h in consumers}
        # a mapped consumer of a plain (unmapped, static) output loads it once per mapping key
        reads = sum(mapped[c] if (c in mapped and producer not in mapped and key not in dynamic) else writes
                    for c in names)
        if key in dynamic:
            kind = "scatter"
        elif "collect" in hows or "multi" in hows:
            kind = "fanin"
        elif reads > writes:
            kind = "broadcast"
        else:
            kind = "pipe"
        stages.append(Stage(producer, output, kind, writes, reads, names, object_bytes.get(key, DEFAULT_OBJECT_BYTES)))
    # multi-dependency fan-ins read many producers into one input: merge them into one stage
    fanins: dict[str, list[Stage]] = defaultdict(list)
    for s in stages:
        if s.kind == "fanin" and len(s.consumers) == 1 and s.writes == 1:
            fanins[s.consumers[0]].append(s)
    for consumer, parts in fanins.items():
        if len(parts) >= 2:
            for p in parts:
                stages.remove(p)
            stages.append(Stage("+".join(p.producer for p in parts), "*", "fanin", writes=len(parts),
                                reads=len(parts), consumers=[consumer],
                                object_bytes=int(statistics.median(p.object_bytes for p in parts))))
    return JobTopology(name, stages)


def heaviest(topologies: Iterable[tuple[str, JobTopology]],
             skipped: Callable[[str, NoDataFlowError], None] | None = None) -> tuple[str, JobTopology] | None:
    """Of ``(name, topology)`` pairs, the one whose dominant stage moves the most bytes: what a mix of
    upcoming runs is tuned for. None when none passes data between its steps (``skipped`` told of each)."""
    best = None
    for name, topology in topologies:
        try:
            moved = topology.dominant().bytes_moved
        except NoDataFlowError as exc:
            if skipped:
                skipped(name, exc)
            continue
        if best is None or moved > best[2]:
            best = (name, topology, moved)
    return best[:2] if best else None
