"""The Cassandra client: :class:`CassandraObjectStore` and what it is built of (a module a job;
the layout of its tables in :mod:`.store`).

Example::

    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(contact_points=["10.0.0.5", "10.0.0.6"], keyspace="asgard",
                                 username="app", password=os.environ["CASSANDRA_PASSWORD"])
"""
from .cluster import build_cluster, pinned_timestamp, ssl_context
from .errors import AUTH_HINT, CERT_HINT, FULL_HINT, LOCAL_HINT, NEEDS_TLS_HINT, NO_TLS_HINT
from .options import ClientOptions, clear_options, opts, set_options
from .retry import ride_through_retry_policy
from .session import close_sessions
from .store import CassandraObjectStore

__all__ = [
    "CassandraObjectStore", "ClientOptions", "clear_options", "opts", "set_options", "build_cluster", "close_sessions", "pinned_timestamp",
    "ride_through_retry_policy", "ssl_context", "AUTH_HINT", "CERT_HINT", "FULL_HINT", "LOCAL_HINT",
    "NEEDS_TLS_HINT", "NO_TLS_HINT",
]
