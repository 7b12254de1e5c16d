"""Where the project keeps downloaded software and server state.

``ASGARD_HOME`` (default ``<repo>/.asgard``) holds ``cache/`` (jars, binaries: reused across
runs) and ``run/`` (per-server data, logs, pid files).
"""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def asgard_home() -> Path:
    return Path(os.environ.get("ASGARD_HOME", REPO_ROOT / ".asgard")).resolve()


def cache_dir(*parts: str) -> Path:
    path = asgard_home().joinpath("cache", *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_dir(*parts: str) -> Path:
    path = asgard_home().joinpath("run", *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
