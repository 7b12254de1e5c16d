"""Where each output lives relative to the steps that read it (issue 37, the placement lever).

An output placed ``producer-local`` is stored as always and, besides, kept as a file on the
producer's host, which readers on that host use (``asgard.resources.stores.local_copy``). With
the IO manager's ``placement="auto"``, an output gets it where the job's executor and topology
say every step reading it runs on the producer's host:

* the in-process and multiprocess executors run every step on one host: always (where enough
  steps read it to pay for the copy: ``readers_to_pay_for_copy`` of the store's reads as measured
  here, two before any);
* dagster-celery's executor only where the producer and every reader are tagged
  ``dagster-celery/queue`` with the same queue, other than the shared default ``dagster`` (the
  project's workers take their host's queue and the shared one: a named queue is one host's);
  where all are on the shared queue, a reader lands on the producer's host about 1 time in the
  ring's hosts, and the copy is kept as a cache where those readers are still enough;
* the host-routed celery executor (:mod:`.step_routing`) like dagster-celery's, and besides where
  its one reader follows the producer to the host that ran it (:func:`.step_routing.followed_producers`);
* any other executor: where its steps run is not known here, so the ring.

An output's own ``Out(metadata={"asgard/placement": "ring" | "producer-local" | "auto"})``
wins. A ``producer-local`` (the output's or the IO manager's) that cannot serve (readers that may
run on other hosts) fails the run when its first step starts to store an output, before anything is written
(:class:`~.output_settings.PlacementCannotServeError`); so does a value that is not a placement
(:class:`~.output_settings.OutputSettingError`).
"""
from __future__ import annotations

import functools
from typing import Any

from dagster import JobDefinition, OutputContext

from asgard.resources.stores.local_copy import (
    AUTO_PLACEMENT, PLACEMENTS, PRODUCER_LOCAL, RING, PlacementChoice, choose_placement,
)

from .output_settings import OutputSettingError, PlacementCannotServeError, _output_name

#: an output's metadata key naming its placement
PLACEMENT_METADATA_KEY = "asgard/placement"
#: executors that run every step of a run on the launching host
ONE_HOST_EXECUTORS = ("in_process", "multiprocess", "multi_or_in_process")
#: dagster-celery's executor, its op tag naming a step's queue, and the queue of an untagged step
CELERY_EXECUTOR, CELERY_QUEUE_TAG, CELERY_DEFAULT_QUEUE = "celery", "dagster-celery/queue", "dagster"
#: asgard_dagster.step_routing's: dagster-celery's, with a 1:1 edge's reader sent to its producer's host
ROUTED_CELERY_EXECUTOR = "celery_host_routed"
CELERY_KINDS = (CELERY_EXECUTOR, ROUTED_CELERY_EXECUTOR)


@functools.cache
def _executor_makers() -> dict[str, Any]:
    """Each known executor's creation function, by kind (found once per process)."""
    import dagster as dg

    makers = {name: getattr(dg, f"{name}_executor").executor_creation_fn for name in ONE_HOST_EXECUTORS}
    try:
        from dagster_celery import celery_executor

        from .step_routing import host_routed_celery_executor

        makers[CELERY_EXECUTOR] = celery_executor.executor_creation_fn
        makers[ROUTED_CELERY_EXECUTOR] = host_routed_celery_executor.executor_creation_fn
    except ModuleNotFoundError:  # no dagster-celery here: no job runs on it either
        pass
    return makers


def executor_kind(job: JobDefinition) -> str:
    """The job's executor as Dagster or dagster-celery made it: a ``configured`` copy keeps its
    maker's creation function, whatever name it was given (``make_job`` names its own)."""
    made_by = job.executor_def.executor_creation_fn
    return next((kind for kind, fn in _executor_makers().items() if made_by is fn), job.executor_def.name)


