"""Topology analyzer for Airflow: a DAG's tasks and XCom edges -> the workload its values put on
the store (the same classification as the Dagster analyzer: :mod:`asgard.tuner.topology`).

Every data edge (an XCom a task's argument is bound to) is classified:

* ``scatter``   a list that a task ``.expand()``-s over: k writes (the backend stores it element by
  element), k reads;
* ``broadcast`` one task's value read by several tasks, or by every instance of a mapped task
  through ``.partial()``: 1 write, k reads;
* ``fanin``     an unmapped task reading every instance of a mapped task (or one argument made of
  several tasks' values, ``merge([a, b])``): k writes, 1 reader of all;
* ``shuffle``   a mapped task with ``multiple_outputs`` whose keys are each read whole by a
  different reducer: m x r;
* ``pipe``      one value, one reader (a mapped task expanded over a mapped task: per instance).

Degrees and sizes come from the DAG's last successful run: the references the XCom backend stored
(``bytes``, ``items``; a value kept inline is sized by its JSON), how many instances each mapped
task ran; a literal ``.expand(x=[...])`` is its own degree.

    from asgard_airflow.topology import analyze_dag
    topo = analyze_dag(dag, object_bytes={("split", "return_value"): 250_000}, degrees={"split": 6})
    topo.workload()    # Workload(pattern="scatter", fanout=6, object_kib=244, ...)
"""
from __future__ import annotations

import json
import statistics
from collections import defaultdict
from typing import Any, Iterable

from asgard.tuner.topology import DEFAULT_DYNAMIC_DEGREE, Dep, JobTopology, classify

from .reference import is_reference

RETURN = "return_value"


def _is_mapped(task) -> bool:
    return hasattr(task, "partial_kwargs")


def _refs(value) -> list[tuple[str, str]]:
    """``[(producer task_id, key)]`` of the XComArgs in ``value`` (nested lists and dicts too)."""
    from airflow.sdk.definitions.xcom_arg import XComArg

    return [(op.task_id, key or RETURN) for op, key in XComArg.iter_xcom_references(value)]


def _arguments(task) -> tuple[list, dict]:
    """(expanded arguments, plain arguments) of a task: each a list of argument values."""
    if _is_mapped(task):
        expand = getattr(task, "op_kwargs_expand_input", None) or task.expand_input
        partial = dict(task.partial_kwargs)
        plain = list((partial.pop("op_kwargs", None) or {}).values()) + list(partial.pop("op_args", None) or [])
        return list(expand.value.values()), plain + [partial[f] for f in getattr(task, "template_fields", ())
                                                     if f in partial]
    args = list(getattr(task, "op_args", None) or []) + list((getattr(task, "op_kwargs", None) or {}).values())
    if not hasattr(task, "op_args"):  # a classic operator: its templated fields may hold XComArgs
        args = [getattr(task, f, None) for f in task.template_fields]
    return [], args


def graph(dag) -> tuple[list[Dep], set[tuple[str, str]], dict[str, int]]:
    """The DAG as data edges: (deps, dynamic outputs, literally mapped tasks with their lengths)."""
    deps: list[Dep] = []
    dynamic: set[tuple[str, str]] = set()
    literal: dict[str, int] = {}
    tasks = dag.task_dict
    for task_id, task in tasks.items():
        expanded, plain = _arguments(task)
        for value in expanded:
            refs = _refs(value)
            if not refs and isinstance(value, (list, tuple, dict)):
                literal[task_id] = max(literal.get(task_id, 0), len(value))
            for producer, key in refs:
                if not _is_mapped(tasks[producer]):
                    dynamic.add((producer, key))  # an unmapped task's list, mapped over
                deps.append(Dep(task_id, "direct", [(producer, key)]))
        for value in plain:
            refs = _refs(value)
            if len(refs) >= 2 and isinstance(value, (list, tuple)):
                deps.append(Dep(task_id, "multi", refs))
                continue
            for producer, key in refs:
                collect = _is_mapped(tasks[producer]) and not _is_mapped(task)
                deps.append(Dep(task_id, "collect" if collect else "direct", [(producer, key)]))
    return deps, dynamic, literal


def analyze_dag(dag, degrees: dict[str, int] | int | None = None,
                object_bytes: dict[tuple[str, str], int] | None = None) -> JobTopology:
    """Classify every XCom edge of ``dag`` (an ``airflow.sdk.DAG``).

    ``degrees``: ``{task_id: k}`` (how many elements a task's list fans out to, or how many
    instances a mapped task runs) or one number; ``object_bytes``: ``{(task_id, key): bytes}``, e.g.
    from :func:`history_from_rows`. A literal ``.expand(x=[...])`` keeps its own length.
    """
    deps, dynamic, literal = graph(dag)
    if isinstance(degrees, dict):  # a list kept inline has no item count: its mapped readers' count is its degree
        degrees = dict(degrees)
        for dep in deps:
            producer = dep.sources[0][0]
            if tuple(dep.sources[0]) in dynamic and producer not in degrees and dep.consumer in degrees:
                degrees[producer] = degrees[dep.consumer]

    def degree(task_id: str) -> int:
        if isinstance(degrees, int):
            return degrees
        return (degrees or {}).get(task_id, DEFAULT_DYNAMIC_DEGREE)

    return classify(dag.dag_id, list(dag.task_dict), deps, dynamic, degree, object_bytes, mapped=literal)


