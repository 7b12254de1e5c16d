"""Redis for the Redis baseline store: :class:`RedisServer` runs Debian's ``redis-server``
on 127.0.0.1:6380 without persistence (``asgard redis up|down|status``)."""
from .server import DEFAULT_HOST, DEFAULT_PORT, PASSWORD_ENV, RedisServer, redis_binary

__all__ = ["RedisServer", "redis_binary", "DEFAULT_HOST", "DEFAULT_PORT", "PASSWORD_ENV"]