def _queue(job: JobDefinition, path: str, run_tags: dict | None) -> str:
    """The celery queue the op at ``path`` is sent to (its tags over the run's over the job's)."""
    tags = {**(job.tags or {}), **(run_tags or {}), **_analysis(job)["leaves"][path].tags}
    return tags.get(CELERY_QUEUE_TAG, CELERY_DEFAULT_QUEUE)


def _requested(metadata: dict | None) -> str | None:
    value = (metadata or {}).get(PLACEMENT_METADATA_KEY)
    return None if value is None else getattr(value, "value", value)  # a MetadataValue.text


def _checked(output: str, metadata: dict | None) -> str | None:
    value = _requested(metadata)
    if value is not None and value not in PLACEMENTS:
        raise OutputSettingError(output, PLACEMENT_METADATA_KEY, value, list(PLACEMENTS))
    return value


def _leaves(job: JobDefinition) -> dict:
    from .topology import _leaf_nodes

    return _leaf_nodes(job.graph)


def _readers(job: JobDefinition) -> dict[tuple[str, str], list[str]]:
    """``{(producer op path, output): [reader op paths]}`` from the job's dependencies (an input
    of type Nothing orders its op after the producer but reads nothing)."""
    from .topology import _dependencies, _dependency_sources

    leaves = _leaves(job)
    readers: dict[tuple[str, str], list[str]] = {}
    for consumer, input_name, dep in _dependencies(job.graph):
        node = leaves.get(consumer)
        if node is not None and node.definition.input_def_named(input_name).dagster_type.is_nothing:
            continue
        for source in _dependency_sources(dep):
            readers.setdefault(source, []).append(consumer)
    return readers


def readers_on_producer_host(job: JobDefinition, producer: str, output: str,
                             run_tags: dict | None = None) -> tuple[bool | None, str]:
    """Whether every step reading ``producer``'s ``output`` runs on the producer's host, as the
    job's executor and topology say, and why (None: no step of the job reads it)."""
    readers = _analysis(job)["readers"].get((producer, output), [])
    if not readers:
        return None, "no step of this job reads it"
    executor = executor_kind(job)
    if executor in ONE_HOST_EXECUTORS:
        return True, f"the {executor} executor runs its {len(readers)} reader(s) on the producer's host"
    if executor not in CELERY_KINDS:
        return False, f"the {executor} executor: where its steps run is not known here"
    follower = _follower(job, producer) if executor == ROUTED_CELERY_EXECUTOR else None
    if follower is not None and readers == [follower]:
        return True, f"the host-routed celery executor sends its reader {follower} to the host that ran {producer}"
    mine = _queue(job, producer, run_tags)
    elsewhere = {r: q for r in readers if (q := _queue(job, r, run_tags)) != mine}
    if mine == CELERY_DEFAULT_QUEUE:
        return False, (f"the celery executor may run {producer} and its readers on any host: {producer} is on the "
                       f"shared queue '{CELERY_DEFAULT_QUEUE}', not one host's")
    if elsewhere:
        return False, (f"the celery executor routes {producer} to queue '{mine}' but its readers "
                       + ", ".join(f"{r} to '{q}'" for r, q in sorted(elsewhere.items())))
    return True, (f"the celery executor routes {producer} and its {len(readers)} reader(s) to queue '{mine}', "
                  "one host's")


def _follower(job: JobDefinition, producer: str) -> str | None:
    """The op the host-routed executor sends to ``producer``'s host, if any."""
    if "follows" not in _analysis(job):
        from .step_routing import followed_producers

        _analysis(job)["follows"] = followed_producers(job)
    return next((r for r, p in _analysis(job)["follows"].items() if p == producer), None)


_analyses: dict[int, dict] = {}


def _analysis(job: JobDefinition) -> dict:
    """The job's ops and readers, once per job definition in a process."""
    found = _analyses.get(id(job))
    if found is None or found["job"] is not job:
        found = _analyses[id(job)] = {"job": job, "leaves": _leaves(job), "readers": _readers(job)}
    return found


