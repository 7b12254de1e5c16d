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

A backend's IO manager subclasses :class:`StoreIOManager` and implements ``connection_settings`` (a networked
one through :class:`~asgard_dagster.connection.ConnectionIOManager`: its nested resource holds them); the
client's one cache (:func:`~asgard.resources.stores.registry.shared_store`) opens the store.
"""
from __future__ import annotations

import abc
from typing import Any, Optional

from dagster import ConfigurableIOManager, InputContext, MetadataValue, OutputContext, partition_loading_context
from pydantic import Field

from asgard.resources.stores import ObjectKey, ObjectMissingError, ObjectStore
from asgard.resources.stores.errors import StoreConfigError
from asgard.resources.stores.registry import shared_store
from asgard.resources.stores.replicas import AUTO_REPLICAS, STORE_REPLICAS, ReplicasChoice, check_replicas, choose_replicas
from asgard.resources.stores.settings import STORAGE
from asgard.resources.stores.stream import Stream

from .output_settings import OutputSettingError, PlacementCannotServeError, _output_name  # noqa: F401 -- re-exported
from .placement import placement_for
from .settings import described

MiB = 1024 * 1024


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
    if context.upstream_output is None:
        raise InputWithoutSourceError(context.name, _op_name(context))
    return {None: key_for_output(context.upstream_output)}


#: an output's metadata key naming its codec ("none", "lz4", "zstd", "blosc-lz4", or "auto")
CODEC_METADATA_KEY = "asgard/codec"


def output_codec(context: OutputContext) -> str | None:
    """The codec the output's definition names (``Out(metadata={"asgard/codec": "zstd"})``, or an
    asset's metadata), checked before anything is written; None leaves it to the store."""
    from asgard.resources.stores.serde import AUTO_CODEC, CODECS

    value = (context.definition_metadata or {}).get(CODEC_METADATA_KEY)
    if value is None:
        return None
    value = getattr(value, "value", value)  # a MetadataValue.text
    allowed = sorted(CODECS) + [AUTO_CODEC]
    if value not in allowed:
        raise OutputSettingError(_output_name(context), CODEC_METADATA_KEY, value, allowed)
    return value


#: an output's metadata key naming the copies the ring keeps of its chunks (1, "store" or "auto")
REPLICAS_METADATA_KEY = "asgard/replicas"
REPLICAS_ALLOWED = [1, STORE_REPLICAS, AUTO_REPLICAS]


def output_replicas(context: OutputContext, setting: str, store: ObjectStore, reads: int) -> ReplicasChoice | None:
    """The copies of the output's chunks: its definition's ``asgard/replicas``, else the IO
    manager's ``replicas`` (``auto`` decided here, where an asset is known: it keeps the store's
    factor); checked before anything is written. None leaves it to the store's setting."""
    value = (context.definition_metadata or {}).get(REPLICAS_METADATA_KEY)
    value = getattr(value, "value", value)  # a MetadataValue.int or .text
    if value is not None:
        try:
            value = check_replicas(value)
        except StoreConfigError:
            raise OutputSettingError(_output_name(context), REPLICAS_METADATA_KEY, value, REPLICAS_ALLOWED) from None
    elif setting != AUTO_REPLICAS:
        return None
    keep = "an asset is read by later runs, on any host" if context.has_asset_key else None
    return choose_replicas(value or setting, store.replication_factor, reads, keep, caller=value is not None)


#: an input's (or its producer's output's) metadata key naming how its chunks are read
CHUNK_READS_METADATA_KEY = "asgard/chunk_reads"


def input_chunk_reads(context: InputContext) -> str | None:
    """How the input's chunks are read where its definition says (``In(metadata={"asgard/chunk_reads":
    "nearest-one"})``), else its producer's output's; None leaves it to the store's ``chunk_reads``."""
    from asgard.resources.stores.results import CHUNK_READS

    upstream = context.upstream_output
    for whose, metadata in (("input", context.definition_metadata),
                            ("output", getattr(upstream, "definition_metadata", None))):
        value = (metadata or {}).get(CHUNK_READS_METADATA_KEY)
        if value is None:
            continue
        value = getattr(value, "value", value)  # a MetadataValue.text
        if value not in CHUNK_READS:
            op = _op_name(context)
            where = (f"input '{context.name}' of op '{op}'" if whose == "input" else
                     f"output '{upstream.name}' of step '{upstream.step_key}' (read by op '{op}')")
            raise OutputSettingError(where, CHUNK_READS_METADATA_KEY, value, list(CHUNK_READS), "nothing was read")
        return value
    return None


