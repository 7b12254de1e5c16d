"""``RedisIOManager``: op outputs in Redis (a baseline), run-scoped, chunked, with TTL."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from resources.stores.redis import RedisObjectStore

from ..io_manager import StoreIOManager


class RedisIOManager(StoreIOManager):
    """Stores each op output (or asset) in Redis: one key per chunk, written with pipelines,
    committed by a manifest key written last, every key with ``EX ttl_seconds``; a run's keys
    are listed in a per-run index SET, so ``purge_run`` deletes exactly that run's keys.

    Key layout: ``<key_prefix>:run/<run_id>:<step_key>/<output>:<version>:<i>`` for chunks and
    ``...:<step_key>/<output>:manifest`` for the manifest (see :mod:`resources.stores.redis`).

    Example::

        from dagster import Definitions, EnvVar, job, op
        from asgard_dagster.redis import RedisIOManager

        @op
        def make(): return list(range(10))

        @op
        def total(xs): return sum(xs)

        @job
        def pipeline(): total(make())

        # the local server of `asgard redis up` (127.0.0.1:6380)
        defs = Definitions(jobs=[pipeline], resources={"io_manager": RedisIOManager()})
        # another server: RedisIOManager(host="redis.internal", port=6379, password=EnvVar("REDIS_PASSWORD"))
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
    key_prefix: str = Field(default="asgard", description="First field of every key this IO manager writes.")
    connect_timeout: float = Field(default=5.0, description="Seconds to wait for a connection before failing with 'unreachable'.")
    socket_timeout: float = Field(default=60.0, description="Seconds per pipelined batch of chunk requests.")
    ssl_ca_file: Optional[str] = Field(
        default=None, description="PEM CA certificate to verify a TLS server against (its name too); set, every "
        "connection uses TLS. For `RedisServer(tls=True)`: its tls/ca.pem. None: plain.")

    def open_store(self, **store_kwargs) -> RedisObjectStore:
        return RedisObjectStore(
            host=self.host, port=self.port, db=self.db, username=self.username, password=self.password,
            key_prefix=self.key_prefix, connect_timeout=self.connect_timeout, socket_timeout=self.socket_timeout,
            ssl_ca_file=self.ssl_ca_file, **store_kwargs,
        )
