"""An Airflow 3 XCom backend that keeps large task results in Apache Cassandra (or Redis, S3, a
local directory): chunked, checksummed, optionally signed, every object with a TTL::

    [core]
    xcom_backend = asgard_airflow.CassandraXComBackend
    [asgard]
    backend = cassandra            # cassandra | redis | s3 | local
    contact_points = 10.0.0.5,10.0.0.6
    keyspace = airflow_xcom
    threshold_bytes = 65536        # values up to this (as JSON) stay in Airflow's table; -1: all of them
    ttl_seconds = 604800           # every stored object expires (0 is refused)
    conn_id = asgard_store         # optional: username/password and extras from this connection

With no settings it reaches the local node (127.0.0.1:9042, keyspace ``asgard``). Tasks need no
change: the downstream task's argument is the value, of the type it was returned with.

* A value over ``threshold_bytes`` (as Airflow's JSON) is stored, and the row (what the UI shows)
  holds a small JSON reference (:data:`REFERENCE_MARKER`, ``uri``, ``bytes``, ``format``,
  ``checksum``, ``expires_at``, the DAG, run, task, map index and key, and ``write_s``: the
  seconds the push took to encode and write it).
* What Airflow's serde carries is stored as UTF-8 JSON in its form (``format: json``) and read back
  through serde, so a stored value comes back as an inline one would (namedtuples as tuples,
  dataclasses and pydantic models under ``[core] allowed_deserialization_classes``); the rest
  (bytes, arrays, data frames, what serde refuses) as a pickle (``pickle``), signed when a signing
  key is set, whose imports the same allow list bounds beside the data libraries' value types
  (:mod:`asgard_airflow.allowed_classes`).
* Every push is a new object: scope ``airflow/<dag_id>/<run_id>``, path
  ``<task_id>/<map_index>/<key>/<push>`` (``<push>``: 32 time-ordered hex digits), so an older row
  reads its own value until purged; outside a task, ``NO_DAG_ID``/``NO_RUN_ID``/``NO_TASK_ID``/
  ``NO_KEY`` (as common-io's backend). A marker per run (scope ``airflow-runs``) is the index
  ``asgard airflow purge`` walks; :meth:`CassandraXComBackend.purge` deletes exactly a row's objects.
* A list or tuple that ``.expand()`` maps over is stored per element (``<path>/<i>``): a mapped
  instance reads only its element, a task taking the whole value gets a list (or tuple), read
  ``object_concurrency`` elements at a time; a fan-in over a mapped task's values reads ahead.
* A missing, expired, corrupt or altered object fails the read with a typed error
  (:mod:`asgard_airflow.errors`); a value (or element) over ``max_object_bytes`` fails before
  anything is written.

Settings: :mod:`asgard_airflow.settings` (``[asgard]``, ``AIRFLOW__ASGARD__<NAME>``; every setting the
client declares for the backend, secrets from the environment or the connection ``conn_id``).
"""
from __future__ import annotations

import functools
import json
import logging
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from airflow.sdk.bases.xcom import BaseXCom

from asgard.resources.stores.base import ObjectKey, ObjectStore, Serialized, new_version, run_bounded
from asgard.resources.stores.errors import (
    CorruptChunkError, CorruptManifestError, DisallowedGlobalError, ObjectMissingError, SerializationError,
    StoreConfigError, StoreError, StoreUnavailableError, TamperedObjectError,
)
from asgard.resources.stores.replicas import choose_replicas
from asgard.resources.stores.serde import AUTO_CODEC

from .allowed_classes import allowed_global
from .errors import (
    XComBackendConfigError, XComClassNotAllowedError, XComStoreUnavailableError, XComTaskSettingError,
    XComValueCorruptError, XComValueMissingError, XComValueTamperedError, XComValueTooLargeError, describe,
)
from .placement import placement_for, running_task
from .reference import REFERENCE_MARKER, REFERENCE_VERSION, is_reference
from .rendered import record_pull, record_push
from .settings import Settings, configured_store, read_settings
from .task_settings import check_placement_serves, task_settings
from .topology import readers_of

log = logging.getLogger(__name__)