def readers_of(context: OutputContext) -> int:
    """How many steps read this output, from the job's topology (1 where it is not known: an
    asset's); a dynamic fan-out has the degree of the job's last successful run, if any."""
    from .topology import analyze_job, history

    try:
        job, instance = context.step_context.job_def, context.step_context.instance
    except Exception:  # an OutputContext built by hand (build_output_context): no job around it
        return 1
    found = _topologies.get(id(job))
    if found is None or found[0] is not job:  # an id is reused once its job is gone
        try:
            degrees = history(instance, job.name)[0]
        except Exception:  # an instance whose run storage cannot answer: the analyzer's degree
            degrees = {}
        try:  # a dynamic partitions definition lists its keys from the instance
            with partition_loading_context(dynamic_partitions_store=instance):
                topology = analyze_job(job, degrees or None)
        except Exception as exc:  # an estimate never fails the step that stores the output
            context.log.warning(f"asgard: the job's topology could not be read ({type(exc).__name__}: {exc}); "
                                f"{context.step_key}'s output is taken to have 1 reader")
            return 1
        found = _topologies[id(job)] = (job, topology)
    return found[1].reads_per_object(context.step_key.split("[", 1)[0], context.name)


_topologies: dict[int, Any] = {}


class OutputForSeveralPartitionsError(ValueError):
    """An asset output stands for several partitions at once (a single-run backfill over a range)."""

    def __init__(self, asset: str, count: int):
        super().__init__(
            f"Asset {asset} returned one value for {count} partitions (a single-run backfill over a range). "
            "This IO manager stores one object per partition: launch the backfill with a multi-run backfill "
            "policy, or write the partitions yourself and return None (annotate the asset `-> None`)."
        )


class InputWithoutSourceError(ValueError):
    """An op input neither fed by an upstream output nor an asset's: nothing stored stands for it.
    Attributes: ``input_name``, ``op_name``."""

    def __init__(self, input_name: str, op_name: str):
        self.input_name, self.op_name = input_name, op_name
        super().__init__(
            f"Input {input_name!r} of op {op_name!r} has no upstream output and no asset key, so this IO manager has "
            "nothing to load for it: connect it to an op's output, give it a default value or run config, or load "
            "it with an input manager (In(input_manager_key=...)).")


class StoreIOManager(ConfigurableIOManager, abc.ABC):
    """Stores each output in an :class:`~asgard.resources.stores.ObjectStore`: chunked, checksummed,
    committed by a manifest written last, with a TTL."""

    ttl_seconds: int = described(STORAGE["ttl_seconds"], also="0 keeps them until purged.")
    codec: str = described(STORAGE["codec"])
    serializer: str = Field(default="pickle5", description="Value serializer (pickle protocol 5, out-of-band "
                                                           "buffers, each stored 64-byte aligned).")
    max_object_bytes: int = described(STORAGE["max_object_bytes"])
    chunk_size_bytes: int = described(STORAGE["chunk_size_bytes"])
    concurrency: int = described(STORAGE["concurrency"])
    signing_key: Optional[str] = described(STORAGE["signing_key"])
    placement: str = described(STORAGE["placement"])
    replicas: str = described(STORAGE["replicas"])

    @abc.abstractmethod
    def connection_settings(self) -> tuple[str, dict]:
        """``(backend name, its connection settings with EnvVars read)`` of the store behind this IO manager."""

    def storage_settings(self) -> dict:
        """The settings every backend shares (lifetime, codec, size limit, chunking, signing)."""
        kwargs = dict(ttl_seconds=self.ttl_seconds, codec=self.codec, serializer=self.serializer,
                      max_object_bytes=self.max_object_bytes, concurrency=self.concurrency,
                      placement=self.placement, replicas=self.replicas)
        if self.chunk_size_bytes:
            kwargs["chunk_size"] = self.chunk_size_bytes
        if self.signing_key is not None:
            kwargs["signing_key"] = resolved(self.signing_key)
        return kwargs

    def store(self) -> ObjectStore:
        """The process's one store for these settings (the client's cache: an EnvVar is read at each
        call, so a changed password or CA opens a new store rather than reusing the old one)."""
        backend, connection = self.connection_settings()
        return shared_store(backend, **connection, **self.storage_settings())

    def purge_run(self, run_id: str) -> None:
        """Delete every output of one run (and nothing of any other run)."""
        self.store().purge_scope(f"run/{run_id}")

    # --- Dagster IOManager ------------------------------------------------------------------
    def handle_output(self, context: OutputContext, obj: Any) -> None:
        store = self.store()
        key = key_for_output(context)
        codec = output_codec(context)  # the user's, per output, wins over the store's
        reads = readers_of(context)
        replicas = output_replicas(context, self.replicas, store, reads)
        # likewise; checked for the whole job first
        placement = placement_for(context, self.placement, store.server_hosts, reads, store.measured_read_mib_s)
        # a Stream is written chunk by chunk as it comes, never whole in memory
        if isinstance(obj, Stream):
            result = store.put_stream(key, obj, replicas=replicas, readers=reads)
        elif (codec is not None or store.auto_codec or placement is not None or replicas is not None
              or store.replicas != STORE_REPLICAS):
            result = store.put(key, obj, codec=codec, readers=reads, placement=placement, replicas=replicas)
        else:
            result = store.put(key, obj)
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
            **({"codec_reason": result.codec_reason} if result.codec_reason else {}),
            **({"placement": result.placement, "placement_reason": result.placement_reason}
               if result.placement_reason else {}),
            **({"replicas": MetadataValue.int(result.replicas) if result.replicas else "store",
                "replicas_reason": result.replicas_reason} if result.replicas_reason else {}),
        })

    def load_input(self, context: InputContext) -> Any:
        store = self.store()
        keys = keys_for_input(context)
        allow_missing = bool((context.definition_metadata or {}).get("allow_missing_partitions", False))
        # an input annotated Stream reads chunks on demand (whatever was stored: a stream or a value's bytes)
        chunk_reads = input_chunk_reads(context)  # the edge's own, checked before anything is read
        if _wants_stream(context):
            fetch = store.open_stream
        else:
            fetch = lambda key: store.get(key, chunk_reads)  # noqa: E731
        values, total_bytes, total_seconds, sources = {}, 0, 0.0, []
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
            sources.append(result)
            total_bytes += result.manifest.size
            total_seconds += result.seconds
        # the UI folds an event's metadata after its first rows: size and speed first
        metadata = {
            "size_mib": MetadataValue.float(mib(total_bytes)),
            "read_mb_s": MetadataValue.float(round(total_bytes / MiB / max(total_seconds, 1e-9), 2)),
            "read_seconds": MetadataValue.float(round(total_seconds, 6)),
            "backend": store.backend,
            "bytes": MetadataValue.int(total_bytes),
            **local_copy_metadata(store, sources),
            **chunk_reads_metadata(store, sources),
        }
        if len(keys) == 1 or not context.has_asset_key:
            context.add_input_metadata(metadata)
        else:  # Dagster records input metadata of one partition only (it raises for a window or a range)
            context.log.info(f"Loaded {len(values)} of {len(keys)} partitions of {_producer(context)}: "
                             f"{mib(total_bytes)} MiB in {total_seconds:.3f} s on {store.backend}")
        if list(keys) == [None]:
            return values[None]
        if len(keys) <= 1:  # a mapping to no partition (the first day's previous one) reads as None
            return next(iter(values.values()), None)
        return values


