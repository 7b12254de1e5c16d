"""dagster-celery's executor, sending a step that alone reads its producer's output to the host
that ran the producer (issue 37, item 3: "routing the consumer to the producer's host through the
executor's queues").

Stock dagster-celery sends an untagged step to the shared queue, which every host's worker takes:
the reader of a 1:1 edge lands on its producer's host about one time in the hosts, and reads the
output from the ring. :func:`host_routed_celery_executor` watches which worker ran each step (the
``Celery worker`` of the worker's own engine event) and sends a step that follows a producer
(:func:`followed_producers`: it reads the producer's output, and nothing else reads any output
of that producer) to that worker's host queue. Every other step keeps its queue (its tag's, or
the shared one), so a free worker still takes it. With the IO manager's ``placement="auto"`` the
producer's output is then also kept as a copy on its host and read there; the ring stays the
source of truth, so a retry or a re-execution elsewhere still finds it.

It also polls its steps' results every ``poll_interval_seconds`` (0.1 s; dagster-celery's loop ticks
every second, and each hop of a run's critical path waited about 0.7 s for the tick:
docs/results/issue37-celery-critical-path.txt).

A worker's host queue is the part of its node name after ``@`` (``celery worker -n
dagster@<queue> -Q <queue>,dagster``, as ``asgard hosts up`` starts them); the executor routes
only to the queues its ``host_queues`` config names.
"""
from __future__ import annotations

import functools
from typing import Any

from dagster import Array, Field, JobDefinition, executor, multiple_process_executor_requirements
from dagster_celery.executor import CELERY_CONFIG

#: the op tag naming a step's celery queue (dagster_celery.tags.DAGSTER_CELERY_QUEUE_TAG)
CELERY_QUEUE_TAG = "dagster-celery/queue"
#: the metadata key of dagster-celery's worker engine event naming the worker (dagster_celery/tasks.py)
WORKER_METADATA_KEY = "Celery worker"
#: how often the run's process polls its steps' celery results, by default (dagster-celery's loop: 1 s)
POLL_INTERVAL_SECONDS = 0.1


class RoutedExecutorConfigError(ValueError):
    """The host-routed executor's config cannot serve; the message says what to give.

    Attributes:
        field: the config field at fault.
        value: what was given.
    """

    def __init__(self, field: str, value: Any, what_to_do: str):
        self.field, self.value = field, value
        super().__init__(f"{field} {value!r}: {what_to_do}")


class HostQueuesError(RoutedExecutorConfigError):
    """No host queues to route to (``host_queues`` is what was given)."""

    host_queues = property(lambda self: self.value)

    def __init__(self, host_queues: Any):
        super().__init__("host_queues", host_queues, "name at least one host queue (the queue each host's worker "
                         "takes besides the shared one, the part of its node name after '@'), or use dagster-celery's "
                         "celery_executor, which routes nothing")


class PollIntervalError(RoutedExecutorConfigError):
    """A poll interval that is not a positive number of seconds (``poll_interval_seconds``)."""

    poll_interval_seconds = property(lambda self: self.value)

    def __init__(self, poll_interval_seconds: Any):
        super().__init__("poll_interval_seconds", poll_interval_seconds, "give a positive number of seconds "
                         f"(default {POLL_INTERVAL_SECONDS}; dagster-celery polls every 1 s)")


def _is_mapped(job: JobDefinition, path: str) -> tuple[bool, Any]:
    """Whether the op at ``path`` runs once per mapping key, and the dynamic output it maps over
    (its top-level node's, where a mapped nested graph's ops inherit it)."""
    structure, top = job.graph.dependency_structure, path.split(".", 1)[0]
    if not structure.is_dynamic_mapped(top):
        return False, None
    return True, structure.get_upstream_dynamic_output_for_node(top)


def followed_producers(job: JobDefinition) -> dict[str, str]:
    """``{reader op path: producer op path}`` for each edge the executor routes: an untagged reader
    of a producer whose outputs no other op reads, over a plain edge (not a scatter of a dynamic
    output, not a collect, not one input of many), in the same mapping (one reader step per producer
    step); a reader that would follow more than one producer follows none."""
    from .topology import _dependencies, _dependency_sources, _leaf_nodes

    leaves = _leaf_nodes(job.graph)
    readers_of: dict[str, set[str]] = {}
    plain: set[tuple[str, str]] = set()
    for consumer, input_name, dep in _dependencies(job.graph):
        node = leaves.get(consumer)
        if node is None or node.definition.input_def_named(input_name).dagster_type.is_nothing:
            continue
        sources = _dependency_sources(dep)
        if type(dep).__name__ == "DependencyDefinition" and \
                not leaves[dep.node].definition.output_def_named(dep.output).is_dynamic:
            plain.add((dep.node, consumer))
        for producer, _ in sources:
            readers_of.setdefault(producer, set()).add(consumer)
    follows: dict[str, list[str]] = {}
    for producer, readers in readers_of.items():
        if len(readers) != 1:
            continue
        reader = next(iter(readers))
        if (producer, reader) in plain and _is_mapped(job, producer) == _is_mapped(job, reader) \
                and CELERY_QUEUE_TAG not in leaves[reader].tags:
            follows.setdefault(reader, []).append(producer)
    return {reader: producers[0] for reader, producers in follows.items() if len(producers) == 1}


