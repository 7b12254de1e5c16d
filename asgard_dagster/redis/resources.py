"""``RedisResource``: a connection to the Redis server that holds op outputs."""
from __future__ import annotations

from typing import ClassVar, Optional

from dagster import ConfigurableResource

from asgard.resources.stores.redis import RedisObjectStore
from asgard.resources.stores.settings import REDIS

from ..io_manager import resolved
from ..settings import described


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

    backend: ClassVar[str] = "redis"

    host: str = described(REDIS["host"])
    port: int = described(REDIS["port"])
    db: int = described(REDIS["db"])
    username: Optional[str] = described(REDIS["username"])
    password: Optional[str] = described(REDIS["password"])
    key_prefix: str = described(REDIS["key_prefix"])
    connect_timeout: float = described(REDIS["connect_timeout"])
    socket_timeout: float = described(REDIS["socket_timeout"])
    ssl_ca_file: Optional[str] = described(REDIS["ssl_ca_file"])

    def connection_kwargs(self) -> dict:
        # outside a run (the purge sensor, the CLI) an EnvVar field is still the variable's name
        return {name: resolved(getattr(self, name)) for name in REDIS.names()}

    def get_store(self, **store_kwargs) -> RedisObjectStore:
        """A :class:`RedisObjectStore` on this connection (``ttl_seconds``, ``codec``, ... as keywords)."""
        return RedisObjectStore(**self.connection_kwargs(), **store_kwargs)

    def client(self):
        """A redis-py client on the store's per-process connection pool."""
        return self.get_store().client

    def purge_run(self, run_id: str) -> None:
        """Delete every stored output of one run (the keys its index SET lists)."""
        self.get_store().purge_scope(f"run/{run_id}")
