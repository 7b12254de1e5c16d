"""A one-step job on forked steps that returns what its step's process has in the environment
(tests/test_forkserver_preload.py)."""
import os

from dagster import job, op

from tests.forkserver_steps import FORKSERVER_EXECUTOR


@op
def probe() -> str:
    return os.environ.get("ASGARD_FORKED_STEP_PROBE", "")


@job(executor_def=FORKSERVER_EXECUTOR)
def env_job():
    probe()
