"""The suite's multiprocess jobs with their steps forked from a forkserver that has imported Dagster and the
pipelines' libraries (:data:`asgard.pipelines.jobs.PRELOAD`), as the pipelines' own jobs run. Dagster's default,
``spawn``, starts a fresh interpreter per step that imports them itself: about 4.5 CPU-s a step in CI
(docs/results/ci-time.txt), and the ring's tests alone run over a hundred steps.

A forked step has its forkserver's environment, not its caller's, so a run goes through
:func:`forkserver_with_this_environment` first: a forkserver started under another environment is stopped
and one is started under this one. Python's forkserver has no public stop; its private names are checked by
tests/test_forkserver_preload.py."""
from __future__ import annotations

import multiprocessing.forkserver as forkserver
import os
import sys
import threading

from asgard.pipelines.jobs import PRELOAD, multiprocess_executor_for

#: the pipelines' jobs' executor: the same forkserver serves both kinds of runs
FORKSERVER_EXECUTOR = multiprocess_executor_for("forkserver", max_concurrent=2)
#: what that executor's forkserver preloads (Dagster puts its executor module first when a list lacks it)
PRELOAD_MODULES = ["dagster._core.executor.multiprocess", *PRELOAD]

#: what each forkserver this process started saw (environment, working directory, sys.path), by its pid
_STARTED_UNDER: dict[int, tuple] = {}
_LOCK = threading.Lock()  # runs start from several threads (a load beside a reconfiguration)


def forkserver_with_this_environment() -> None:
    """Make the process's forkserver one started under the current environment, working directory and
    ``sys.path`` (what a forked step has), preloading :data:`PRELOAD_MODULES`; call it before a run."""
    server = forkserver._forkserver
    now = (dict(os.environ), os.getcwd(), list(sys.path))
    with _LOCK:
        pid = server._forkserver_pid
        if pid is not None and _STARTED_UNDER.get(pid) != now:
            server._stop()  # no run of this process is in flight: its steps' results come back through it
        if server._forkserver_pid is None:
            forkserver.set_forkserver_preload(PRELOAD_MODULES)
            server.ensure_running()
            _STARTED_UNDER[server._forkserver_pid] = now


def stop_forkserver() -> None:
    """Stop the process's forkserver (a module's runs are over): a later module's runs start their own, under
    their environment, as they would have without this one's."""
    with _LOCK:
        if forkserver._forkserver._forkserver_pid is not None:
            forkserver._forkserver._stop()
