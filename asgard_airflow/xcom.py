"""An Airflow 3 XCom backend that keeps large task results in Apache Cassandra (or Redis, S3, a
local directory): chunked, checksummed, optionally signed, every object with a TTL.

Usage (``airflow.cfg``, or the same settings as environment variables)::

    [core]
    xcom_backend = asgard_airflow.CassandraXComBackend

    [asgard]
    backend = cassandra            # cassandra | redis | s3 | local
    contact_points = 10.0.0.5,10.0.0.6
    keyspace = airflow_xcom
    threshold_bytes = 65536        # values up to this (as JSON) stay in Airflow's own table
    ttl_seconds = 604800           # every stored object expires (0 is refused)
    conn_id = asgard_store         # optional: username/password and extras from this connection

    $ export AIRFLOW__CORE__XCOM_BACKEND=asgard_airflow.CassandraXComBackend
    $ export AIRFLOW__ASGARD__KEYSPACE=airflow_xcom
    $ export AIRFLOW__ASGARD__SIGNING_KEY="$(cat /run/secrets/xcom-key)"   # secrets: environment or conn_id

With no settings it reaches the local Cassandra node (127.0.0.1:9042, keyspace ``asgard``), as
the Dagster ``CassandraIOManager()`` does. Tasks need no change: ``return big_array``, and the
downstream task's argument is the array.

What goes where:

* A value whose Airflow serialization (JSON) is at most ``threshold_bytes`` stays in Airflow's
  xcom row exactly as Airflow would store it. A larger one, or one Airflow cannot serialize at all
  (``bytes``, a numpy array), is pickled into the store, and the row holds a small JSON reference
  (:data:`REFERENCE_MARKER`, ``uri``, ``bytes``, ``codec``, ``checksum``, ``expires_at``, and the
  DAG, run, task, map index and key): that is what the UI and REST API show for it.
* Key layout: one store scope per DAG run, ``airflow/<dag_id>/<run_id>``; the object's path in it
  is ``<task_id>/<map_index>/<key>`` (``map_index`` -1 for an unmapped task), e.g. scope
  ``airflow/etl/manual__2026-01-01T00:00:00+00:00``, path ``train/-1/return_value``.
  A list that a downstream ``.expand()`` maps over is stored element by element, at
  ``<task_id>/<map_index>/<key>/<i>``: each mapped task instance reads only its own element, and
  a task that takes the whole value gets a read-only sequence that fetches elements as indexed.
  Each run also gets a marker object in scope ``airflow-runs`` (path ``<dag_id>/<run_id>``), the
  index ``asgard airflow purge`` walks to find runs that Airflow's database no longer has.
* :meth:`CassandraXComBackend.purge` (Airflow calls it when a task instance is cleared or retried)
  deletes the object a row refers to; ``asgard airflow purge`` removes whole runs' scopes after
  ``airflow db clean``; the TTL removes whatever both miss.
* A read that finds the object missing, expired, corrupt, or altered (checksum, signature, or not
  the object the row recorded) raises a typed error (:mod:`asgard_airflow.errors`) naming the
  task, key and run; it never hands the task the reference in place of the value. A value over
  ``max_object_bytes`` fails before anything is written.

Settings (section ``[asgard]``; ``AIRFLOW__ASGARD__<NAME>``): ``backend``, ``threshold_bytes``
(65536), ``ttl_seconds`` (7 days), ``max_object_bytes`` (2 GiB), ``codec`` (none|lz4|zstd),
``chunk_size_bytes`` (backend default), ``conn_id``; per backend ``contact_points``, ``port``,
``keyspace``, ``table``, ``ssl_ca_file`` (cassandra); ``host``, ``port``, ``db``, ``key_prefix``
(redis); ``endpoint_url``, ``bucket``, ``prefix``, ``region`` (s3); ``root`` (local). Secrets never
come from code: ``username``, ``password`` and ``signing_key`` are read from the environment
(``AIRFLOW__ASGARD__USERNAME`` ...) or from the connection ``conn_id`` (login, password, and
``signing_key`` in its extra; its host and port, if set, as the servers to reach).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow.sdk.bases.xcom import BaseXCom

from asgard.resources.stores.base import ObjectKey, ObjectStore
from asgard.resources.stores.errors import (
    CorruptChunkError, CorruptManifestError, ObjectMissingError, ObjectTooLargeError, StoreError,
    StoreUnavailableError, TamperedObjectError,
)
from asgard.resources.stores.registry import BACKENDS, open_store

from .errors import (
    XComBackendConfigError, XComStoreUnavailableError, XComValueCorruptError, XComValueMissingError,
    XComValueTamperedError, XComValueTooLargeError, describe,
)

log = logging.getLogger(__name__)

SECTION = "asgard"
#: the key that marks an Airflow xcom row's value as a reference to a stored object
REFERENCE_MARKER = "__asgard_xcom__"
REFERENCE_VERSION = 1
#: the scope of the per-run markers (``<dag_id>/<run_id>``): outside ``airflow/`` so that no
#: prefix-based purge of a run can reach it
RUNS_SCOPE = "airflow-runs"
DEFAULT_THRESHOLD = 64 * 1024
DEFAULT_TTL = 7 * 24 * 3600
#: values read from the store of at least this size get an INFO line in the task's log
LOGGED_READ_BYTES = 256 << 10

#: settings passed to the store per backend, and how each is parsed
_BACKEND_OPTIONS = {
    "cassandra": {"contact_points": "list", "port": "int", "keyspace": "str", "table": "str", "ssl_ca_file": "str",
                  "consistency": "str", "replication_factor": "int", "ride_through_seconds": "float"},
    "redis": {"host": "str", "port": "int", "db": "int", "key_prefix": "str", "ssl_ca_file": "str"},
    "s3": {"endpoint_url": "str", "bucket": "str", "prefix": "str", "region": "str"},
    "local": {"root": "str"},
}
_SECRETS = ("username", "password", "signing_key")


def scope_for_run(dag_id: str, run_id: str) -> str:
    """The store scope of one DAG run: the unit ``asgard airflow purge`` deletes."""
    return f"airflow/{dag_id}/{run_id}"


def object_key(dag_id: str, run_id: str, task_id: str, map_index: int | None, key: str) -> ObjectKey:
    """Where one XCom value lives: scope ``airflow/<dag_id>/<run_id>``, path ``<task_id>/<map_index>/<key>``."""
    index = -1 if map_index is None else int(map_index)
    return ObjectKey(scope_for_run(dag_id, run_id), f"{task_id}/{index}/{key}")


def run_marker_key(dag_id: str, run_id: str) -> ObjectKey:
    return ObjectKey(RUNS_SCOPE, f"{dag_id}/{run_id}")


# --- settings -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    backend: str
    threshold_bytes: int
    ttl_seconds: int
    max_object_bytes: int
    codec: str
    chunk_size_bytes: int
    store_options: tuple  # sorted (name, value) pairs passed to the store
    secrets: tuple  # sorted (name, value) pairs; never logged

    def store_kwargs(self) -> dict:
        kwargs = dict(self.store_options)
        kwargs.update(dict(self.secrets))
        kwargs.update(ttl_seconds=self.ttl_seconds, max_object_bytes=self.max_object_bytes, codec=self.codec)
        if self.chunk_size_bytes:
            kwargs["chunk_size"] = self.chunk_size_bytes
        return kwargs


def _conf():
    from airflow.sdk.configuration import conf

    return conf


def _get(conf, name: str, fallback: str | None = None) -> str | None:
    value = conf.get(SECTION, name, fallback=fallback)
    return value.strip() if isinstance(value, str) else value


def _parse(name: str, kind: str, raw: str):
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
    except ValueError:
        raise XComBackendConfigError(f"[{SECTION}] {name} = {raw!r} is not a number "
                                     f"(AIRFLOW__ASGARD__{name.upper()})") from None
    if kind == "list":
        return [p.strip() for p in raw.split(",") if p.strip()]
    return raw


def _connection_secrets(conn_id: str, backend: str) -> dict:
    """login/password, ``signing_key`` (and other options) from the extra, host/port from an
    Airflow connection: the task's own way to reach it (supervisor, secrets backends, AIRFLOW_CONN_*)."""
    from airflow.sdk import Connection

    try:
        conn = Connection.get(conn_id)
    except Exception as exc:  # the SDK raises its own not-found type, and others for a backend it cannot reach
        raise XComBackendConfigError(
            f"[{SECTION}] conn_id = {conn_id!r}: the connection cannot be read ({type(exc).__name__}: {exc}). "
            f"Create it (`airflow connections add {conn_id} ...` or AIRFLOW_CONN_{conn_id.upper()}), or unset conn_id."
        ) from exc
    out: dict = {}
    if conn.login:
        out["username"] = conn.login
    if conn.password:
        out["password"] = conn.password
    extra = conn.extra_dejson or {}
    for name, value in extra.items():
        if name in _SECRETS or name in _BACKEND_OPTIONS[backend]:
            out[name] = value
    if conn.host:
        hosts = {"cassandra": "contact_points", "redis": "host", "s3": "endpoint_url", "local": "root"}[backend]
        out.setdefault(hosts, conn.host.split(",") if backend == "cassandra" else conn.host)
    if conn.port and "port" in _BACKEND_OPTIONS[backend]:
        out.setdefault("port", int(conn.port))
    return out


