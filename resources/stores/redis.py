"""Redis object store (the Redis baseline).

Key layout (``prefix`` defaults to ``asgard``)::

    <prefix>:<scope>:<path>:<version>:<i>    chunk i of one write version   SET ... EX ttl
    <prefix>:<scope>:<path>:manifest         the manifest, written last      SET ... EX ttl
    <prefix>#index:<scope>                   SET of every key above in scope EXPIRE ttl

e.g. ``asgard:run/4f1c…:make_data/result:9b2e…:0``. The version is 32 hex digits and the
index an integer, so a key's last two fields are never ambiguous even when a path contains
``:`` (hourly partition keys do).

Chunks are written with non-transactional pipelines of at most ``concurrency`` commands
(one round trip per batch; the batch bounds the bytes buffered in the client) and read the
same way; the manifest is written after every chunk is acknowledged, so a reader sees the
old object or the new one, never a torn one. Expiry is Redis's own: every key is written
``EX ttl_seconds`` (no ``EX`` when the TTL is 0).

Purge uses the per-scope index SET rather than ``SCAN MATCH <prefix>:<scope>:*``: SCAN walks
the *whole* keyspace on every purge (all other runs' chunks, kept for their TTL, included)
and its glob would need escaping of ``*?[]`` in scopes and paths, whereas the index makes a
purge cost proportional to the run's own keys. Its price is one ``SADD`` + ``EXPIRE`` per
key, sent in the same pipeline as the ``SET`` (no extra round trip); its TTL is set when it is
created and lengthened (``EXPIRE NX`` then ``EXPIRE GT``, Redis 7) on every write, so it outlives
every key it lists (a store with ``ttl_seconds=0`` makes it persistent). A listed key that has
already expired is a no-op ``UNLINK``. Deletes use ``UNLINK`` (4 MiB values are freed off
Redis's main thread). The per-process connection pool (:func:`connection_pool`) is shared by
every store on the same server.

Reads are bound by redis-py's pure-Python reply parser (several copies per bulk reply);
installing ``hiredis`` (``redis[hiredis]``) makes redis-py parse in C, measured 1.4-1.9x
faster for 4 MiB GETs here.
"""
from __future__ import annotations

import os
import re
import threading
from typing import Any, Iterator

from .base import Manifest, MiB, ObjectKey, ObjectStore, pack_head, unpack_head
from .errors import StoreConfigError, StoreError, StoreFullError, StoreUnavailableError
from .local_servers import is_project_host
from .settings import REDIS

LOCAL_HINT = ("Start the local server with `asgard redis up` (127.0.0.1:6380), "
              "or point host/port at your Redis (a server that speaks only TLS needs ssl_ca_file).")
MANIFEST = "manifest"
PASSWORD_ENV = "ASGARD_REDIS_PASSWORD"  # requirepass of the local server (asgard.resources.redis.RedisServer)
_VERSION_CHUNK = re.compile(r"[0-9a-f]{32}:\d+")

_pools: dict[tuple, Any] = {}
_cleaner = None


def _background():
    """One worker thread per process for clean-up off a put's critical path (joined at exit)."""
    global _cleaner
    from concurrent.futures import ThreadPoolExecutor

    with _pools_lock:
        if _cleaner is None:
            _cleaner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asgard-redis-cleanup")
        return _cleaner
_pools_lock = threading.Lock()


def connection_pool(host: str, port: int, db: int, username: str | None, password: str | None,
                    connect_timeout: float, socket_timeout: float, max_connections: int = 64,
                    ssl_ca_file: str | None = None):
    """One redis-py ``ConnectionPool`` per process and endpoint (a forked step makes its own);
    TLS (verifying the server against ``ssl_ca_file`` and its name) when a CA file is given."""
    import redis

    cache_key = (os.getpid(), host, port, db, username, password, connect_timeout, socket_timeout, ssl_ca_file)
    with _pools_lock:
        pool = _pools.get(cache_key)
        if pool is None:
            tls = dict(connection_class=redis.SSLConnection, ssl_ca_certs=ssl_ca_file, ssl_cert_reqs="required",
                       ssl_check_hostname=True) if ssl_ca_file else {}
            pool = _pools[cache_key] = redis.ConnectionPool(
                host=host, port=port, db=db, username=username, password=password,
                socket_connect_timeout=connect_timeout, socket_timeout=socket_timeout,
                socket_keepalive=True, max_connections=max_connections, **tls,
            )
        return pool


