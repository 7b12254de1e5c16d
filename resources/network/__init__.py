"""Stores behind emulated network links: profiles (``profiles.yaml``), a namespace and veth pair
per server (iproute2), Toxiproxy for delay and per-connection bandwidth, and the
:class:`Deployment` that says where each store's server runs and how a client reaches it.

The names are imported on first use: a
step process should not pay for the deployment's imports (psutil, the servers: ~70 ms) to
open a Redis store."""
from __future__ import annotations

import importlib

_WHERE = {
    "Deployment": "deployment",
    "NamespaceError": "namespace", "NetNamespace": "namespace", "leftovers": "namespace",
    "Link": "profile", "NetworkProfile": "profile", "NetworkProfileError": "profile",
    "load_profile": "profile", "profile_names": "profile",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