#: the runs whose marker this process wrote (once each)
_marked_runs: set = set()
#: the scope of the per-run markers (``<dag_id>/<run_id>``): outside ``airflow/`` so that no
#: prefix-based purge of a run can reach it
RUNS_SCOPE = "airflow-runs"
#: values read from the store of at least this size get an INFO line in the task's log
LOGGED_READ_BYTES = 256 << 10
#: a fan-in's read-ahead holds at most this many bytes of values not yet asked for
READ_AHEAD_BYTES = 256 << 20
#: the names a value serialized outside a task is stored under (common-io's backend's)
PLACEHOLDERS = {"dag_id": "NO_DAG_ID", "run_id": "NO_RUN_ID", "task_id": "NO_TASK_ID", "key": "NO_KEY"}

def scope_for_run(dag_id: str, run_id: str) -> str:
    """The store scope of one DAG run: the unit ``asgard airflow purge`` deletes."""
    return f"airflow/{dag_id}/{run_id}"


def object_key(dag_id: str, run_id: str, task_id: str, map_index: int | None, key: str,
               push: str | None = None) -> ObjectKey:
    """Where one push of an XCom value lives: scope ``airflow/<dag_id>/<run_id>``, path
    ``<task_id>/<map_index>/<key>/<push>`` (without ``push``: the folder of every push)."""
    index = -1 if map_index is None else int(map_index)
    return ObjectKey(scope_for_run(dag_id, run_id), f"{task_id}/{index}/{key}" + (f"/{push}" if push else ""))


def run_marker_key(dag_id: str, run_id: str) -> ObjectKey:
    return ObjectKey(RUNS_SCOPE, f"{dag_id}/{run_id}")


# --- values and references ---------------------------------------------------------------------

def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds")


def _buffer_bytes(value: Any) -> int | None:
    """The size of a bytes-like or array value, without serializing it (Airflow's JSON of an
    8 MiB array would be a list of a million numbers)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return memoryview(value).nbytes
    nbytes = getattr(value, "nbytes", None)
    return nbytes if isinstance(nbytes, int) else None


class _ToStore:
    """The value goes to the store; ``form``: Airflow's serialization of it, where the size check made one."""

    def __init__(self, form: Any = None):
        self.form = form


def _inline_form(value: Any, threshold: int) -> Any:
    """Airflow's own serialization of ``value`` if it is at most ``threshold`` bytes as JSON, else a
    :class:`_ToStore` (also for values Airflow cannot serialize, and dicts that look like our reference)."""
    size = _buffer_bytes(value)
    if size is not None and size > threshold:
        return _ToStore()
    if isinstance(value, str) and len(value) + 2 > threshold:  # its JSON has at least a byte a character
        return _ToStore()
    try:
        serialized = BaseXCom.serialize_value(value)
        encoded = json.dumps(serialized, separators=(",", ":"))
    except (TypeError, ValueError, AttributeError, RecursionError):  # not Airflow-serializable: stored
        return _ToStore()
    if is_reference(serialized):
        return _ToStore()
    if len(encoded.encode()) > threshold:
        return _ToStore(serialized)  # the store writes this form: serde is not run over the value again
    return serialized


class _NotJson(Exception):
    """JSON cannot carry the value exactly: it is pickled."""


_TAGGED = {tuple: "builtins.tuple", set: "builtins.set", frozenset: "builtins.frozenset"}
#: keys that Airflow's deserializer reads as a tagged object, not a plain dict
_SERDE_KEYS = ("__classname__", "__type")


