"""What a task of the apps' DAGs (:mod:`asgard.pipelines.airflow_apps`) imports after an Airflow
celery worker forks its process, imported once in the worker instead.

An Airflow 3 celery worker runs each task in a process it forks (the Task SDK's supervisor,
``os.fork`` on Linux). That process parses the DAG file, opens the XCom backend's store and runs
the op: Dagster, pyarrow, pandas, the driver and the codecs, about 1.7 CPU-seconds of imports a
task on this machine's 2 cores (docs/results/ci-time.txt), paid by every task of a run.
The emulated hosts' workers import this module when celery starts them
(:mod:`asgard.resources.workers.airflow_worker`), before their pool forks, so each task inherits it.
tests/test_celery_hosts.py checks a task's process imports no third-party or project module after the fork.

Imports only: nothing here starts a thread or opens a file or socket before the fork.
"""
# ruff: noqa: F401
import os
import sys

# the Task SDK's runner and its supervisor, and the DAG file's parse (Airflow's DagBag, its
# serialized DAG models and timetables)
import airflow.dag_processing.bundles.local
import airflow.dag_processing.dagbag
import airflow.dag_processing.importers.python_importer
import airflow.models.hitl_history
import airflow.models.taskinstancehistory
import airflow.models.tasklog
import airflow.sdk.definitions.asset.metadata
import airflow.sdk.definitions.connection
import airflow.sdk.execution_time.coordinator
import airflow.sdk.execution_time.request_handlers
import airflow.sdk.execution_time.schema.migrator
import airflow.sdk.execution_time.supervisor
import airflow.sdk.execution_time.task_runner
import airflow.serialization.serialized_objects
import airflow.version
import asgard_airflow.retune
import asgard.pipelines.airflow_apps
# the deployment's [core] hostname_callable, which a task's process calls to say where it runs
import asgard.resources.workers.airflow_worker

# the XCom backends: ours and its store, the stock peer's (common-io on the amazon provider's s3fs)
import asgard_airflow.xcom
import asgard.resources.stores.cql
import cassandra.cluster
import isal.igzip
import lz4.frame
import numcodecs.blosc
import zstandard
import airflow.providers.common.io.xcom.backend
import s3fs

# the ops and their libraries (the ETL's Arrow compute, the logs' CSV parsing, the tables as pandas)
import dagster
import numpy
import pandas
import pyarrow
import pyarrow.compute
import pyarrow.csv
import pyarrow.pandas_compat
import asgard.pipelines.etl_columnar
import asgard.pipelines.lightgbm_forest
import asgard.pipelines.log_analytics
import asgard.pipelines.word_count
import asgard.resources.network.namespace

#: the modules a process had when it was forked (the worker's pool and task processes are forks):
#: a task's process reads what it imported since (pipelines/airflow_dags/asgard_hosts_check.py)
FORKED_WITH = frozenset(sys.modules)


def _forked() -> None:
    global FORKED_WITH
    FORKED_WITH = frozenset(sys.modules)


os.register_at_fork(after_in_child=_forked)


def imported_since_fork() -> list[str]:
    """The installed modules this process imported since it was forked: not the standard library's,
    nor a DAG file Airflow loads under its own ``unusual_prefix_`` name."""
    from importlib.util import find_spec

    def installed(name: str) -> bool:
        if name.split(".")[0] in sys.stdlib_module_names or name.startswith("unusual_prefix_"):
            return False
        try:
            return find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    return sorted(m for m in set(sys.modules) - FORKED_WITH if installed(m))
