"""Topology analyzer: a job's DAG -> the read/write workload its outputs put on the store.

Asgard (seed 000 §2.6) inspects the DAG before it runs to extract the read/write pattern of
each stage; this does the same for a Dagster job. Every edge (an output and the inputs that
load it) is classified:

* ``scatter``   a dynamic output fanned out with ``.map``: k writes, k reads;
* ``broadcast`` one output loaded by k ops: 1 write, k reads;
* ``fanin``     ``.collect()`` or a multi-input of k producers: k writes, 1 reader of all;
* ``shuffle``   m mapped producers with r outputs, each collected by one of r reducers: m x r;
* ``pipe``      one output, one reader.

Nested graphs (and graph-backed assets) are read through: an edge into or out of a graph is the
edge between the ops it connects, named by path (``outer.inner``, as in step keys). In an asset
job, an input that loads an asset the job does not produce (materialized by other runs) is a
read of every upstream partition it spans for the consuming asset's latest partition: a
``fanin`` of k for a window of k days or an unpartitioned asset over k partitions.

Degrees of dynamic fan-outs and object sizes come from the job's last successful run (output
metadata ``bytes``; an upstream asset's from its latest materialization), or from the caller; the
result converts to a :class:`asgard.tuner.workload.Workload`.
"""
from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, GraphDefinition, JobDefinition, RunsFilter

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
        """The :class:`asgard.tuner.workload.Workload` of the dominant stage, at the job's read ratio."""
        from asgard.tuner.workload import Workload

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


def _leaf_nodes(graph, prefix: str = "") -> dict:
    """``{path: node}`` of every op, descending into nested graphs (and graph-backed assets):
    an op ``inner`` of graph node ``outer`` is ``outer.inner``, as in its step key."""
    leaves = {}
    for node in graph.nodes:
        path = f"{prefix}{node.name}"
        if isinstance(node.definition, GraphDefinition):
            leaves.update(_leaf_nodes(node.definition, f"{path}."))
        else:
            leaves[path] = node
    return leaves


def _producer(graph, prefix: str, node_name: str, output: str) -> tuple[str, str]:
    """The op output behind ``node_name``'s ``output``, through a nested graph's output mapping."""
    definition = graph.node_named(node_name).definition
    if not isinstance(definition, GraphDefinition):
        return f"{prefix}{node_name}", output
    mapping = next(m for m in definition.output_mappings if m.graph_output_name == output)
    return _producer(definition, f"{prefix}{node_name}.", mapping.maps_from.node_name, mapping.maps_from.output_name)


def _consumers(graph, prefix: str, node_name: str, input_name: str) -> list[tuple[str, str]]:
    """The op inputs that ``node_name``'s ``input_name`` feeds, through a nested graph's input mappings."""
    definition = graph.node_named(node_name).definition
    if not isinstance(definition, GraphDefinition):
        return [(f"{prefix}{node_name}", input_name)]
    return [c for m in definition.input_mappings if m.graph_input_name == input_name
            for c in _consumers(definition, f"{prefix}{node_name}.", m.maps_to.node_name, m.maps_to.input_name)]


def _dependencies(graph, prefix: str = ""):
    """``[(consumer op path, input, dependency)]`` of every op in the graph, nested graphs flattened:
    the dependency names producer ops by path, so an edge into or out of a nested graph reads as
    the edge between the ops it connects."""
    from dagster import DependencyDefinition, MultiDependencyDefinition
    from dagster._core.definitions.dependency import DynamicCollectDependencyDefinition

    def resolve(dep):
        kind = type(dep).__name__
        if kind == "DependencyDefinition":
            return DependencyDefinition(*_producer(graph, prefix, dep.node, dep.output))
        if kind == "DynamicCollectDependencyDefinition":
            return DynamicCollectDependencyDefinition(*_producer(graph, prefix, dep.node_name, dep.output_name))
        if kind == "MultiDependencyDefinition":
            return MultiDependencyDefinition([DependencyDefinition(*_producer(graph, prefix, d.node, d.output))
                                              for d in dep.get_node_dependencies()])
        return dep

    for invocation, inputs in graph.dependencies.items():
        name = invocation.alias or invocation.name
        for input_name, dep in inputs.items():
            resolved = resolve(dep)
            for consumer, consumer_input in _consumers(graph, prefix, name, input_name):
                yield consumer, consumer_input, resolved
    for node in graph.nodes:
        if isinstance(node.definition, GraphDefinition):
            yield from _dependencies(node.definition, f"{prefix}{node.name}.")