def check_job_placements(job: JobDefinition, run_tags: dict | None = None, io_manager_key: str | None = None,
                         io_manager_placement: str | None = None) -> None:
    """Raise for the first output of ``job`` whose ``asgard/placement`` is not a placement
    (``OutputSettingError``) or is ``producer-local`` where its readers may run on other hosts
    (``PlacementCannotServeError``); an output without that metadata stored by ``io_manager_key``
    takes ``io_manager_placement`` (the IO manager's field). The IO manager calls it before it
    stores anything; call it at definition time to fail sooner."""
    for path, node in _analysis(job)["leaves"].items():
        for out in node.definition.output_defs:
            where = f"output '{out.name}' of op '{path}'"
            key, placement = PLACEMENT_METADATA_KEY, _checked(where, out.metadata)
            if placement is None and io_manager_key is not None and out.io_manager_key == io_manager_key:
                key, placement = "placement", io_manager_placement
            if placement != PRODUCER_LOCAL:
                continue
            same, why = readers_on_producer_host(job, path, out.name, run_tags)
            if same is False:
                raise PlacementCannotServeError(
                    where, key, PRODUCER_LOCAL, why,
                    f"Tag {path} and every op reading it with the same '{CELERY_QUEUE_TAG}' (one host's queue), "
                    f"or set {key!r} to 'auto' or 'ring'")


def readers_on_any_host(job: JobDefinition, producer: str, output: str, run_tags: dict | None = None) -> bool:
    """Whether dagster-celery's executor may run ``producer`` and each of its readers on any
    worker's host (all on the shared queue): a reader then shares the producer's host by chance."""
    if executor_kind(job) not in CELERY_KINDS:
        return False
    paths = [producer, *_analysis(job)["readers"].get((producer, output), [])]
    return all(_queue(job, p, run_tags) == CELERY_DEFAULT_QUEUE for p in paths)


def placement_for(context: OutputContext, setting: str, server_hosts=lambda: None,
                  reads: int | None = None, store_read_mib_s=lambda: None) -> PlacementChoice | None:
    """The placement of the output ``context`` stores: its own metadata's, else the IO manager's
    ``setting`` (``auto`` decided here); None leaves it to the store (``ring``, nothing to show).
    Where its readers may each run on any worker's host: ``reads``, the steps that read it (a
    mapped reader's every instance), and ``server_hosts()``, the hosts the store's ring spans,
    taken for the workers' hosts; ``store_read_mib_s()``, the store's reads as measured here."""
    requested = _checked(_output_name(context), context.definition_metadata)
    if requested is None and setting not in (AUTO_PLACEMENT, PRODUCER_LOCAL):
        return None
    try:
        step = context.step_context
        job, run_tags = step.job_def, dict(step.dagster_run.tags or {})
        key = context.op_def.output_def_named(context.name).io_manager_key
    except Exception:  # an OutputContext built by hand (build_output_context): no job around it
        return choose_placement(requested or setting, None, "no job around it")
    check_job_placements(job, run_tags, key, setting)
    if requested is None and setting == PRODUCER_LOCAL:
        return PlacementChoice(PRODUCER_LOCAL, "the IO manager's placement")
    if context.has_asset_key and requested is None:
        return PlacementChoice(RING, "auto: an asset is read by later runs, on any host")
    node = context.step_key.split("[", 1)[0]
    same, why = readers_on_producer_host(job, node, context.name, run_tags)
    readers = len(_analysis(job)["readers"].get((node, context.name), []))
    steps = max(readers, reads or 0)  # a mapped reader reads it once per instance
    if readers and not same and readers_on_any_host(job, node, context.name, run_tags):
        return choose_placement(requested or AUTO_PLACEMENT, same, why, steps, server_hosts(), store_read_mib_s())
    return choose_placement(requested or AUTO_PLACEMENT, same, why, steps, store_read_mib_s=store_read_mib_s())
