"""``RedisResource``: a connection to the Redis server that holds op outputs."""
from __future__ import annotations

from typing import Optional

from dagster import ConfigurableResource
from pydantic import Field

from asgard.resources.stores.redis import RedisObjectStore

from ..io_manager import resolved


class RedisResource(ConfigurableResource):
    """Connection settings for a Redis server; the defaults reach the local one that
    ``asgard redis up`` starts (127.0.0.1:6380).

    Example::

        from dagster import Definitions, EnvVar
        from asgard_dagster.redis import RedisResource

        defs = Definitions(resources={"redis": RedisResource(password=EnvVar("ASGARD_REDIS_PASSWORD"))})
        # in an op: redis.get_store(ttl_seconds=3600).put(key, value); redis.client().dbsize()
        # the IO manager's connection, nested: RedisIOManager(redis=RedisResource(...))
    """

    host: str = Field(default="127.0.0.1", description="Redis host (the local server of `asgard redis up` by default).")
    port: int = Field(default=6380, description="Redis port (6380: the project's own server, not the distribution's 6379).")
    db: int = Field(default=0, description="Redis logical database number.")
    username: Optional[str] = Field(default=None, description="ACL user name, if the server uses ACLs.")
    password: Optional[str] = Field(
        default=None,
        description="Redis password (requirepass); pass EnvVar('...'), never a literal. None: for a local host, "
        "ASGARD_REDIS_PASSWORD if set (the password of `asgard redis up`), else no password."
    )
    key_prefix: str = Field(default="asgard", description="First field of every key written through this resource.")
    connect_timeout: float = Field(default=5.0, description="Seconds to wait for a connection before failing with 'unreachable'.")
    socket_timeout: float = Field(default=60.0, description="Seconds per request (a pipelined batch of chunk requests).")
    ssl_ca_file: Optional[str] = Field(
        default=None, description="PEM CA certificate to verify a TLS server against (its name too); set, every "
        "connection uses TLS. For `RedisServer(tls=True)`: its tls/ca.pem. None: plain.")

    def connection_kwargs(self) -> dict:
        kwargs = dict(host=self.host, port=self.port, db=self.db, username=self.username, password=self.password,
                      key_prefix=self.key_prefix, connect_timeout=self.connect_timeout,
                      socket_timeout=self.socket_timeout, ssl_ca_file=self.ssl_ca_file)
        # outside a run (the purge sensor, the CLI) an EnvVar field is still the variable's name
        return {k: resolved(v) for k, v in kwargs.items()}

    def get_store(self, **store_kwargs) -> RedisObjectStore:
        """A :class:`RedisObjectStore` on this connection (``ttl_seconds``, ``codec``, ... as keywords)."""
        return RedisObjectStore(**self.connection_kwargs(), **store_kwargs)

    def client(self):
        """A redis-py client on the store's per-process connection pool."""
        return self.get_store().client

    def purge_run(self, run_id: str) -> None:
        """Delete every stored output of one run (the keys its index SET lists)."""
        self.get_store().purge_scope(f"run/{run_id}")