def _asset_inputs(job: JobDefinition, leaves: dict, fed: set[tuple[str, str]]) -> list[Stage]:
    """Inputs of an asset job's ops that load an asset this job does not produce (an upstream
    materialized by other runs): one read per upstream partition the input spans, for the
    latest partition of the consuming asset (a window of k days reads k objects, an
    unpartitioned asset downstream of n partitions reads n)."""
    layer = job.asset_layer
    produced = set(layer.selected_asset_keys) if layer else set()
    if not produced:
        return []
    from dagster._core.definitions.dependency import NodeHandle

    graph = layer.asset_graph
    stages = []
    for path, node in leaves.items():
        handle = NodeHandle.from_string(path)
        # the asset(s) this op belongs to: a graph-backed asset's ops share the root node's
        assets_def = layer.get_assets_def_for_node(NodeHandle(handle.path[0], None))
        for input_def in node.definition.input_defs:
            if (path, input_def.name) in fed:
                continue
            parent = layer.get_asset_key_for_node_input(handle, input_def.name)
            if parent is None or parent in produced:
                continue
            children = [k for k in (assets_def.keys if assets_def else ()) if k in produced and graph.has(k)
                        and parent in graph.get(k).parent_keys]
            reads = 1
            if children and graph.has(parent) and graph.get(parent).is_partitioned:
                child_def = graph.get(children[0]).partitions_def
                last = child_def.get_last_partition_key() if child_def else None
                mapped = graph.get_parent_partition_keys_for_child(last, parent, children[0])
                reads = max(1, len(mapped.partitions_subset.get_partition_keys()))
            stages.append(Stage(parent.to_user_string(), "*", "fanin" if reads > 1 else "pipe", writes=0,
                                reads=reads, consumers=[path]))
    return stages


def analyze_job(job: JobDefinition, dynamic_degree: dict[str, int] | int | None = None,
                object_bytes: dict[tuple[str, str], int] | None = None) -> JobTopology:
    """Classify every edge of ``job``.

    ``dynamic_degree``: mapping keys per dynamic output (``{node: k}`` or one number);
    ``object_bytes``: ``{(node, output): bytes}``, e.g. from :func:`history`.
    """
    object_bytes = object_bytes or {}
    nodes = _leaf_nodes(job.graph)
    dynamic = {(name, o.name) for name, n in nodes.items() for o in n.definition.output_defs if o.is_dynamic}

    def degree(node: str) -> int:
        if isinstance(dynamic_degree, int):
            return dynamic_degree
        return (dynamic_degree or {}).get(node, DEFAULT_DYNAMIC_DEGREE)

    # which nodes run once per mapping key, and how many times
    mapped: dict[str, int] = {}
    edges: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)  # (producer, output) -> [(consumer, how)]
    deps = list(_dependencies(job.graph))
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
    for stage in _asset_inputs(job, nodes, {(c, i) for c, i, _ in deps}):
        stage.object_bytes = object_bytes.get((stage.producer, "*"), DEFAULT_OBJECT_BYTES)
        stages.append(stage)
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
    """:func:`analyze_job` with the degrees and sizes of the job's last successful run; an
    upstream asset that other runs materialize is sized by its latest materialization."""
    from dagster import AssetKey

    degrees, sizes = history(instance, job.name)
    topology = analyze_job(job, degrees or None, sizes)
    for stage in topology.stages:
        if stage.writes == 0:  # loaded from an asset this job does not produce
            event = instance.get_latest_materialization_event(AssetKey.from_user_string(stage.producer))
            size = (event.asset_materialization.metadata or {}).get("bytes") if event and event.asset_materialization else None
            if size is not None:
                stage.object_bytes = int(size.value)
    return topology
