"""Preloaded in a job's forkserver by tests/test_forkserver_preload.py: records each module a forked
step's process loads (Python's "import" audit event fires only when a module is not loaded yet), one
file per process, in the directory ``STEP_IMPORT_AUDIT_DIR`` names."""
import os
import sys

_SERVER = os.getpid()
_DIR = os.environ["STEP_IMPORT_AUDIT_DIR"]


def _record(event: str, args: tuple) -> None:
    if event == "import" and os.getpid() != _SERVER:
        with open(os.path.join(_DIR, str(os.getpid())), "a") as f:
            f.write(f"{args[0]}\n")


sys.addaudithook(_record)