def local_copy_metadata(store: ObjectStore, results: list) -> dict:
    """Where an input was read from, where a producer-local copy was named for this host: the
    local copy or the ring (and why not the copy), and this process's counts so far."""
    if not any(getattr(r, "source", "ring") != "ring" or getattr(r, "fallback", None) for r in results):
        return {}
    counts = store.local_copies.counts
    return {
        "read_from": ", ".join(sorted({r.source for r in results})),
        **({"local_copy_fallback": ", ".join(sorted({r.fallback for r in results if r.fallback}))}
           if any(r.fallback for r in results) else {}),
        "local_copy_reads": MetadataValue.int(counts["read"]),
        "local_copy_fallbacks": MetadataValue.int(sum(v for k, v in counts.items() if k.startswith("fallback_"))),
    }


def chunk_reads_metadata(store: ObjectStore, results: list) -> dict:
    """How an input's chunks were read from the ring, and why, where the store has a choice; with
    this process's count of chunks read again at the store's level (missing at ONE)."""
    reads = [r for r in results if getattr(r, "chunk_reads", None)]
    if not reads:
        return {}
    return {"chunk_reads": ", ".join(sorted({r.chunk_reads for r in reads})),
            "chunk_reads_reason": reads[0].chunk_reads_reason,
            "chunk_read_fallbacks": MetadataValue.int(getattr(store, "chunk_read_fallbacks", 0))}


def _wants_stream(context: InputContext) -> bool:
    from dagster import DagsterInvariantViolationError

    try:
        typing_type = getattr(context.dagster_type, "typing_type", None)
    except DagsterInvariantViolationError:  # a context built by hand without a type
        return False
    return isinstance(typing_type, type) and issubclass(typing_type, Stream)


def _op_name(context: InputContext) -> str:
    from dagster import DagsterInvariantViolationError

    try:
        return context.op_def.name
    except DagsterInvariantViolationError:  # a context built by hand without its op
        return "?"


def _producer(context: InputContext) -> str:
    if context.has_asset_key:
        return f"asset {context.asset_key.to_user_string()}"
    up = context.upstream_output
    return f"step '{up.step_key}' output '{up.name}' of run {up.run_id}"
