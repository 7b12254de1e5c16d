"""The servers ``asgard ... up`` runs on this machine, as a client sees them: which addresses are
theirs, and the local-only credentials a client may use there. The lab (``asgard.resources.minio``,
``asgard.resources.network``) starts the servers with these; the client only reads them.
"""
from __future__ import annotations

import ipaddress
import os
import secrets
from pathlib import Path

from ..paths import run_dir, write_private

#: the emulated hosts' namespaces: 10.211.<slot>.1 (this host), .2 (the server)
PROJECT_SUBNET = ipaddress.ip_network("10.211.0.0/16")
#: used only when MINIO_ROOT_USER / MINIO_ROOT_PASSWORD are unset; local-only, never for a shared server
LOCAL_DEFAULT_USER = "asgard-local"


def is_project_host(host: str | None) -> bool:
    """True for an address of a server this project runs on this machine: loopback, or a
    namespace of :mod:`asgard.resources.network` (the local credentials apply to both)."""
    if host in ("localhost", "::1"):
        return True
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return False
    return address.is_loopback or address in PROJECT_SUBNET


def local_password_file() -> Path:
    return run_dir("minio") / "root.password"


def local_credentials() -> tuple[str, str]:
    """``(access key, secret key)`` of the local MinIO: ``MINIO_ROOT_USER`` / ``MINIO_ROOT_PASSWORD``,
    or, when unset, ``asgard-local`` and the password in :func:`local_password_file` (generated,
    mode 0600, on first use)."""
    user, password = os.environ.get("MINIO_ROOT_USER"), os.environ.get("MINIO_ROOT_PASSWORD")
    if user and password:
        return user, password
    path = local_password_file()
    try:
        generated = path.read_text().strip()
    except FileNotFoundError:
        generated = secrets.token_urlsafe(24)
        write_private(path, generated + "\n")
    return user or LOCAL_DEFAULT_USER, password or generated