def _json_form(value: Any) -> Any:
    """``value`` as Airflow's serde writes it (tuples and sets tagged), if JSON carries it exactly
    (exact types only: a subclass, a numpy scalar or an int dict key would come back otherwise)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        if math.isfinite(value):  # NaN and infinities are not JSON
            return value
        raise _NotJson
    if kind is list:
        return [_json_form(v) for v in value]
    if kind is dict:
        if any(type(k) is not str or k in _SERDE_KEYS for k in value):
            raise _NotJson
        return {k: _json_form(v) for k, v in value.items()}
    if kind in _TAGGED:
        return {"__classname__": _TAGGED[kind], "__version__": 1, "__data__": [_json_form(v) for v in value]}
    raise _NotJson


def _serde_form(value: Any) -> Any:
    """``value`` as Airflow's serde writes it for an inline row (namedtuples as tuples, enums as
    their values, dataclasses and pydantic models by class name, int dict keys as strings)."""
    from airflow.sdk.serde import serialize

    try:
        return serialize(value)
    except (TypeError, ValueError, AttributeError, RecursionError):  # what Airflow refuses to push
        raise _NotJson from None


def _airflow_form(value: Any) -> Any:
    """Airflow's serialization of ``value``: exact built-ins without serde's recursion (the same form)."""
    try:
        return _json_form(value)
    except _NotJson:
        return _serde_form(value)


def _encode(store: ObjectStore, value: Any, form: Any = None) -> Serialized:
    """What Airflow's serde carries as UTF-8 JSON in its form (``form``, if made already), so that a
    stored value comes back as an inline one would; the rest (bytes, arrays, frames, what serde
    refuses) as a pickle (signed with a signing key)."""
    # pandas frames too: serde's form of one is its Parquet in hex, a pickle's its buffers as they are
    if _buffer_bytes(value) is None and not type(value).__module__.startswith("pandas"):
        try:
            out = store.serialize(_airflow_form(value) if form is None else form, "json")
            return replace(out, python_type=f"{type(value).__module__}.{type(value).__qualname__}")
        except (_NotJson, SerializationError):  # SerializationError: NaN, not JSON
            pass
    return store.serialize(value, "pickle5")


def _decode(value: Any, manifest) -> Any:
    """A stored object's value: JSON (parsed by the store) read back as Airflow's serde would."""
    if manifest.serializer != "json":
        return value
    from airflow.sdk.serde import deserialize

    return deserialize(value)


#: the length Airflow will map a value over, while ``set`` serializes it (None: not mapped over)
_mapping = threading.local()


def _check_key(key) -> None:
    # the message of Airflow's own XComModel.set (the SDK's BaseXCom.set does not check)
    if not key:
        raise ValueError(f"XCom key must be a non-empty string. Received: {key!r}")


class CassandraXComBackend(BaseXCom):
    """Airflow's XCom, with values over ``[asgard] threshold_bytes`` kept in the asgard store
    (Cassandra by default; Redis, S3 or local through the same class). See the module docstring."""

    # Airflow tells ``set`` (not ``serialize_value``) that downstream tasks map over the value
    @classmethod
    def set(cls, key, value, *, dag_id, task_id, run_id, map_index=-1, dag_result=False, _mapped_length=None):
        _check_key(key)
        _mapping.length = _mapped_length
        try:
            super().set(key, value, dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index,
                        dag_result=dag_result, _mapped_length=_mapped_length)
        finally:
            _mapping.length = None

    @classmethod
    async def aset(cls, key, value, *, dag_id, task_id, run_id, map_index=-1, dag_result=False, _mapped_length=None):
        _check_key(key)
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
        if settings.threshold_bytes < 0:  # -1: never offload, as common-io's backend
            return BaseXCom.serialize_value(value)
        inline = _inline_form(value, settings.threshold_bytes)
        if not isinstance(inline, _ToStore):
            return inline
        given = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "key": key}
        where = {name: given[name] or PLACEHOLDERS[name] for name in given}
        where["map_index"] = -1 if map_index is None else int(map_index)
        length = getattr(_mapping, "length", None)
        per_item = length is not None and type(value) in (list, tuple) and len(value) == length
        return _store(settings, value, where, per_item, None if per_item else inline.form)

    @staticmethod
    def deserialize_value(result) -> Any:
        value = result.value  # parsed JSON: a str is a user's string, never read as a reference
        if not is_reference(value):
            return BaseXCom.deserialize_value(result)
        if "items" in value:
            # a mapped instance indexes its own element out of what Airflow's expand input resolves
            return StoredSequence(value) if _resolving_expand_input() else _load_items(value)
        if value.get("map_index", -1) >= 0:
            return _read_ahead.load(value)
        return load_reference(value)

    @classmethod
    def purge(cls, xcom, *args) -> None:
        """Delete exactly the stored objects a row refers to (Airflow calls this when a cleared or
        retried task instance runs again). A failure is logged, not raised: the TTL still ends it."""
        value = getattr(xcom, "value", None)
        if not is_reference(value):
            return
        try:
            store = configured_store()
            paths = ([f"{value['path']}/{i}" for i in range(value["items"])] if "items" in value else [value["path"]])
            for path in paths:
                store.delete(ObjectKey(value["scope"], path))
        except StoreError as exc:
            log.warning("Could not purge %s (%s); it expires at %s", value.get("uri"), exc, value.get("expires_at"))


def _store(settings: Settings, value: Any, where: dict, per_item: bool, form: Any = None) -> dict:
    """Write ``value`` (or each element) as a new object and return the row's reference; ``form``:
    Airflow's serialization of the whole value, where one was made."""
    t0 = time.perf_counter()
    store = configured_store(settings)
    base = object_key(where["dag_id"], where["run_id"], where["task_id"], where["map_index"], where["key"],
                      new_version())
    pieces = [_encode(store, v) for v in value] if per_item else [_encode(store, value, form)]
    keys = [ObjectKey(base.scope, f"{base.path}/{i}") for i in range(len(pieces))] if per_item else [base]
    for okey, piece in zip(keys, pieces):  # the size guard, before anything (the run's marker too) is written
        if piece.size > store.max_object_bytes:
            raise XComValueTooLargeError(where, store.uri(okey), piece.size, store.max_object_bytes)
    task = running_task(where["dag_id"], where["task_id"])
    own = task_settings(task)  # the task's params["asgard"]: checked, and they win
    if task is not None:
        check_placement_serves(task, own, store.placement)
    placement = placement_for(store.placement, task, store.measured_read_mib_s,  # auto: its readers, the executor,
                              own.placement, own.reason("placement"))        # the store's reads
    readers = readers_of(task, where["key"])  # what a per-value codec choice weighs
    replicas = None
    if own.replicas is not None:
        try:
            replicas = choose_replicas(own.replicas, store.replication_factor, readers, caller=True)
        except StoreConfigError as exc:  # one copy of a store that keeps its own
            raise XComTaskSettingError(task, "replicas", own.replicas, ["store", "auto"]) from exc
    try:
        _mark_run(store, where["dag_id"], where["run_id"])
        results = list(run_bounded(lambda i: store.put_serialized(keys[i], pieces[i], codec=own.codec,
                                                                  readers=readers, placement=placement,
                                                                  replicas=replicas),
                                   range(len(keys)), min(settings.object_concurrency, len(keys))))
    except StoreUnavailableError as exc:
        raise XComStoreUnavailableError(where, exc, writing=True) from exc
    formats = ["json" if p.serializer == "json" else "pickle" for p in pieces]
    manifests = [r.manifest for r in results]
    created = manifests[0].created_at if manifests else time.time()
    ref = {REFERENCE_MARKER: REFERENCE_VERSION, "uri": store.uri(base), "backend": store.backend, "scope": base.scope,
           "path": base.path, "bytes": sum(m.size for m in manifests),
           "stored_bytes": sum(m.stored_bytes for m in manifests),
           # what the objects were stored with (codec "auto" chooses per object)
           "codec": ",".join(sorted({m.codec for m in manifests})) or store.codec.name,
           "format": formats[0] if len(set(formats)) == 1 else "mixed", "signed": store.signer is not None,
           "python_type": f"{type(value).__module__}.{type(value).__qualname__}", "created_at": _iso(created),
           "expires_at": _iso(created + store.ttl_seconds), **where}
    if any(r.placement_reason for r in results):  # where it lives relative to its readers, and why
        ref.update(placement=",".join(sorted({r.placement for r in results})),
                   placement_reason=next(r.placement_reason for r in results if r.placement_reason))
    if any(r.replicas_reason for r in results):  # how many copies the ring keeps of its chunks, and why
        ref.update(replicas=",".join(sorted({str(r.replicas or "store") for r in results})),
                   replicas_reason=next(r.replicas_reason for r in results if r.replicas_reason))
    if per_item:
        ref.update(items=len(manifests), item_bytes=[m.size for m in manifests],
                   item_checksums=[f"crc32:{m.checksum}" for m in manifests])
        if ref["format"] == "mixed":
            ref["item_formats"] = formats
    else:
        ref.update(checksum=f"crc32:{manifests[0].checksum}", version=manifests[0].version)
    # the pushing task's Rendered Template names what was decided for this value, and why
    codec_why = own.reason("codec") if own.codec else f"[asgard] codec = {settings.option('codec')}"
    chosen = own.codec is None or own.codec == AUTO_CODEC  # a named codec's reason is the task's params
    record_push(task, where, ref, codec_why, [r.codec_reason for r in results if r.codec_reason and chosen])
    ref["write_s"] = round(time.perf_counter() - t0, 4)  # encoding and writing: the store's share of the task
    return ref