_settings: dict[tuple, Settings] = {}


def read_settings() -> Settings:
    """The ``[asgard]`` settings as Airflow's configuration gives them (airflow.cfg, AIRFLOW__ASGARD__*),
    read once per process and environment: a task reads them at every push and pull, and reading
    them took 0.55 ms, a quarter of a 10 KiB push+pull (``asgard bench xcom``). airflow.cfg is read
    once per process by Airflow itself; the environment (and a ``conn_id``'s connection, through
    ``AIRFLOW_CONN_*``) is what can change under a running process."""
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))))
    settings = _settings.get(key)
    if settings is None:
        settings = _settings[key] = _read_settings()
    return settings


def _read_settings() -> Settings:
    conf = _conf()
    backend = (_get(conf, "backend", "cassandra") or "cassandra").lower()
    if backend not in BACKENDS:
        raise XComBackendConfigError(f"[{SECTION}] backend = {backend!r} is not one of {', '.join(BACKENDS)} "
                                     "(AIRFLOW__ASGARD__BACKEND)")
    numbers = {}
    for name, default in (("threshold_bytes", DEFAULT_THRESHOLD), ("ttl_seconds", DEFAULT_TTL),
                          ("max_object_bytes", 2 << 30), ("chunk_size_bytes", 0)):
        numbers[name] = _parse(name, "int", _get(conf, name, str(default)))
    if numbers["ttl_seconds"] <= 0:
        raise XComBackendConfigError(
            f"[{SECTION}] ttl_seconds = {numbers['ttl_seconds']}: every stored XCom value needs a lifetime (seconds, "
            "over 0). Keep it longer than a DAG run may wait before a downstream task or a retry reads it.")
    if numbers["threshold_bytes"] < 0:
        raise XComBackendConfigError(f"[{SECTION}] threshold_bytes must be 0 or more, got {numbers['threshold_bytes']}")
    options = {}
    for name, kind in _BACKEND_OPTIONS[backend].items():
        raw = _get(conf, name)
        if raw:
            options[name] = _parse(name, kind, raw)
    secrets = {}
    conn_id = _get(conf, "conn_id")
    if conn_id:
        for name, value in _connection_secrets(conn_id, backend).items():
            (secrets if name in _SECRETS else options)[name] = value
    for name in _SECRETS:  # the environment wins over the connection: an operator's override
        value = os.environ.get(f"AIRFLOW__ASGARD__{name.upper()}")
        if value:
            secrets[name] = value
    if backend == "s3":  # the S3 store names its credentials the AWS way
        for ours, theirs in (("username", "aws_access_key_id"), ("password", "aws_secret_access_key")):
            if ours in secrets:
                secrets[theirs] = secrets.pop(ours)
    if backend == "local":
        secrets.pop("username", None), secrets.pop("password", None)
    return Settings(backend, numbers["threshold_bytes"], numbers["ttl_seconds"], numbers["max_object_bytes"],
                    _get(conf, "codec", "none") or "none", numbers["chunk_size_bytes"],
                    tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items())),
                    tuple(sorted(secrets.items())))


