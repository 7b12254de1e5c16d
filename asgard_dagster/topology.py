"""Topology analyzer: a job's DAG -> the read/write workload its outputs put on the store.

Asgard (Shankar et al., Front. HPC 2023, §2.6) inspects the DAG before it runs to extract the read/write pattern of
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

from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, GraphDefinition, JobDefinition, RunsFilter

# the stages, the topology and the edge classification are orchestrator-free (shared with Airflow)
from asgard.tuner.topology import (  # noqa: E402,F401 -- re-exported: callers import them from here
    DEFAULT_DYNAMIC_DEGREE, DEFAULT_OBJECT_BYTES, Dep, JobTopology, Stage, classify,
)


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


def _dependency_sources(dep) -> list[tuple[str, str]]:
    """The ``(producer op path, output)`` pairs one resolved dependency (:func:`_dependencies`) reads."""
    kind = type(dep).__name__
    if kind == "DependencyDefinition":
        return [(dep.node, dep.output)]
    if kind == "DynamicCollectDependencyDefinition":
        return [(dep.node_name, dep.output_name)]
    if kind == "MultiDependencyDefinition":
        return [(d.node, d.output) for d in dep.get_node_dependencies()]
    return []


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

    deps = list(_dependencies(job.graph))
    edges = []
    for consumer, _input, dep in deps:
        kind = type(dep).__name__
        if kind == "DependencyDefinition":
            edges.append(Dep(consumer, "direct", [(dep.node, dep.output)]))
        elif kind == "DynamicCollectDependencyDefinition":
            edges.append(Dep(consumer, "collect", [(dep.node_name, dep.output_name)]))
        elif kind == "MultiDependencyDefinition":
            edges.append(Dep(consumer, "multi", [(d.node, d.output) for d in dep.get_node_dependencies()]))
    topology = classify(job.name, nodes, edges, dynamic, degree, object_bytes)
    stages = topology.stages
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

