"""The paper's applications as Dagster jobs, bound to any backend's IO manager.

* ``video_analytics`` -- scatter (Asgard paper §3.1.1), :mod:`asgard.pipelines.video_analytics`
* ``lightgbm_forest`` -- broadcast (Asgard paper §3.1.2), :mod:`asgard.pipelines.lightgbm_forest`
* ``word_count`` -- shuffle (Marvel paper §4.2), :mod:`asgard.pipelines.word_count`
* ``etl_columnar`` -- scatter, broadcast and fan-in of Arrow tables, 40-250 MiB an edge (issue 37's
  data-heavy day), :mod:`asgard.pipelines.etl_columnar`
* ``log_analytics`` -- scatter of CSV text parsed into Arrow tables, 70-270 MiB an edge (the day's text),
  :mod:`asgard.pipelines.log_analytics`

Each graph's first op takes the run config ``fanout`` (the degree of the fan-out) and
``scale`` (the data size); :func:`run_config` builds it. :func:`make_job` binds the
``io_manager`` resource to :func:`asgard.pipelines.backends.io_manager_for` and the multiprocess
executor, and is what ``build_reconstructable_job`` reconstructs in each step's process::

    from dagster import DagsterInstance, build_reconstructable_job, execute_job
    job = build_reconstructable_job("asgard.pipelines.jobs", "make_job", reconstructable_args=("word_count", "fs_stock"))
    with DagsterInstance.local_temp() as instance:  # multiprocess needs a non-ephemeral instance
        with execute_job(job, instance=instance, run_config=run_config("word_count", fanout=4)) as res:
            counts = res.output_for_node("merge_counts")["counts"]

or simply :func:`run_app`. Command line: ``python -m asgard.pipelines.jobs word_count fs_stock --fanout 4``.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from asgard.pipelines.etl_columnar import etl_columnar
from asgard.pipelines.lightgbm_forest import lightgbm_forest
from asgard.pipelines.log_analytics import log_analytics
from asgard.pipelines.video_analytics import video_analytics
from asgard.pipelines.word_count import word_count

APPS: dict[str, dg.GraphDefinition] = {
    "video_analytics": video_analytics,
    "lightgbm_forest": lightgbm_forest,
    "word_count": word_count,
    "etl_columnar": etl_columnar,
    "log_analytics": log_analytics,
}
#: the op whose config carries ``fanout`` and ``scale``
FIRST_OP = {"video_analytics": "split_video", "lightgbm_forest": "prepare_digits", "word_count": "split_corpus",
            "etl_columnar": "generate", "log_analytics": "land_logs"}
#: the op whose output is the result dict
FINAL_OP = {"video_analytics": "summarize", "lightgbm_forest": "evaluate", "word_count": "merge_counts",
            "etl_columnar": "merge_aggregates", "log_analytics": "merge_traffic"}
#: fan-out type, as the Asgard topology analyzer names it
FANOUT_KIND = {"video_analytics": "scatter", "lightgbm_forest": "broadcast", "word_count": "shuffle",
               "etl_columnar": "scatter", "log_analytics": "scatter"}
#: small data sizes (tests: each job well under a minute on 2 cores)
SMALL = {
    "video_analytics": {"fanout": 6, "scale": 0.1},
    "lightgbm_forest": {"fanout": 3, "scale": 2},
    "word_count": {"fanout": 3, "reducers": 2, "scale": 0.25},
    "etl_columnar": {"fanout": 3, "scale": 0.05},
    "log_analytics": {"fanout": 3, "scale": 0.05},
}
#: heavy libraries the forkserver imports once, so that each step's process does not. The
#: forkserver is one per calling process and keeps what its first run preloaded, so the list
#: is the same for every app (import only: no thread pools start before the fork). The last is what
#: Dagster and the IO managers import in each step's process (the instance's storages, every backend).
PRELOAD = ["asgard.pipelines.jobs", "asgard.pipelines.data", "numpy", "av", "PIL.Image", "torch", "efficientnet_lite_pytorch",
           "lightgbm", "sklearn.decomposition", "sklearn.model_selection", "pyarrow", "pyarrow.compute", "pyarrow.csv",
           "asgard.pipelines.forkserver_preload"]


def multiprocess_executor_for(start_method: str = "forkserver", max_concurrent: int = 2) -> dg.ExecutorDefinition:
    """Dagster's multiprocess executor starting each step's process by ``start_method``: ``"forkserver"``
    forks it from a server that preloaded :data:`PRELOAD`, ``"spawn"`` starts a fresh interpreter."""
    start_cfg = {"preload_modules": PRELOAD} if start_method == "forkserver" else {}
    return dg.multiprocess_executor.configured(
        {"max_concurrent": max_concurrent, "start_method": {start_method: start_cfg}},
        name=f"multiprocess_{start_method}_{max_concurrent}")


def make_job(app: str, backend: str, max_concurrent: int = 2, start_method: str = "forkserver",
             network: str = "loopback") -> dg.JobDefinition:
    """The job of ``app`` with ``io_manager`` bound to ``backend`` and the multiprocess executor.

    ``start_method`` is how the executor starts each step's process: ``"forkserver"`` (default)
    forks it from a server that has imported dagster and this module already (about 1 s less
    per step on this machine, and the heavy libraries of :data:`PRELOAD`: several seconds
    per torch step), ``"spawn"`` (Dagster's default) starts a fresh interpreter per step.
    Scripts that run these jobs need the ``if __name__ == "__main__":`` guard either way.
    ``network``: the profile (:mod:`asgard.resources.network`) whose server of ``backend`` the IO manager uses;
    ``"hosts3"`` (:mod:`asgard.pipelines.hosts`): dagster-celery's executor on the emulated hosts' workers
    and the stores they reach (``max_concurrent`` and ``start_method`` do not apply).
    """
    from asgard.pipelines.backends import io_manager_for
    from asgard.pipelines.hosts import HOSTS_NETWORK, celery_executor

    if app not in APPS:
        raise KeyError(f"unknown app {app!r}; known: {sorted(APPS)}")
    if network == HOSTS_NETWORK:  # the emulated hosts' celery workers take the steps
        executor = celery_executor()
    else:
        executor = multiprocess_executor_for(start_method, max_concurrent)
    return APPS[app].to_job(
        name=f"{app}__{backend}",
        resource_defs={"io_manager": io_manager_for(backend, network)},
        executor_def=executor,
        tags={"asgard/app": app, "asgard/backend": backend, "asgard/fanout_kind": FANOUT_KIND[app],
              "asgard/network": network},
    )


def run_config(app: str, fanout: int | None = None, scale: float | None = None, **extra: Any) -> dict:
    """Run config for ``app``: ``fanout``/``scale`` (and e.g. ``reducers``) on its first op; None = default."""
    cfg = {k: v for k, v in {"fanout": fanout, "scale": scale, **extra}.items() if v is not None}
    return {"ops": {FIRST_OP[app]: {"config": cfg}}}


@dataclass
class AppRun:
    app: str
    backend: str
    success: bool
    seconds: float
    run_id: str
    result: dict | None
    step_seconds: dict[str, float] = field(default_factory=dict)
    #: every output an IO manager stored: (step key, output name), one per mapping key
    writes: list[tuple[str, str]] = field(default_factory=list)
    #: every input an IO manager loaded: (step key, input name, upstream step key, upstream output name)
    reads: list[tuple[str, str, str, str]] = field(default_factory=list)


def io_events(instance: dg.DagsterInstance, run_id: str) -> tuple[list[tuple[str, str]], list[tuple[str, str, str, str]]]:
    """The IO manager's writes and reads of a run, from its event log (the DAG's data flow)."""
    writes = [(e.step_key, e.dagster_event.event_specific_data.output_name)
              for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.HANDLED_OUTPUT)]
    reads = []
    for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.LOADED_INPUT):
        d = e.dagster_event.event_specific_data
        reads.append((e.step_key, d.input_name, d.upstream_step_key, d.upstream_output_name))
    return writes, reads


def run_app(app: str, backend: str, fanout: int | None = None, scale: float | None = None,
            instance: dg.DagsterInstance | None = None, max_concurrent: int = 2,
            start_method: str = "forkserver", raise_on_error: bool = True, network: str = "loopback",
            io_manager_config: dict[str, Any] | None = None, **extra: Any) -> AppRun:
    """Run ``app`` on ``backend`` end to end (reconstructable, multiprocess) and load its result.

    Without ``instance``, a temporary local instance is made and removed afterwards.
    ``io_manager_config``: fields of the IO manager set in the run's config (e.g. a tuned
    ``chunk_size_bytes``), as a user would in the launchpad.
    """
    if instance is None:
        with tempfile.TemporaryDirectory(prefix="asgard-dagster-") as tmp:
            with dg.DagsterInstance.local_temp(tempdir=tmp) as inst:
                return run_app(app, backend, fanout, scale, inst, max_concurrent, start_method,
                               raise_on_error, network, io_manager_config, **extra)
    job = dg.build_reconstructable_job("asgard.pipelines.jobs", "make_job",
                                       reconstructable_args=(app, backend, max_concurrent, start_method, network))
    config = run_config(app, fanout, scale, **extra)
    if io_manager_config:
        config["resources"] = {"io_manager": {"config": dict(io_manager_config)}}
    t0 = time.perf_counter()
    with dg.execute_job(job, instance=instance, run_config=config, raise_on_error=raise_on_error) as res:
        seconds = time.perf_counter() - t0
        result = res.output_for_node(FINAL_OP[app]) if res.success else None
        steps = {s.step_key: s.end_time - s.start_time
                 for s in instance.get_run_step_stats(res.run_id) if s.end_time and s.start_time}
        writes, reads = io_events(instance, res.run_id)
        return AppRun(app, backend, res.success, seconds, res.run_id, result, steps, writes, reads)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    p = argparse.ArgumentParser(description="Run one of the paper's applications as a Dagster job.")
    p.add_argument("app", choices=sorted(APPS))
    p.add_argument("backend", nargs="?", default="fs_stock")
    p.add_argument("--fanout", type=int)
    p.add_argument("--scale", type=float)
    p.add_argument("--small", action="store_true", help="the test-size fanout and scale")
    p.add_argument("--max-concurrent", type=int, default=2)
    p.add_argument("--start-method", choices=["forkserver", "spawn"], default="forkserver")
    a = p.parse_args(argv)
    extra = dict(SMALL[a.app]) if a.small else {}
    if a.fanout is not None:
        extra["fanout"] = a.fanout
    if a.scale is not None:
        extra["scale"] = a.scale
    run = run_app(a.app, a.backend, max_concurrent=a.max_concurrent, start_method=a.start_method, **extra)
    summary = {k: v for k, v in (run.result or {}).items() if k not in ("counts", "chunks", "members", "top")}
    if run.result and a.app == "video_analytics":
        summary["top1"] = [(c["index"], c["scene"], c["top1_label"], round(c["top1_prob"], 3))
                           for c in run.result["chunks"]]
    print(json.dumps({"app": run.app, "backend": run.backend, "success": run.success,
                      "seconds": round(run.seconds, 2), "result": summary,
                      "slowest_steps": sorted(run.step_seconds.items(), key=lambda kv: -kv[1])[:5]},
                     default=str))
    return 0 if run.success else 1


if __name__ == "__main__":
    raise SystemExit(main())
