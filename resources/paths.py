"""Where the project keeps downloaded software and server state.

``ASGARD_HOME`` (default ``<repo>/.asgard`` in a source checkout, ``~/.asgard`` for an installed
wheel) holds ``cache/`` (jars, binaries: reused across
runs) and ``run/`` (per-server data, logs, pid files).
"""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
#: a source checkout (this package at the repository's top level), not an installed wheel
IN_CHECKOUT = (REPO_ROOT / "setup.py").is_file()


def asgard_home() -> Path:
    default = REPO_ROOT / ".asgard" if IN_CHECKOUT else Path.home() / ".asgard"
    return Path(os.environ.get("ASGARD_HOME", default)).resolve()


def cache_dir(*parts: str) -> Path:
    path = asgard_home().joinpath("cache", *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_dir(*parts: str) -> Path:
    path = asgard_home().joinpath("run", *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_private(path: Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` readable and writable by the owner only (0600), created with
    that mode so it is never readable by others, not even for a moment."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
    os.chmod(tmp, 0o600)  # against a umask that removed bits; never adds any
    tmp.replace(path)
    return path