@functools.cache
def _celery_executor_class():
    """dagster-celery's CeleryExecutor with :meth:`execute` routing followers (made once a process)."""
    from dagster_celery import core_execution_loop
    from dagster_celery.executor import CeleryExecutor, _submit_task

    class HostRoutedCeleryExecutor(CeleryExecutor):
        def __init__(self, host_queues: list[str], poll_interval_seconds: float = POLL_INTERVAL_SECONDS, **kwargs):
            super().__init__(**kwargs)
            self.host_queues = list(host_queues)
            self.poll_interval_seconds = poll_interval_seconds

        def execute(self, plan_context, execution_plan):
            follows = followed_producers(plan_context.job.get_definition())
            router = StepRouter(follows, self.host_queues)

            def submit(app, context, step, queue, priority, known_state):
                routed, why = router.queue_for(step.key, ".".join(step.node_handle.path),
                                               step.get_execution_dependency_keys(), queue)
                if routed != queue:
                    context.log.debug(f'asgard: step "{step.key}" to queue "{routed}" ({why})')
                return _submit_task(app, context, step, routed, priority, known_state)

            # the loop sleeps its module's TICK_SECONDS between polls, read afresh each tick
            core_execution_loop.TICK_SECONDS = self.poll_interval_seconds
            loop = core_execution_loop.core_celery_execution_loop
            for event in loop(plan_context, execution_plan, step_execution_fn=submit):
                if event.is_engine_event and event.step_key:
                    worker = (event.event_specific_data.metadata or {}).get(WORKER_METADATA_KEY)
                    if worker is not None:
                        router.ran(event.step_key, getattr(worker, "value", worker))
                yield event

    return HostRoutedCeleryExecutor


class StepRouter:
    """Which queue each step goes to: a follower to the host queue of the worker that ran its
    producer's step, where that is one of ``host_queues``; any other step to the queue it had."""

    def __init__(self, follows: dict[str, str], host_queues: list[str]):
        self.follows, self.host_queues = follows, set(host_queues)
        self.hosts: dict[str, str] = {}  # step key -> the host queue of the worker that ran it

    def ran(self, step_key: str, worker: str) -> None:
        host = worker.rpartition("@")[2]
        if host in self.host_queues:
            self.hosts[step_key] = host

    def queue_for(self, step_key: str, op_path: str, upstream_keys, queue: str) -> tuple[str, str]:
        producer = self.follows.get(op_path)
        if producer is None:
            return queue, "no producer to follow"
        keys = [k for k in upstream_keys if k.split("[", 1)[0] == producer]
        if len(keys) != 1 or keys[0] not in self.hosts:
            return queue, f"where {producer} ran is not known"
        return self.hosts[keys[0]], f"follows {keys[0]}, which ran there"


@executor(name="celery_host_routed", requirements=multiple_process_executor_requirements(),
          config_schema={**CELERY_CONFIG,
                         "host_queues": Field(Array(str), description=(
                             "The host queues steps may be routed to: each host's worker takes its own (the part "
                             "of its node name after '@') and the shared one.")),
                         "poll_interval_seconds": Field(float, default_value=POLL_INTERVAL_SECONDS, description=(
                             "How often the run's process polls its steps' results (dagster-celery: every 1 s). "
                             "Process-wide: runs launched in one process share the last one started."))})
def host_routed_celery_executor(init_context):
    """dagster-celery's executor whose steps that alone read a producer's output run on the host
    that ran the producer (:func:`followed_producers`); config as ``celery_executor``'s, and
    ``host_queues`` and ``poll_interval_seconds``."""
    from dagster._core.execution.retries import RetryMode

    config = init_context.executor_config
    if not config.get("host_queues"):
        raise HostQueuesError(config.get("host_queues"))
    if not config["poll_interval_seconds"] > 0:
        raise PollIntervalError(config["poll_interval_seconds"])
    return _celery_executor_class()(
        host_queues=config["host_queues"], poll_interval_seconds=config["poll_interval_seconds"],
        broker=config.get("broker"), backend=config.get("backend"),
        config_source=config.get("config_source"), include=config.get("include"),
        retries=RetryMode.from_config(config["retries"]))
