"""``RedisIOManager``: op outputs in Redis (a baseline), run-scoped, chunked, with TTL."""
from __future__ import annotations

from typing import ClassVar, Optional

from pydantic import Field

from ..connection import ConnectionIOManager
from .resources import RedisResource


class RedisIOManager(ConnectionIOManager):
    """Stores each op output (or asset) in Redis: one key per chunk, written with pipelines,
    committed by a manifest key written last, every key with ``EX ttl_seconds``; a run's keys
    are listed in a per-run index SET, so ``purge_run`` deletes exactly that run's keys.

    Key layout: ``<key_prefix>:run/<run_id>:<step_key>/<output>:<version>:<i>`` for chunks and
    ``...:<step_key>/<output>:manifest`` for the manifest (see :mod:`asgard.resources.stores.redis`).

    The connection is a nested :class:`~asgard_dagster.redis.RedisResource` (``redis=``); the IO
    manager's own fields are how outputs are stored (TTL, codec, chunk size, signing key, ...).

    Example::

        from dagster import Definitions, EnvVar, job, op
        from asgard_dagster.redis import RedisIOManager, RedisResource

        @op
        def make(): return list(range(10))

        @op
        def total(xs): return sum(xs)

        @job
        def pipeline(): total(make())

        defs = Definitions(jobs=[pipeline], resources={"io_manager": RedisIOManager(
            redis=RedisResource(host="redis.internal", port=6379, password=EnvVar("REDIS_PASSWORD")),
            ttl_seconds=3600)})
        # the local server of `asgard redis up` (127.0.0.1:6380): RedisIOManager()

    Connection fields given flat (``RedisIOManager(host=..., port=...)``) raise
    :class:`~asgard_dagster.FlatConnectionFieldsError`, which names the nested form.
    """

    connection_field: ClassVar[str] = "redis"
    resource_class: ClassVar[type] = RedisResource

    redis: Optional[RedisResource] = Field(
        default=None,
        description="The server to store outputs in, as RedisResource(...). None: the local server of "
        "`asgard redis up` (127.0.0.1:6380).",
    )
