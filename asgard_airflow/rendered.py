"""Each edge's decisions in the task's Rendered Template tab: the field ``asgard_edges`` (Markdown).

A task that pushes a stored value gets a row naming its codec and where it lives (placement), each
with its reason; a task that pulls one gets a row naming how its chunks were read (``chunk_reads``)
and from where (the ring or this host's copy), with the reason. Values kept in Airflow's database
(under ``[asgard] threshold_bytes``) decide nothing and get no row.

An XCom backend is handed ids, not the task: the task is the task runner's
(:func:`asgard_airflow.placement.running_task`). The field joins that task's ``template_fields``
and ``overwrite_rtif_after_execution`` is set, so the task runner sends the rendered fields again
as the task finishes (as ``@task.bash`` does for its command). The user's DAG changes nothing.
"""
from __future__ import annotations

from typing import Any

from .placement import running_task

FIELD = "asgard_edges"
#: rows shown per task (a fan-in of many mapped values names the rest by count)
MAX_ROWS = 50
HEAD = ["| edge | bytes | decision | why |", "|---|---|---|---|"]

# rows per task object of this process (a task process runs one task; ``airflow dags test`` all of a run's)
_rows: dict[int, list[str]] = {}
# rows of a mapped task's pulls while its arguments render: the operator it unmaps to does not exist
# yet (its fields are the mapped task's: a field added there fails the render), so they wait for it
_waiting: dict[tuple, list[str]] = {}


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _show(task: Any, row: str) -> None:
    from airflow.sdk import BaseOperator

    ids = (getattr(task, "dag_id", None), getattr(task, "task_id", None))
    if not isinstance(task, BaseOperator):  # a MappedOperator, rendering the instance's arguments
        _waiting.setdefault(ids, []).append(row)
        return
    rows = _rows.setdefault(id(task), [])
    rows.extend(_waiting.pop(ids, []))
    rows.append(row)
    more = len(rows) - MAX_ROWS
    text = "\n".join(HEAD + rows[:MAX_ROWS] + ([f"\n... and {more} more edge(s)"] if more > 0 else []))
    if FIELD not in task.template_fields:
        task.template_fields = (*task.template_fields, FIELD)
        task.template_fields_renderers = {**(getattr(task, "template_fields_renderers", None) or {}), FIELD: "md"}
    task.overwrite_rtif_after_execution = True
    setattr(task, FIELD, text)


def record_push(task: Any | None, where: dict, ref: dict, codec_why: str, codec_reasons: list[str]) -> None:
    """The pushing ``task``'s row (the running task, :func:`running_task`) for the value ``ref``
    stands for: its codec, placement and replicas, and why (``codec_why``: the setting that named
    the codec, where no choice gave ``codec_reasons``)."""
    if task is None:
        return
    readers = sorted(getattr(t, "task_id", "?") for t in (getattr(task, "downstream_list", None) or []))
    edge = f"push `{where['key']}` to {', '.join(f'`{r}`' for r in readers) or 'no task downstream'}"
    codec_why = "; ".join(dict.fromkeys(codec_reasons)) or codec_why
    placement = ref.get("placement", "ring")
    placement_why = ref.get("placement_reason") or "[asgard] placement = ring"
    copies = f"; replicas {_cell(ref['replicas'])}" if ref.get("replicas_reason") else ""
    copies_why = f"; replicas: {_cell(ref['replicas_reason'])}" if ref.get("replicas_reason") else ""
    _show(task, f"| {_cell(edge)} | {ref.get('bytes', 0):,} | codec {_cell(ref.get('codec'))}; placement "
                f"{_cell(placement)}{copies} | codec: {_cell(codec_why)}; placement: {_cell(placement_why)}{copies_why} |")


def record_pull(ref: dict, where: dict, got: Any) -> None:
    """The pulling task's row for one value read: how its chunks were read and from where, and why."""
    task = running_task()
    if task is None:
        return
    edge = f"pull `{where['task_id']}.{where['key']}`"
    if where.get("map_index", -1) not in (-1, None):
        edge += f" [{where['map_index']}]"
    source = got.source + (f" ({got.fallback}: the ring served)" if got.fallback else "")
    decision = f"{source}; chunk reads {got.chunk_reads}" if got.chunk_reads else source
    why = got.chunk_reads_reason or ("a copy on this host" if got.source != "ring" else "the store reads at its "
                                     "consistency")
    _show(task, f"| {_cell(edge)} | {got.manifest.size:,} | {_cell(decision)}, {got.seconds:.3f} s | {_cell(why)} |")