_stores: dict[Settings, ObjectStore] = {}
_stores_lock = threading.Lock()
_marked_runs: set = set()


def configured_store(settings: Settings | None = None, signed: bool = True) -> ObjectStore:
    """The store the ``[asgard]`` settings name, one per process and configuration. ``signed=False``
    opens it without the signing key (tests use it to play an intruder)."""
    settings = settings or read_settings()
    if not signed:
        settings = Settings(**{**settings.__dict__, "secrets": tuple(p for p in settings.secrets if p[0] != "signing_key")})
    with _stores_lock:
        store = _stores.get(settings)
        if store is None:
            kwargs = settings.store_kwargs()
            if "contact_points" in kwargs:
                kwargs["contact_points"] = list(kwargs["contact_points"])
            store = _stores[settings] = open_store(settings.backend, **kwargs)
        return store


# --- references ---------------------------------------------------------------------------
def is_reference(value: Any) -> bool:
    return isinstance(value, dict) and value.get(REFERENCE_MARKER) is not None


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds")


def _buffer_bytes(value: Any) -> int | None:
    """The size of a bytes-like or array value, without serializing it (Airflow's JSON of an
    8 MiB array would be a list of a million numbers)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return memoryview(value).nbytes
    nbytes = getattr(value, "nbytes", None)
    return nbytes if isinstance(nbytes, int) else None


_TO_STORE = object()


def _inline_form(value: Any, threshold: int) -> Any:
    """Airflow's own serialization of ``value`` if it is at most ``threshold`` bytes as JSON, else
    ``_TO_STORE`` (also for values Airflow cannot serialize, and dicts that look like our reference)."""
    size = _buffer_bytes(value)
    if size is not None and size > threshold:
        return _TO_STORE
    if isinstance(value, str) and len(value) + 2 > threshold:  # its JSON has at least a byte a character
        return _TO_STORE
    try:
        serialized = BaseXCom.serialize_value(value)
        encoded = json.dumps(serialized, separators=(",", ":"))
    except (TypeError, ValueError, AttributeError, RecursionError):  # not Airflow-serializable: pickle it
        return _TO_STORE
    if len(encoded.encode()) > threshold or is_reference(serialized):
        return _TO_STORE
    return serialized


#: the length Airflow will map a value over, while ``set`` serializes it (None: not mapped over)
_mapping = threading.local()


class CassandraXComBackend(BaseXCom):
    """Airflow's XCom, with values over ``[asgard] threshold_bytes`` kept in the asgard store
    (Cassandra by default; Redis, S3 or local through the same class). See the module docstring."""

    # Airflow tells ``set`` (not ``serialize_value``) that downstream tasks map over the value
    @classmethod
    def set(cls, key, value, *, dag_id, task_id, run_id, map_index=-1, dag_result=False, _mapped_length=None):
        _mapping.length = _mapped_length
        try:
            super().set(key, value, dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index,
                        dag_result=dag_result, _mapped_length=_mapped_length)
        finally:
            _mapping.length = None

    @classmethod
    async def aset(cls, key, value, *, dag_id, task_id, run_id, map_index=-1, dag_result=False, _mapped_length=None):
        _mapping.length = _mapped_length
        try:
            await super().aset(key, value, dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index,
                               dag_result=dag_result, _mapped_length=_mapped_length)
        finally:
            _mapping.length = None

    @staticmethod
    def serialize_value(value: Any, *, key: str | None = None, task_id: str | None = None,
                        dag_id: str | None = None, run_id: str | None = None, map_index: int | None = None) -> Any:
        settings = read_settings()
        inline = _inline_form(value, settings.threshold_bytes)
        if inline is not _TO_STORE:
            return inline
        where = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index, "key": key}
        if not all((dag_id, run_id, task_id, key)):
            raise XComBackendConfigError(
                f"{describe(where)}: a value over the inline threshold needs its DAG, run, task and key to be "
                "stored; serialize_value was called without them (outside a task's XCom push).")
        store = configured_store(settings)
        okey = object_key(dag_id, run_id, task_id, map_index, key)
        try:
            _mark_run(store, dag_id, run_id)
            length = getattr(_mapping, "length", None)
            if length is not None and isinstance(value, (list, tuple)) and len(value) == length:
                return _put_items(store, okey, value, where)
            result = store.put(okey, value)
        except ObjectTooLargeError as exc:
            raise XComValueTooLargeError(where, exc.uri, exc.size, exc.limit) from None
        except StoreUnavailableError as exc:
            raise XComStoreUnavailableError(where, exc, writing=True) from exc
        m = result.manifest
        return {
            REFERENCE_MARKER: REFERENCE_VERSION,
            "uri": result.uri,
            "backend": store.backend,
            "scope": okey.scope,
            "path": okey.path,
            "bytes": m.size,
            "stored_bytes": m.stored_bytes,
            "codec": m.codec,
            "checksum": f"crc32:{m.checksum}",
            "version": m.version,
            "signed": m.signature is not None,
            "python_type": m.python_type,
            "created_at": _iso(m.created_at),
            "expires_at": _iso(m.created_at + store.ttl_seconds),
            **where,
            "map_index": -1 if map_index is None else int(map_index),
        }

    @staticmethod
    def deserialize_value(result) -> Any:
        value = result.value  # parsed JSON: a str is a user's string, never read as a reference
        if not is_reference(value):
            return BaseXCom.deserialize_value(result)
        if "items" in value:
            return StoredSequence(value)
        return load_reference(value)

    @staticmethod
    def orm_deserialize_value(result) -> Any:
        """What the UI shows for a row (Airflow 2's hook; Airflow 3 shows the row's JSON itself):
        the reference summarized, never a fetch of the stored value."""
        value = result.value
        if isinstance(value, str) and REFERENCE_MARKER in value:  # the ORM row's JSON text
            try:
                value = json.loads(value)
            except ValueError:
                pass
        if is_reference(value):
            return f"{value['uri']} ({value['bytes']:,} bytes, {value['codec']}, expires {value['expires_at']})"
        return BaseXCom.deserialize_value(result)

    @classmethod
    def purge(cls, xcom, *args) -> None:
        """Delete the stored object a row refers to (Airflow calls this before it deletes the row:
        a cleared or retried task instance). A failure is logged, not raised: the TTL still ends it."""
        value = getattr(xcom, "value", None)
        if not is_reference(value):
            return
        try:
            store = configured_store()
            paths = ([f"{value['path']}/{i}" for i in range(value["items"])] if "items" in value else [value["path"]])
            for path in paths:
                store.delete(ObjectKey(value["scope"], path))
        except StoreError as exc:
            log.warning("Could not purge %s (%s); it expires at %s", value.get("uri"), exc,
                                                value.get("expires_at"))


def _mark_run(store: ObjectStore, dag_id: str, run_id: str) -> None:
    """Record the run in the ``airflow-runs`` scope once per process (before its first object, so
    a put that dies half-way still leaves the run findable by ``asgard airflow purge``)."""
    token = (id(store), dag_id, run_id)
    if token in _marked_runs:
        return
    store.put(run_marker_key(dag_id, run_id),
              {"dag_id": dag_id, "run_id": run_id, "scope": scope_for_run(dag_id, run_id), "marked_at": time.time()})
    _marked_runs.add(token)


def _put_items(store: ObjectStore, base: ObjectKey, items, where: dict) -> dict:
    """A list that downstream tasks map over, one object per element (``<path>/<i>``)."""
    sizes, checksums, uri = [], [], store.uri(base)
    try:
        for i, item in enumerate(items):
            result = store.put(ObjectKey(base.scope, f"{base.path}/{i}"), item)
            sizes.append(result.manifest.size)
            checksums.append(f"crc32:{result.manifest.checksum}")
    except ObjectTooLargeError as exc:
        raise XComValueTooLargeError(where, exc.uri, exc.size, exc.limit) from None
    now = time.time()
    return {REFERENCE_MARKER: REFERENCE_VERSION, "uri": uri, "backend": store.backend, "scope": base.scope,
            "path": base.path, "items": len(sizes), "bytes": sum(sizes), "codec": store.codec.name,
            "item_bytes": sizes, "item_checksums": checksums, "signed": store.signer is not None,
            "python_type": f"{type(items).__module__}.{type(items).__qualname__}", "created_at": _iso(now),
            "expires_at": _iso(now + store.ttl_seconds), **where,
            "map_index": -1 if where["map_index"] is None else int(where["map_index"])}


class StoredSequence(Sequence):
    """A stored list that a task received whole: elements are read from the store when indexed
    (a mapped task instance indexes only its own), each once."""

    def __init__(self, ref: dict):
        self._ref, self._cache = ref, {}

    def __len__(self) -> int:
        return self._ref["items"]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = index + len(self) if index < 0 else index
        if not 0 <= i < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} stored items")
        if i not in self._cache:
            ref = {**self._ref, "path": f"{self._ref['path']}/{i}", "bytes": self._ref["item_bytes"][i],
                   "checksum": self._ref["item_checksums"][i]}
            ref["uri"] = f"{self._ref['uri']}/{i}"
            self._cache[i] = load_reference(ref, item=i)
        return self._cache[i]

    def __eq__(self, other) -> bool:
        return isinstance(other, (list, tuple, StoredSequence)) and len(other) == len(self) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"<StoredSequence of {len(self)} items at {self._ref['uri']}>"


def load_reference(ref: dict, item: int | None = None) -> Any:
    """The value a reference row stands for, or a typed error naming the task, key and run."""
    where = {name: ref.get(name) for name in ("dag_id", "run_id", "task_id", "map_index", "key")}
    if item is not None:
        where["key"] = f"{where['key']}[{item}]"
    uri = ref.get("uri", "")
    try:
        key = ObjectKey(ref["scope"], ref["path"])
    except (KeyError, StoreError) as exc:
        raise XComValueCorruptError(where, uri, f"the reference in Airflow's row is incomplete ({exc})") from None
    store = configured_store()
    if ref.get("backend") and ref["backend"] != store.backend:
        raise XComBackendConfigError(
            f"{describe(where)} was written to {ref['backend']} ({uri}), but this worker's [asgard] backend is "
            f"{store.backend}: give every worker the same [asgard] settings.")
    try:
        value, got = store.get(key)
    except ObjectMissingError:
        expires = ref.get("expires_at")
        expired = expires and datetime.fromisoformat(expires) <= datetime.now(timezone.utc)
        why = (f"it expired at {expires}: ttl_seconds is too short for this run" if expired else
               f"purged or deleted before its expiry at {expires}")
        raise XComValueMissingError(where, uri, why) from None
    except StoreUnavailableError as exc:
        raise XComStoreUnavailableError(where, exc, writing=False) from exc
    except TamperedObjectError as exc:
        raise XComValueTamperedError(where, uri, str(exc), exc.key_id) from None
    except (CorruptChunkError, CorruptManifestError) as exc:
        raise XComValueCorruptError(where, uri, str(exc)) from None
    m = got.manifest
    # a task log line per large value; a small one's read is logged at debug (a line through
    # Airflow's task logging cost about as much as the read itself at 10 KiB)
    log.log(logging.INFO if m.size >= LOGGED_READ_BYTES else logging.DEBUG, "Read %s from %s: %d bytes in %.3f s",
            describe(where), uri, m.size, got.seconds)
    # the store's checks prove the object is whole; this proves it is the one the row recorded
    if ref.get("checksum") not in (None, f"crc32:{m.checksum}") or ref.get("bytes") not in (None, m.size):
        raise XComValueCorruptError(
            where, uri, f"the stored object ({m.size:,} bytes, crc32:{m.checksum}, written {_iso(m.created_at)}) is "
            f"not the one Airflow's row recorded ({ref.get('bytes'):,} bytes, {ref.get('checksum')}): it was replaced")
    return value
