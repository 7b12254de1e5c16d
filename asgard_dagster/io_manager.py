"""What every Asgard IO manager shares: the Dagster key layout, output/input metadata, and
turning store errors into messages that name the step to re-execute.

Key layout (one :class:`~asgard.resources.stores.ObjectKey` per output):

* op output: scope ``run/<run_id>``, path ``<step_key>/<output_name>[/<mapping_key>]``
  (Dagster's ``context.get_identifier()``; the run is the purge unit);
* asset: scope ``asset/<key/parts>``, path ``<partition_key>`` or ``__unpartitioned__``; a
  multi-partition key is its dimension keys sorted by dimension name and joined by ``/``.

The partition rules are those of Dagster's ``UPathIOManager`` (the base of dagster-aws's S3 manager),
so an asset moved between them keeps its meaning: an output is for exactly one partition (a
single-run backfill over a range must write its own data and return None); an input of one
partition loads as the value, of several (a time window, ``AllPartitionMapping``, a range) as a
dict by partition key, of none as None; a missing partition fails, or is skipped when the input's
metadata has ``allow_missing_partitions=True``.

A backend's IO manager subclasses :class:`StoreIOManager` and implements ``open_store`` (a networked
one through :class:`~asgard_dagster.connection.ConnectionIOManager`: its nested resource opens it).
"""
from __future__ import annotations

import abc
import threading
from typing import Any, Optional

from dagster import ConfigurableIOManager, InputContext, MetadataValue, OutputContext
from pydantic import BaseModel, Field

from asgard.resources.stores import ObjectKey, ObjectMissingError, ObjectStore
from asgard.resources.stores.stream import Stream

MiB = 1024 * 1024

_store_cache: dict[tuple, ObjectStore] = {}
_store_cache_lock = threading.Lock()


def resolved(value: Any) -> Any:
    """The value of an ``EnvVar`` field, read now. Dagster resolves EnvVars when it builds a run's
    resources; an IO manager or resource object used directly (the purge sensor's, the CLI's) still
    holds the EnvVar, a ``str`` whose text is the variable's name, not its value."""
    from dagster import EnvVar

    return value.get_value() if isinstance(value, EnvVar) else value


def partition_path(partition_key: str) -> str:
    """A partition key as a path: a multi-partition key is its dimension keys sorted by dimension
    name, joined by ``/`` (as ``UPathIOManager`` formats it), anything else the key itself."""
    from dagster import MultiPartitionKey

    if isinstance(partition_key, MultiPartitionKey):
        return "/".join(k for _, k in sorted(partition_key.keys_by_dimension.items()))
    return partition_key


def mib(n: int) -> float:
    """``n`` bytes in MiB to three significant digits: 8 MiB reads 8, an 86-byte output 8.2e-05."""
    return float(f"{n / MiB:.3g}")


def key_for_output(context: OutputContext) -> ObjectKey:
    if context.has_asset_key:
        if not context.has_asset_partitions:
            return ObjectKey.for_asset(context.asset_key.path)
        partitions = context.asset_partition_keys
        if len(partitions) != 1:
            raise OutputForSeveralPartitionsError(context.asset_key.to_user_string(), len(partitions))
        return ObjectKey.for_asset(context.asset_key.path, partition_path(partitions[0]))
    run_id, *rest = context.get_identifier()
    return ObjectKey.for_run(run_id, *rest)


def keys_for_input(context: InputContext) -> dict[str | None, ObjectKey]:
    """``{partition_key: key}`` of a partitioned asset input (one per partition it spans, maybe
    none), else ``{None: key}``."""
    if context.has_asset_key:
        if context.has_asset_partitions:
            return {p: ObjectKey.for_asset(context.asset_key.path, partition_path(p))
                    for p in context.asset_partition_keys}
        return {None: ObjectKey.for_asset(context.asset_key.path)}
    return {None: key_for_output(context.upstream_output)}


class OutputForSeveralPartitionsError(ValueError):
    """An asset output stands for several partitions at once (a single-run backfill over a range)."""

    def __init__(self, asset: str, count: int):
        super().__init__(
            f"Asset {asset} returned one value for {count} partitions (a single-run backfill over a range). "
            "This IO manager stores one object per partition: launch the backfill with a multi-run backfill "
            "policy, or write the partitions yourself and return None (annotate the asset `-> None`)."
        )


