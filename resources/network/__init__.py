"""Stores behind emulated network links: profiles (``profiles.yaml``), a namespace and veth pair
per server (iproute2), Toxiproxy for delay and per-connection bandwidth, and the
:class:`Deployment` that says where each store's server runs and how a client reaches it."""
from .deployment import Deployment
from .namespace import NamespaceError, NetNamespace, leftovers
from .profile import Link, NetworkProfile, NetworkProfileError, is_project_host, load_profile, profile_names

__all__ = ["Deployment", "Link", "NamespaceError", "NetNamespace", "NetworkProfile", "NetworkProfileError",
           "is_project_host", "leftovers", "load_profile", "profile_names"]
