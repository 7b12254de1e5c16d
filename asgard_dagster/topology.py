"""Topology analyzer: a job's DAG -> the read/write workload its outputs put on the store.

Asgard (seed 000 §2.6) inspects the DAG before it runs to extract the read/write pattern of
each stage; this does the same for a Dagster job. Every edge (an output and the inputs that
load it) is classified:

* ``scatter``   a dynamic output fanned out with ``.map``: k writes, k reads;
* ``broadcast`` one output loaded by k ops: 1 write, k reads;
* ``fanin``     ``.collect()`` or a multi-input of k producers: k writes, 1 reader of all;
* ``shuffle``   m mapped producers with r outputs, each collected by one of r reducers: m x r;
* ``pipe``      one output, one reader.

Degrees of dynamic fan-outs and object sizes come from the job's last successful run (output
metadata ``bytes``), or from the caller; the result converts to a :class:`tuner.workload.Workload`.
"""
from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, JobDefinition, RunsFilter

DEFAULT_OBJECT_BYTES = 64 * 1024
DEFAULT_DYNAMIC_DEGREE = 8


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

    def dominant(self) -> Stage:
        """The stage that moves the most bytes (ties: the widest fan-out)."""
        return max(self.stages, key=lambda s: (s.bytes_moved, s.writes + s.reads))

    def workload(self, concurrency: int = 8):
        """The :class:`tuner.workload.Workload` of the dominant stage, at the job's read ratio."""
        from tuner.workload import Workload

        stage = self.dominant()
        kib = max(1, stage.object_bytes // 1024)
        if stage.kind in ("scatter", "broadcast", "fanin", "shuffle"):
            fanout = stage.reads if stage.kind == "broadcast" else max(stage.writes, 1)
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


def _dependencies(job: JobDefinition):
    """``[(consumer alias, input, dependency)]`` of the job's top-level graph."""
    for invocation, inputs in job.graph.dependencies.items():
        alias = invocation.alias or invocation.name
        for input_name, dep in inputs.items():
            yield alias, input_name, dep


def analyze_job(job: JobDefinition, dynamic_degree: dict[str, int] | int | None = None,
                object_bytes: dict[tuple[str, str], int] | None = None) -> JobTopology:
    """Classify every edge of ``job``.

    ``dynamic_degree``: mapping keys per dynamic output (``{node: k}`` or one number);
    ``object_bytes``: ``{(node, output): bytes}``, e.g. from :func:`history`.
    """
    object_bytes = object_bytes or {}
    nodes = {n.name: n for n in job.graph.nodes}
    dynamic = {(name, o.name) for name, n in nodes.items() for o in n.definition.output_defs if o.is_dynamic}

    def degree(node: str) -> int:
        if isinstance(dynamic_degree, int):
            return dynamic_degree
        return (dynamic_degree or {}).get(node, DEFAULT_DYNAMIC_DEGREE)

    # which nodes run once per mapping key, and how many times
    mapped: dict[str, int] = {}
    edges: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)  # (producer, output) -> [(consumer, how)]
    deps = list(_dependencies(job))
    for _ in range(len(nodes)):  # propagate mapping through chained .map calls
        for consumer, _input, dep in deps:
            kind = type(dep).__name__
            if kind == "DependencyDefinition":
                up = (dep.node, dep.output)
                if up in dynamic:
                    mapped[consumer] = degree(dep.node)
                elif dep.node in mapped:
                    mapped[consumer] = mapped[dep.node]
    for consumer, _input, dep in deps:
        kind = type(dep).__name__
        if kind == "DependencyDefinition":
            edges[(dep.node, dep.output)].append((consumer, "direct"))
        elif kind == "DynamicCollectDependencyDefinition":
            edges[(dep.node_name, dep.output_name)].append((consumer, "collect"))
        elif kind == "MultiDependencyDefinition":
            for sub in dep.get_node_dependencies():
                edges[(sub.node, sub.output)].append((consumer, "multi"))

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
    return JobTopology(job.name, stages)


_MAPPED_STEP = re.compile(r"^(?P<node>[^\[]+)(\[(?P<key>.*)\])?$")


def history(instance: DagsterInstance, job_name: str) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """Dynamic degrees and median output bytes of the job's last successful run (empty if none)."""
    runs = instance.get_runs(RunsFilter(job_name=job_name, statuses=[DagsterRunStatus.SUCCESS]), limit=1)
    if not runs:
        return {}, {}
    records = instance.get_records_for_run(runs[0].run_id, of_type=DagsterEventType.HANDLED_OUTPUT).records
    sizes: dict[tuple[str, str], list[int]] = defaultdict(list)
    keys: dict[str, set[str]] = defaultdict(set)
    for record in records:
        event = record.event_log_entry.dagster_event
        data = event.event_specific_data
        node = _MAPPED_STEP.match(event.step_key).group("node")
        meta = data.metadata or {}
        if "bytes" in meta:
            sizes[(node, data.output_name)].append(int(meta["bytes"].value))
    outputs = instance.get_records_for_run(runs[0].run_id, of_type=DagsterEventType.STEP_OUTPUT).records
    for record in outputs:
        event = record.event_log_entry.dagster_event
        handle = event.event_specific_data.step_output_handle
        if handle.mapping_key:
            keys[_MAPPED_STEP.match(handle.step_key).group("node")].add(handle.mapping_key)
    degrees = {node: len(k) for node, k in keys.items()}
    return degrees, {key: int(statistics.median(v)) for key, v in sizes.items()}


def analyze_with_history(job: JobDefinition, instance: DagsterInstance) -> JobTopology:
    degrees, sizes = history(instance, job.name)
    return analyze_job(job, degrees or None, sizes)