def _mark_run(store: ObjectStore, dag_id: str, run_id: str) -> None:
    """Record the run in the ``airflow-runs`` scope once per process (before its first object, so
    a put that dies half-way still leaves the run findable by ``asgard airflow purge``)."""
    token = (id(store), dag_id, run_id)
    if token in _marked_runs:
        return
    store.put(run_marker_key(dag_id, run_id),
              {"dag_id": dag_id, "run_id": run_id, "scope": scope_for_run(dag_id, run_id), "marked_at": time.time()})
    _marked_runs.add(token)


@functools.cache
def _expand_resolvers() -> frozenset:
    """The code of Airflow's expand-input ``resolve`` methods (private names: checked by a contract
    test). In Airflow 3.3 a mapped instance resolves its input by reading the whole row
    (``xcom_pull``, so ``deserialize_value``) and then indexing it (``value[map_index]``)."""
    from airflow.sdk.definitions._internal.expandinput import DictOfListsExpandInput, ListOfDictsExpandInput

    return frozenset(cls.resolve.__code__ for cls in (DictOfListsExpandInput, ListOfDictsExpandInput))


def _resolving_expand_input() -> bool:
    """Whether this read is a mapped task instance resolving its ``.expand()`` input."""
    codes, frame = _expand_resolvers(), sys._getframe(1)
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