def _size(value: Any) -> tuple[int, int | None]:
    """(bytes of one object, elements) of an XCom row's stored value: the reference's, else its JSON."""
    if is_reference(value):
        items = value.get("items")
        if items:
            return int(statistics.median(value.get("item_bytes") or [value["bytes"] // items])), int(items)
        return int(value["bytes"]), None
    return len(json.dumps(value, separators=(",", ":"), default=str).encode()), None


def history_from_rows(rows: Iterable[tuple[str, int, str, Any]]) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """Degrees and median object sizes from one run's XCom rows ``(task_id, map_index, key, value)``
    (``value``: the row's parsed JSON, a reference for what the backend stored).

    A list stored element by element gives its producer's degree (``items``); a mapped task's
    degree is how many map indexes pushed a value.

        >>> ref = {"__asgard_xcom__": 1, "bytes": 600, "items": 3, "item_bytes": [200, 200, 200]}
        >>> history_from_rows([("split", -1, "return_value", ref), ("work", 0, "return_value", 7),
        ...                    ("work", 1, "return_value", 8)])
        ({'split': 3, 'work': 2}, {('split', 'return_value'): 200, ('work', 'return_value'): 1})
    """
    sizes: dict[tuple[str, str], list[int]] = defaultdict(list)
    indexes: dict[str, set[int]] = defaultdict(set)
    degrees: dict[str, int] = {}
    for task_id, map_index, key, value in rows:
        if key.startswith("_") or key in ("skipmixin_key",):  # Airflow's own bookkeeping keys
            continue
        size, items = _size(value)
        sizes[(task_id, key)].append(size)
        if items:
            degrees[task_id] = items
        if map_index is not None and map_index >= 0:
            indexes[task_id].add(map_index)
    for task_id, seen in indexes.items():
        degrees.setdefault(task_id, len(seen))
    return degrees, {k: int(statistics.median(v)) for k, v in sizes.items()}


def db_history(dag_id: str, runs: int = 5) -> dict:
    """The DAG's last successful runs, read from Airflow's metadata database (outside a task:
    the scheduler's, the CLI's or a test's process): ``{"durations": [s], "rows": [...], "run_id"}``
    with the XCom rows of the latest. Inside a task use :func:`asgard_airflow.upcoming.task_history`."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    with create_session() as session:
        recent = session.execute(
            select(DagRun.run_id, DagRun.start_date, DagRun.end_date).where(
                DagRun.dag_id == dag_id, DagRun.state == DagRunState.SUCCESS).order_by(DagRun.end_date.desc())
            .limit(runs)).all()
        if not recent:
            return {"durations": [], "rows": [], "run_id": None}
        run_id = recent[0].run_id
        rows = session.execute(select(XComModel.task_id, XComModel.map_index, XComModel.key, XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id)).all()
    parsed = [(t, m, k, json.loads(v) if isinstance(v, str) else v) for t, m, k, v in rows]
    return {"durations": [(r.end_date - r.start_date).total_seconds() for r in recent if r.start_date and r.end_date],
            "rows": parsed, "run_id": run_id}


def analyze_with_history(dag, history: dict | None = None) -> JobTopology:
    """:func:`analyze_dag` with the degrees and sizes of the DAG's last successful run
    (``history`` as :func:`db_history` or :func:`asgard_airflow.upcoming.task_history` return it;
    None: read from the metadata database)."""
    history = db_history(dag.dag_id) if history is None else history
    degrees, sizes = history_from_rows(history.get("rows") or [])
    return analyze_dag(dag, degrees or None, sizes)


_analyses: dict[int, tuple[Any, JobTopology]] = {}


def readers_of(task: Any, key: str) -> int:
    """How many times each object ``task`` pushes under ``key`` will be read, from its DAG's
    topology (reads over writes of that edge: an element of a scattered list once, a value
    ``.partial()``-ed into a mapped task once per instance); 1 where it is not known."""
    dag = getattr(task, "dag", None)
    if dag is None:
        return 1
    found = _analyses.get(id(dag))
    if found is None or found[0] is not dag:  # an id is reused once its DAG is gone
        try:
            found = _analyses[id(dag)] = (dag, analyze_dag(dag))
        except Exception:  # a DAG shape the analyzer does not know: weigh one read
            return 1
    return found[1].reads_per_object(task.task_id, key)