class StoreIOManager(ConfigurableIOManager, abc.ABC):
    """Stores each output in an :class:`~asgard.resources.stores.ObjectStore`: chunked, checksummed,
    committed by a manifest written last, with a TTL."""

    ttl_seconds: int = Field(
        default=7 * 24 * 3600,
        description="Lifetime of stored outputs in seconds (ephemeral data); 0 keeps them until purged. "
        "Keep it longer than you may wait before 're-execute from failure', which reads the parent run's outputs.",
    )
    codec: str = Field(default="none", description="Chunk compression: 'none', 'lz4' or 'zstd'.")
    serializer: str = Field(default="pickle5", description="Value serializer (pickle protocol 5, out-of-band buffers).")
    max_object_bytes: int = Field(
        default=2 << 30, description="Largest serialized output accepted; a larger one fails before anything is written."
    )
    chunk_size_bytes: int = Field(default=0, description="Bytes per chunk; 0 uses the backend's default.")
    concurrency: int = Field(default=8, description="Chunk requests in flight per output (backpressure window).")
    signing_key: Optional[str] = Field(
        default=None,
        description="Secret for HMAC-SHA256 signatures, given as EnvVar('...'): every output is signed, and an "
        "input is verified before it is unpickled; unsigned or altered objects are refused (TamperedObjectError).",
    )

    @abc.abstractmethod
    def open_store(self, **store_kwargs) -> ObjectStore:
        """A store of this backend with the given common options."""

    # --- store, cached per process and configuration ---------------------------------------
    def store(self) -> ObjectStore:
        # values, not the config dictionary: there an EnvVar is its name, and a changed password
        # (or CA) must not get the store opened with the old one
        config = _fingerprint(self)
        key = (type(self).__name__, config)
        with _store_cache_lock:
            store = _store_cache.get(key)
            if store is None:
                kwargs = dict(
                    ttl_seconds=self.ttl_seconds, codec=self.codec, serializer=self.serializer,
                    max_object_bytes=self.max_object_bytes, concurrency=self.concurrency,
                )
                if self.chunk_size_bytes:
                    kwargs["chunk_size"] = self.chunk_size_bytes
                if self.signing_key is not None:
                    kwargs["signing_key"] = resolved(self.signing_key)
                store = _store_cache[key] = self.open_store(**kwargs)
        return store

    def purge_run(self, run_id: str) -> None:
        """Delete every output of one run (and nothing of any other run)."""
        self.store().purge_scope(f"run/{run_id}")

    # --- Dagster IOManager ------------------------------------------------------------------
    def handle_output(self, context: OutputContext, obj: Any) -> None:
        store = self.store()
        key = key_for_output(context)
        # a Stream is written chunk by chunk as it comes, never whole in memory
        result = store.put_stream(key, obj) if isinstance(obj, Stream) else store.put(key, obj)
        m = result.manifest
        # the UI's event log shows the first rows of an event's metadata and folds the rest:
        # where it is, its size in MiB and the write speed come first
        context.add_output_metadata({
            "dagster/uri": MetadataValue.text(result.uri),
            "size_mib": MetadataValue.float(mib(m.size)),
            "write_mb_s": MetadataValue.float(round(m.size / MiB / max(result.seconds, 1e-9), 2)),
            "write_seconds": MetadataValue.float(round(result.seconds, 6)),
            "backend": store.backend,
            "codec": m.codec,
            "stored_mib": MetadataValue.float(mib(m.stored_bytes)),
            "chunks": MetadataValue.int(m.chunks),
            "bytes": MetadataValue.int(m.size),
            "stored_bytes": MetadataValue.int(m.stored_bytes),
            "checksum": m.checksum,
            "python_type": m.python_type,
        })

    def load_input(self, context: InputContext) -> Any:
        store = self.store()
        keys = keys_for_input(context)
        allow_missing = bool((context.definition_metadata or {}).get("allow_missing_partitions", False))
        # an input annotated Stream reads chunks on demand (whatever was stored: a stream or a value's bytes)
        fetch = store.open_stream if _wants_stream(context) else store.get
        values, total_bytes, total_seconds = {}, 0, 0.0
        for partition, key in keys.items():
            try:
                value, result = fetch(key)
            except ObjectMissingError as exc:
                if partition is not None and allow_missing:
                    context.log.info(f"Partition {partition} of {_producer(context)} is not stored; skipped "
                                     "(allow_missing_partitions)")
                    continue
                raise ObjectMissingError(
                    exc.uri, exc.ttl_seconds, f"Re-execute the step that produces it ({_producer(context)})."
                ) from None
            values[partition] = value
            total_bytes += result.manifest.size
            total_seconds += result.seconds
        # the UI folds an event's metadata after its first rows: size and speed first
        metadata = {
            "size_mib": MetadataValue.float(mib(total_bytes)),
            "read_mb_s": MetadataValue.float(round(total_bytes / MiB / max(total_seconds, 1e-9), 2)),
            "read_seconds": MetadataValue.float(round(total_seconds, 6)),
            "backend": store.backend,
            "bytes": MetadataValue.int(total_bytes),
        }
        if len(keys) == 1 or not context.has_asset_key:
            context.add_input_metadata(metadata)
        else:  # Dagster records input metadata of one partition only (it raises for a window or a range)
            context.log.info(f"Loaded {len(values)} of {len(keys)} partitions of {_producer(context)}: "
                             f"{mib(total_bytes)} MiB in {total_seconds:.3f} s on {store.backend}")
        if list(keys) == [None]:
            return values[None]
        if len(keys) == 1:
            return next(iter(values.values()), None)
        return values


def _wants_stream(context: InputContext) -> bool:
    from dagster import DagsterInvariantViolationError

    try:
        typing_type = getattr(context.dagster_type, "typing_type", None)
    except DagsterInvariantViolationError:  # a context built by hand without a type
        return False
    return isinstance(typing_type, type) and issubclass(typing_type, Stream)


def _fingerprint(config: BaseModel) -> tuple:
    """The values of a resource's fields, read now, a nested resource's (the connection) included."""
    return tuple(sorted(
        (k, _fingerprint(v) if isinstance(v, BaseModel) else repr(resolved(v)))
        for k, v in ((k, getattr(config, k)) for k in type(config).model_fields)
    ))


def _producer(context: InputContext) -> str:
    if context.has_asset_key:
        return f"asset {context.asset_key.to_user_string()}"
    up = context.upstream_output
    return f"step '{up.step_key}' output '{up.name}' of run {up.run_id}"