class StoredSequence(Sequence):
    """A stored list as a mapped task instance's expand input sees it: an element is read from the
    store when indexed (an instance indexes only its own), each once."""

    def __init__(self, ref: dict):
        self._ref, self._cache = ref, {}

    def __len__(self) -> int:
        return self._ref["items"]

    def _load(self, i: int) -> Any:
        ref = {**self._ref, "path": f"{self._ref['path']}/{i}", "uri": f"{self._ref['uri']}/{i}",
               "bytes": self._ref["item_bytes"][i], "checksum": self._ref["item_checksums"][i]}
        return load_reference(ref, item=i)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = index + len(self) if index < 0 else index
        if not 0 <= i < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} stored items")
        if i not in self._cache:
            self._cache[i] = self._load(i)
        return self._cache[i]


def _load_items(ref: dict) -> list | tuple:
    """The whole list (or tuple) a downstream ``.expand()`` maps over, its elements read at once."""
    seq = StoredSequence(ref)
    items = list(run_bounded(seq._load, range(len(seq)), min(read_settings().object_concurrency, len(seq))))
    return tuple(items) if ref.get("python_type") == "builtins.tuple" else items


@functools.cache
def _pool(pid: int, workers: int) -> ThreadPoolExecutor:
    # per process: a forked task process inherits no threads
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="asgard-xcom-read")


def _fetch(store: ObjectStore, key: ObjectKey):
    value, got = store.get(key, allowed_global=allowed_global)  # a pickle imports what Airflow allows
    return _decode(value, got.manifest), got