class RedisObjectStore(ObjectStore):
    """Objects in Redis, one key per chunk.

    Example::

        store = RedisObjectStore(host="127.0.0.1", port=6380, ttl_seconds=3600)
        store.put(ObjectKey.for_run(run_id, "step", "result"), value)
        value, _ = store.get(ObjectKey.for_run(run_id, "step", "result"))
        store.purge_scope(f"run/{run_id}")

    Args:
        host, port, db: the Redis server (the local one of ``asgard redis up`` by default).
        username, password: ACL user / ``requirepass``; ``None`` with a local host reads
            ``ASGARD_REDIS_PASSWORD`` (the local server's ``requirepass``), else no password.
        key_prefix: first field of every key; stores with different prefixes never meet.
        connect_timeout, socket_timeout: seconds; a server that does not answer in time is
            reported as unreachable.
        Common options (``chunk_size`` default 4 MiB, ``ttl_seconds``, ``concurrency``,
        ``codec``, ...) as in :class:`~asgard.resources.stores.base.ObjectStore`.
    """

    backend = "redis"
    # Redis refuses bulk strings over proto-max-bulk-len (512 MB by default)
    max_chunk_size = 256 * MiB

    def __init__(
        self,
        host: str = REDIS["host"].default,
        port: int = REDIS["port"].default,
        db: int = REDIS["db"].default,
        username: str | None = None,
        password: str | None = None,
        key_prefix: str = REDIS["key_prefix"].default,
        connect_timeout: float = REDIS["connect_timeout"].default,
        socket_timeout: float = REDIS["socket_timeout"].default,
        ssl_ca_file: str | None = None,
        **kwargs,
    ):
        kwargs.setdefault("chunk_size", 4 * MiB)
        super().__init__(**kwargs)
        if not key_prefix or any(c in key_prefix for c in ":# \n"):
            raise StoreConfigError(f"key_prefix {key_prefix!r} must be non-empty without ':', '#' or whitespace")
        if db < 0:
            raise StoreConfigError(f"db must be >= 0, got {db}")
        if password is None and is_project_host(host):
            password = os.environ.get(PASSWORD_ENV) or None  # the local server's requirepass, if set
        self.host, self.port, self.db = host, port, db
        self.username, self.password = username, password
        self.key_prefix = key_prefix
        self.connect_timeout, self.socket_timeout = connect_timeout, socket_timeout
        if ssl_ca_file is not None and not os.path.isfile(ssl_ca_file):
            raise StoreConfigError(f"ssl_ca_file {ssl_ca_file!r} is not a file: give the PEM CA certificate "
                                   "that signed the server's (for `RedisServer(tls=True)`: its tls/ca.pem)")
        self.ssl_ca_file = ssl_ca_file

    # --- connection -------------------------------------------------------------------
    @property
    def client(self):
        import redis

        pool = connection_pool(self.host, self.port, self.db, self.username, self.password,
                               self.connect_timeout, self.socket_timeout, max(64, self.concurrency), self.ssl_ca_file)
        return redis.Redis(connection_pool=pool)

    def _where(self) -> str:
        return f"{self.host}:{self.port}/{self.db}"

    def _call(self, fn, *args, **kwargs):
        """Run one client call, turning redis-py errors into the store's typed errors."""
        import redis

        try:
            return fn(*args, **kwargs)
        except redis.AuthenticationError as exc:
            raise StoreUnavailableError(
                "Redis", self._where(),
                "Authentication failed: pass the server's password (ASGARD_REDIS_PASSWORD for the local one).",
                exc) from exc
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise StoreUnavailableError("Redis", self._where(), LOCAL_HINT, exc) from exc
        except redis.ResponseError as exc:
            oom = getattr(redis.exceptions, "OutOfMemoryError", ())
            if isinstance(exc, oom) or str(exc).startswith("OOM") or "maxmemory" in str(exc):
                raise StoreFullError(
                    "Redis", self._where(), f"maxmemory reached, policy noeviction: {exc}",
                    "Purge finished runs, lower ttl_seconds, or raise maxmemory "
                    "(ASGARD_REDIS_MAXMEMORY for `asgard redis up`). Chunks already written expire with their TTL."
                ) from exc
            raise

    def ping(self) -> None:
        self._call(self.client.ping)

    # --- keys -------------------------------------------------------------------------
    def _base(self, key: ObjectKey) -> str:
        return f"{self.key_prefix}:{key.scope}:{key.path}"

    def chunk_key(self, key: ObjectKey, version: str, index: int) -> str:
        return f"{self._base(key)}:{version}:{index}"

    def manifest_key(self, key: ObjectKey) -> str:
        return f"{self._base(key)}:{MANIFEST}"

    def index_key(self, scope: str) -> str:
        return f"{self.key_prefix}#index:{scope}"

    def uri(self, key: ObjectKey) -> str:
        return f"redis://{self.host}:{self.port}/{self.db}/{self._base(key)}"

    def _ex(self) -> dict:
        return {"ex": self.ttl_seconds} if self.ttl_seconds else {}

    def _touch_index(self, pipe, scope: str, keys: list[str]) -> None:
        index = self.index_key(scope)
        pipe.sadd(index, *keys)
        if self.ttl_seconds:
            # set when new (NX), otherwise only ever lengthen (GT): the index outlives every key it lists
            pipe.expire(index, self.ttl_seconds, nx=True)
            pipe.expire(index, self.ttl_seconds, gt=True)
        else:
            pipe.persist(index)

    def _scope_members(self, scope: str) -> list[str]:
        return [m.decode() for m in self._call(lambda: list(self.client.sscan_iter(self.index_key(scope), count=1000)))]

    def _unlink(self, scope: str, keys: list[str], drop_index: bool = False) -> None:
        def run():
            pipe = self.client.pipeline(transaction=False)
            for i in range(0, len(keys), 1000):
                batch = keys[i : i + 1000]
                pipe.unlink(*batch)
                if not drop_index:
                    pipe.srem(self.index_key(scope), *batch)
            if drop_index:
                pipe.unlink(self.index_key(scope))
            pipe.execute()

        if keys or drop_index:
            self._call(run)

    # --- primitives -------------------------------------------------------------------
    def _write_chunks(self, key: ObjectKey, version: str, chunks: Iterator[tuple[int, Any]], count: int) -> None:
        ex = self._ex()
        client = self.client

        def flush(batch: list[tuple[int, Any]]) -> None:
            names = [self.chunk_key(key, version, i) for i, _ in batch]
            pipe = client.pipeline(transaction=False)
            # index first: a chunk is never in Redis without being listed for purge
            self._touch_index(pipe, key.scope, names)
            for name, (_, data) in zip(names, batch):
                pipe.set(name, data, **ex)
            pipe.execute()

        batch: list[tuple[int, Any]] = []
        for item in chunks:
            batch.append(item)
            if len(batch) >= self.concurrency:
                self._call(flush, batch)
                batch = []
        if batch:
            self._call(flush, batch)

    def _read_chunks(self, key: ObjectKey, version: str, count: int) -> Iterator[tuple[int, bytes]]:
        client = self.client
        for start in range(0, count, self.concurrency):
            indexes = range(start, min(start + self.concurrency, count))
            pipe = client.pipeline(transaction=False)
            for i in indexes:
                pipe.get(self.chunk_key(key, version, i))
            values = self._call(pipe.execute)
            yield from zip(indexes, values)

    def _write_manifest(self, key: ObjectKey, manifest, inline) -> None:
        name = self.manifest_key(key)
        record = b"".join(pack_head(manifest.to_bytes(), inline))

        def run():
            pipe = self.client.pipeline(transaction=False)
            self._touch_index(pipe, key.scope, [name])
            pipe.set(name, record, get=True, **self._ex())  # the displaced manifest comes back with the reply
            return pipe.execute()[-1]

        displaced = self._call(run)
        if displaced:
            self._drop_displaced(key, displaced, manifest.version)

    def _drop_displaced(self, key: ObjectKey, record: bytes, current: str) -> None:
        """Delete the chunks of the version our write displaced, on a background thread: that
        manifest is no longer anyone's commit point (SET replaced it atomically), and a reader
        still reading it retries with the new one."""
        try:
            old = Manifest.from_bytes(unpack_head(record)[0])
        except StoreError:  # a damaged record: its chunks, if any, expire with their TTL
            return
        if old.inline or old.version == current:
            return
        names = [self.chunk_key(key, old.version, i) for i in range(old.chunks)]
        _background().submit(self._unlink, key.scope, names)

    def _read_manifest(self, key: ObjectKey):
        record = self._call(self.client.get, self.manifest_key(key))
        return unpack_head(record, self.uri(key)) if record is not None else None

    def _delete_key(self, key: ObjectKey) -> None:
        # every version of the path, also chunks of a put that died before its manifest
        base = self._base(key) + ":"
        doomed = [m for m in self._scope_members(key.scope)
                  if m.startswith(base) and (m[len(base):] == MANIFEST or _VERSION_CHUNK.fullmatch(m[len(base):]))]
        self._unlink(key.scope, doomed)

    def purge_scope(self, scope: str) -> None:
        self._unlink(scope, self._scope_members(scope), drop_index=True)
        self.local_copies.purge_scope(scope)  # this host's copies go with the keys

    def list_paths(self, scope: str) -> list[str]:
        head, tail = f"{self.key_prefix}:{scope}:", f":{MANIFEST}"
        manifests = [m for m in self._scope_members(scope) if m.startswith(head) and m.endswith(tail)]
        if not manifests:
            return []
        exists = self._call(lambda: [bool(n) for n in self._exists_each(manifests)])
        return sorted(m[len(head) : -len(tail)] for m, e in zip(manifests, exists) if e)

    def _exists_each(self, names: list[str]) -> list[int]:
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.exists(name)
        return pipe.execute()
