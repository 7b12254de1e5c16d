"""``asgard airflow purge``: delete the stored XCom values of DAG runs that Airflow no longer has.

``airflow db clean`` deletes old DAG runs and their xcom rows straight from the metadata
database, without calling the XCom backend, so the objects those rows referred to stay in the
store until their TTL. This command finds them and deletes them now::

    $ asgard airflow purge                        # runs missing from Airflow's database (after `airflow db clean`)
    $ asgard airflow purge --dag-id etl           # every run of one DAG
    $ asgard airflow purge --run-id manual__2026-01-01T00:00:00+00:00
    $ asgard airflow purge --older-than 7d        # runs last written more than 7 days ago (also 12h, 30m, 2026-01-01)
    $ asgard airflow purge --older-than 2d --orphans --dry-run

It reads the same ``[asgard]`` settings and metadata database as Airflow (``AIRFLOW_HOME``,
``AIRFLOW__ASGARD__*``), and walks the per-run markers the backend writes (scope
``airflow-runs``): each names a run's scope ``airflow/<dag_id>/<run_id>``, purged whole.
"""
from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone

import click

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_older_than(text: str, now: float | None = None) -> float:
    """A cutoff time (epoch seconds) from ``7d``, ``12h``, ``30m``, ``90s``, ``2w`` or an ISO date."""
    now = time.time() if now is None else now
    match = _DURATION.match(text)
    if match:
        return now - float(match.group(1)) * _UNITS[match.group(2)]
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither a duration (7d, 12h, 30m, 90s, 2w) nor an ISO date "
                                 "(2026-01-01, 2026-01-01T12:00:00+00:00)", param_hint="--older-than") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def airflow_runs() -> set[tuple[str, str]]:
    """``(dag_id, run_id)`` of every DAG run in Airflow's metadata database."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return {(d, r) for d, r in session.execute(select(DagRun.dag_id, DagRun.run_id))}


def stored_runs(store) -> list[dict]:
    """The runs with values in the store: ``dag_id``, ``run_id``, ``scope`` and ``written_at``
    (the last time a task process of the run first stored a value)."""
    from asgard.resources.stores.base import ObjectKey

    from .xcom import RUNS_SCOPE, scope_for_run

    runs = []
    for path in store.list_paths(RUNS_SCOPE):
        dag_id, _, run_id = path.partition("/")  # a dag_id has no '/'
        if not run_id:
            continue
        manifest = store.read_manifest(ObjectKey(RUNS_SCOPE, path))
        runs.append({"dag_id": dag_id, "run_id": run_id, "scope": scope_for_run(dag_id, run_id),
                     "written_at": manifest.created_at if manifest else None})
    return runs


def select_runs(runs: list[dict], existing: set | None, dag_id: str | None, run_id: str | None,
                cutoff: float | None, orphans: bool) -> list[dict]:
    """Runs to purge: with no filter, those Airflow no longer has; with filters, those they match
    (and, with ``orphans``, that Airflow no longer has)."""
    if dag_id is None and run_id is None and cutoff is None:
        orphans = True
    chosen = []
    for run in runs:
        if dag_id is not None and run["dag_id"] != dag_id:
            continue
        if run_id is not None and run["run_id"] != run_id:
            continue
        if cutoff is not None and (run["written_at"] or 0) >= cutoff:
            continue
        if orphans and (run["dag_id"], run["run_id"]) in existing:
            continue
        chosen.append(run)
    return chosen


def purge_runs(store, runs: list[dict]) -> list[dict]:
    """Delete each run's scope, then its marker (last: a purge cut short is found again)."""
    from asgard.resources.stores.base import ObjectKey

    from .xcom import run_marker_key

    done = []
    for run in runs:
        objects = len(store.list_paths(run["scope"]))
        store.purge_scope(run["scope"])
        marker: ObjectKey = run_marker_key(run["dag_id"], run["run_id"])
        store.delete(marker)
        done.append({**run, "objects": objects})
    return done


@click.group("airflow")
def airflow():
    """The Airflow XCom backend's stored values (asgard_airflow.CassandraXComBackend)."""


@airflow.command("purge")
@click.option("--dag-id", default=None, help="Only runs of this DAG (whether or not Airflow still has them).")
@click.option("--run-id", default=None, help="Only this run id.")
@click.option("--older-than", default=None, help="Only runs whose values were last written before: 7d, 12h, 30m, "
              "90s, 2w, or an ISO date.")
@click.option("--orphans", is_flag=True, help="With a filter: only runs Airflow's database no longer has "
              "(without any filter, that is the default).")
@click.option("--dry-run", is_flag=True, help="List what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
def purge(dag_id, run_id, older_than, orphans, dry_run, as_json):
    """Delete stored XCom values of DAG runs: by default those whose runs are gone from Airflow's
    metadata database (what `airflow db clean` left behind in the store)."""
    try:
        import airflow  # noqa: F401 -- Airflow first: its start-up resolves [core] xcom_backend, i.e. imports .xcom
    except ImportError as exc:
        raise click.ClickException(f"asgard airflow purge needs Airflow ({exc}): pip install -e '.[airflow]'") from exc

    from .xcom import configured_store, read_settings

    cutoff = parse_older_than(older_than) if older_than else None
    settings = read_settings()
    store = configured_store(settings)
    runs = stored_runs(store)
    needs_db = orphans or (dag_id is None and run_id is None and cutoff is None)
    existing = airflow_runs() if needs_db else None
    chosen = select_runs(runs, existing, dag_id, run_id, cutoff, orphans)
    done = chosen if dry_run else purge_runs(store, chosen)
    if as_json:
        click.echo(json.dumps({"backend": settings.backend, "dry_run": dry_run, "stored_runs": len(runs),
                               "purged": done}, indent=2, default=str))
        return
    verb = "would purge" if dry_run else "purged"
    for run in done:
        objects = f" ({run['objects']} objects)" if "objects" in run else ""
        click.echo(f"{verb} {run['scope']}{objects}")
    click.echo(f"{len(done)} of {len(runs)} stored runs {verb} on {settings.backend}")