class _ReadAhead:
    """A fan-in gets a mapped task's values one row at a time, in map-index order (Airflow's lazy
    sequence). From the second row in order, the objects of the next map indexes (listed in the
    run's scope) are read ahead, ``object_concurrency`` at a time and :data:`READ_AHEAD_BYTES` in
    all; each is handed out only if it is the object its own row names (path, size, checksum)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._scans: dict[tuple, dict] = {}  # (scope, task, key) -> last map index, paths to come, futures

    def load(self, ref: dict) -> Any:
        settings = read_settings()
        index = ref["map_index"]
        with self._lock:
            scan = self._scans.setdefault((ref["scope"], ref["task_id"], ref["key"]),
                                          {"last": None, "queue": deque(), "pending": {}})
            future = scan["pending"].pop(ref["path"], None)
            if future is None and scan["last"] == index - 1 and settings.object_concurrency > 1:
                for stale in scan["pending"].values():
                    stale.cancel()
                scan["pending"], scan["queue"] = {}, self._next_paths(ref)
            scan["last"] = index
            window = max(1, min(settings.object_concurrency, READ_AHEAD_BYTES // max(1, ref.get("bytes") or 1)))
            while scan["queue"] and len(scan["pending"]) < window:
                path = scan["queue"].popleft()
                scan["pending"][path] = _pool(os.getpid(), settings.object_concurrency).submit(
                    _fetch, configured_store(settings), ObjectKey(ref["scope"], path))
        if future is not None:
            try:
                value, got = future.result()
                if _recorded(ref, got.manifest):
                    _log_read(ref, _where(ref), got)
                    return value
            except StoreError:
                pass  # read again through the row: its error names the task, key and run
        return load_reference(ref)

    @staticmethod
    def _next_paths(ref: dict) -> deque:
        """Paths of the same task's and key's objects at higher map indexes, in order (an index
        with two pushes is left to its row)."""
        prefix, found = f"{ref['task_id']}/", {}
        for path in configured_store().list_paths(ref["scope"]):
            index, _, rest = path[len(prefix):].partition("/") if path.startswith(prefix) else ("", "", "")
            push = rest[len(ref["key"]) + 1:] if rest.startswith(f"{ref['key']}/") else ""
            if index.isdigit() and int(index) > ref["map_index"] and push and "/" not in push:
                found.setdefault(int(index), []).append(path)
        return deque(paths[0] for _, paths in sorted(found.items()) if len(paths) == 1)


_read_ahead = _ReadAhead()


def _where(ref: dict, item: int | None = None) -> dict:
    where = {name: ref.get(name) for name in ("dag_id", "run_id", "task_id", "map_index", "key")}
    if item is not None:
        where["key"] = f"{where['key']}[{item}]"
    return where


def _recorded(ref: dict, manifest) -> bool:
    """Whether a stored object is the one Airflow's row recorded (a push after it is another object)."""
    return ref.get("checksum") in (None, f"crc32:{manifest.checksum}") and ref.get("bytes") in (None, manifest.size)


def _log_read(ref: dict, where: dict, got) -> None:
    # a task log line per large value; a small one's at debug (a line through Airflow's task
    # logging cost about as much as the read itself at 10 KiB)
    m = got.manifest
    source = {"local copy": " (its local copy on this host)"}.get(got.source, "") + (
        f" (its local copy: {got.fallback}, the ring served)" if got.fallback else "")
    log.log(logging.INFO if m.size >= LOGGED_READ_BYTES else logging.DEBUG, "Read %s from %s%s: %d bytes in %.3f s",
            describe(where), ref.get("uri", ""), source, m.size, got.seconds)
    record_pull(ref, where, got)  # and the pulling task's Rendered Template


def load_reference(ref: dict, item: int | None = None) -> Any:
    """The value a reference row stands for, or a typed error naming the task, key and run."""
    where, uri = _where(ref, item), ref.get("uri", "")
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
        value, got = _fetch(store, key)
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
    except DisallowedGlobalError as exc:
        raise XComClassNotAllowedError(where, uri, exc.classname) from None
    _log_read(ref, where, got)
    m = got.manifest
    if not _recorded(ref, m):  # the store's checks prove the object whole; this, that it is the row's
        raise XComValueCorruptError(
            where, uri, f"the stored object ({m.size:,} bytes, crc32:{m.checksum}, written {_iso(m.created_at)}) is "
            f"not the one Airflow's row recorded ({ref.get('bytes'):,} bytes, {ref.get('checksum')}): it was replaced")
    return value
