"""The Cassandra 5.0.x knob space the tuner searches, and how each knob is applied.

Three ways a knob reaches a running node:

* ``live``     -- ``nodetool`` over JMX (``setconcurrency``, ``setconcurrentcompactors``,
  ``setcompactionthroughput``, ``setcachecapacity``). The value is *also* written to the node's
  yaml overrides so that a later restart keeps it.
* ``table``    -- ``ALTER TABLE <ks>.objects WITH ...`` (compaction strategy and its options,
  compression and chunk length, memtable implementation); schema changes are persistent and
  need no restart. ``memtable`` names one of the configurations that
  ``asgard.resources.cassandra.config.base_config`` defines in ``cassandra.yaml``
  (``skiplist``, ``trie``, ``default`` = skiplist).
* ``keyspace`` -- ``ALTER KEYSPACE <ks> WITH durable_writes = ...``: live, persistent.
* ``restart``  -- ``cassandra.yaml`` only (``file_cache_size``, memtable space, flush writers,
  allocation type, commit log sync, ...): :func:`apply` restarts the node only when one of
  these changed.
* ``client``   -- the store's own client options (chunk size, requests in flight, codec): set on
  the store object the measurement drives, and written by ``recommend`` as the
  ``CassandraIOManager`` fields. The paper and Rafiki tune only the server; the client side is
  half of the data path here, so it is tuned beside it.

The defaults are stock Cassandra 5.0's (``durable_writes = true``, LZ4 16 KiB chunks, STCS,
``gc_grace_seconds`` 10 days, periodic commit log sync every 10 s) and the store's shipped
client options: "tuned over default" is measured against what a cluster has before anyone
tunes it for ephemeral data.

Rafiki's five key parameters (Mahgoub et al., Middleware'17, §3.4) map to Cassandra 5.0 like this:

=====================================  ===================================================
Rafiki (Cassandra 3.x)                 here (Cassandra 5.0)
=====================================  ===================================================
compaction method (CM)                 ``compaction`` (STCS / LCS / TWCS / UCS) + options
concurrent writes (CW)                 ``concurrent_writes`` (live: MutationStage)
file_cache_size_in_mb (FCZ)            ``file_cache_size_mib`` (0 = chunk cache off, which
                                       is 5.0's default; >0 also sets file_cache_enabled)
memtable_cleanup_threshold (MT)        deprecated in 5.0; its inputs are the knobs:
                                       ``memtable_heap_space_mib``,
                                       ``memtable_offheap_space_mib``,
                                       ``memtable_flush_writers`` (threshold = 1/(1+writers))
concurrent compactors (CC)             ``concurrent_compactors`` (live)
=====================================  ===================================================

This module imports no Dagster and no Cassandra driver at import time.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence


# --- errors -----------------------------------------------------------------------------
class KnobError(ValueError):
    """Base class of every knob/configuration validation error."""


class UnknownKnobError(KnobError):
    def __init__(self, name: str, known: Iterable[str]):
        self.name = name
        super().__init__(f"unknown knob {name!r}; known knobs: {', '.join(sorted(known))}")


class KnobTypeError(KnobError):
    def __init__(self, name: str, value: Any, expected: str):
        self.name, self.value = name, value
        super().__init__(f"knob {name!r} expects {expected}, got {value!r} ({type(value).__name__})")


class KnobRangeError(KnobError):
    def __init__(self, name: str, value: Any, low: Any, high: Any):
        self.name, self.value, self.low, self.high = name, value, low, high
        super().__init__(f"knob {name!r} = {value!r} is outside [{low}, {high}]")


class KnobChoiceError(KnobError):
    def __init__(self, name: str, value: Any, choices: Sequence[Any]):
        self.name, self.value, self.choices = name, value, list(choices)
        super().__init__(f"knob {name!r} = {value!r} is not one of {list(choices)}")


class KnobConstraintError(KnobError):
    """A combination of otherwise valid values that Cassandra would reject or that cannot fit."""


# --- knob definitions ---------------------------------------------------------------------
LIVE, TABLE, KEYSPACE, RESTART, CLIENT = "live", "table", "keyspace", "restart", "client"
#: kinds applied without restarting the node
NO_RESTART = (LIVE, TABLE, KEYSPACE, CLIENT)


@dataclass(frozen=True)
class Knob:
    name: str
    kind: str  # "int" | "choice"
    default: Any
    apply: str  # LIVE | TABLE | RESTART
    low: int | None = None
    high: int | None = None
    choices: tuple = ()
    log: bool = False  # sample on a log scale
    yaml_key: str | None = None  # cassandra.yaml key the value persists under
    unit: str = ""
    help: str = ""
    rafiki: str = ""  # which of Rafiki's five this covers
    #: only meaningful when another knob has one of these values: (knob, values)
    active_when: tuple | None = None
    grid: tuple = ()  # discretisation for the exhaustive search
    discrete: bool = False  # only the grid values are valid samples

    def validate(self, value: Any) -> Any:
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise KnobTypeError(self.name, value, "an integer")
            if isinstance(value, float):
                if not value.is_integer():
                    raise KnobTypeError(self.name, value, "an integer")
                value = int(value)
            if not self.low <= value <= self.high:
                raise KnobRangeError(self.name, value, self.low, self.high)
            return int(value)
        if value not in self.choices:
            raise KnobChoiceError(self.name, value, self.choices)
        return value

    def values_for_grid(self) -> list:
        if self.grid:
            return list(self.grid)
        if self.kind == "choice":
            return list(self.choices)
        return sorted({self.low, self.default, self.high})

    def sample(self, rng: random.Random) -> Any:
        if self.kind == "choice":
            return rng.choice(self.choices)
        if self.grid and (self.discrete or rng.random() < 0.5):
            return rng.choice(self.grid)
        if self.log and self.low > 0:
            return int(round(math.exp(rng.uniform(math.log(self.low), math.log(self.high)))))
        return rng.randint(self.low, self.high)

    def encode(self, value: Any) -> list[float]:
        """Numeric features: one-hot for choices, log-scaled number for ints."""
        if self.kind == "choice":
            return [1.0 if value == c else 0.0 for c in self.choices]
        return [math.log1p(value) if self.log or self.low == 0 else float(value)]

    def feature_names(self) -> list[str]:
        if self.kind == "choice":
            return [f"{self.name}={c}" for c in self.choices]
        return [self.name]


def _k(**kw) -> Knob:
    return Knob(**kw)


COMPACTIONS = ("STCS", "LCS", "TWCS", "UCS")
COMPACTION_CLASS = {
    "STCS": "SizeTieredCompactionStrategy",
    "LCS": "LeveledCompactionStrategy",
    "TWCS": "TimeWindowCompactionStrategy",
    "UCS": "UnifiedCompactionStrategy",
}
COMPRESSION_CLASS = {"LZ4": "LZ4Compressor", "Zstd": "ZstdCompressor", "none": None}

KNOBS: dict[str, Knob] = {k.name: k for k in [
    # ---- table options (live, ALTER TABLE) ----
    _k(name="compaction", kind="choice", default="STCS", apply=TABLE, choices=COMPACTIONS,
       rafiki="compaction method (CM)",
       help="compaction strategy of the objects table (ALTER TABLE ... WITH compaction)"),
    _k(name="ucs_scaling_parameters", kind="choice", default="T4", apply=TABLE,
       choices=("L10", "L4", "T4", "T8", "N"), active_when=("compaction", ("UCS",)),
       help="UCS scaling_parameters: L* leveled-like (read-optimised), T* tiered (write-optimised)"),
    _k(name="lcs_sstable_size_mib", kind="int", default=160, apply=TABLE, low=32, high=320,
       grid=(32, 160, 320), active_when=("compaction", ("LCS",)), unit="MiB",
       help="LCS sstable_size_in_mb"),
    _k(name="stcs_min_threshold", kind="int", default=4, apply=TABLE, low=2, high=32,
       grid=(2, 4, 16, 32), active_when=("compaction", ("STCS",)),
       help="STCS min_threshold: sstables of similar size that trigger a compaction"),
    _k(name="compression", kind="choice", default="LZ4", apply=TABLE, choices=("LZ4", "Zstd", "none"),
       help="table compression class"),
    _k(name="chunk_length_kib", kind="int", default=16, apply=TABLE, low=4, high=256, log=True,
       grid=(4, 16, 64, 256), discrete=True, unit="KiB", active_when=("compression", ("LZ4", "Zstd")),
       help="compression chunk_length_in_kb (power of two)"),
    _k(name="gc_grace_seconds", kind="int", default=864000, apply=TABLE, low=0, high=864000,
       grid=(0, 3600, 864000), discrete=True, unit="s",
       help="table gc_grace_seconds: how long tombstones of purged outputs stay (0 lets the next "
            "compaction drop them; safe for data nobody repairs)"),
    _k(name="memtable_flush_period_ms", kind="int", default=0, apply=TABLE, low=0, high=60000,
       grid=(0, 10000, 60000), discrete=True, unit="ms",
       help="table memtable_flush_period_in_ms (0 = flush only when the memtable space fills)"),
    _k(name="memtable", kind="choice", default="default", apply=TABLE, choices=("default", "skiplist", "trie"),
       help="memtable implementation (ALTER TABLE ... WITH memtable = '<name>'): a configuration named "
            "in cassandra.yaml's memtable.configurations; default and skiplist = SkipListMemtable, "
            "trie = TrieMemtable"),
    # ---- keyspace (live, ALTER KEYSPACE) ----
    _k(name="durable_writes", kind="choice", default=True, apply=KEYSPACE, choices=(True, False),
       help="keyspace durable_writes: false writes no commit log for data a step can recompute"),
    # ---- live via nodetool (also persisted to yaml) ----
    _k(name="concurrent_writes", kind="int", default=32, apply=LIVE, low=4, high=128, log=True,
       grid=(8, 16, 32, 64, 128), yaml_key="concurrent_writes", rafiki="concurrent writes (CW)",
       help="MutationStage threads (nodetool setconcurrency MutationStage N)"),
    _k(name="concurrent_reads", kind="int", default=32, apply=LIVE, low=4, high=128, log=True,
       grid=(8, 16, 32, 64, 128), yaml_key="concurrent_reads",
       help="ReadStage threads (nodetool setconcurrency ReadStage N)"),
    _k(name="concurrent_compactors", kind="int", default=2, apply=LIVE, low=1, high=4,
       yaml_key="concurrent_compactors", rafiki="concurrent compactors (CC)", grid=(1, 2, 3, 4),
       help="nodetool setconcurrentcompactors N"),
    _k(name="compaction_throughput_mib", kind="int", default=64, apply=LIVE, low=0, high=256,
       grid=(0, 16, 64, 256), yaml_key="compaction_throughput", unit="MiB/s",
       help="nodetool setcompactionthroughput N (0 = unthrottled)"),
    _k(name="key_cache_size_mib", kind="int", default=100, apply=LIVE, low=0, high=512,
       grid=(0, 100, 512), yaml_key="key_cache_size", unit="MiB",
       help="nodetool setcachecapacity <key> <row> <counter>"),
    _k(name="row_cache_size_mib", kind="int", default=0, apply=RESTART, low=0, high=512,
       grid=(0, 256), discrete=True, yaml_key="row_cache_size", unit="MiB",
       help="row cache (off-heap); >0 also sets the table's caching to whole partitions (a "
            "broadcast output read k times is served from memory). A restart knob: a node started "
            "with it at 0 has no row cache to resize (nodetool refuses)"),
    # ---- restart-only (cassandra.yaml) ----
    _k(name="file_cache_size_mib", kind="int", default=0, apply=RESTART, low=0, high=1024,
       grid=(0, 128, 512, 1024), yaml_key="file_cache_size", unit="MiB",
       rafiki="file_cache_size_in_mb (FCZ)",
       help="chunk cache size; 0 keeps file_cache_enabled: false (the 5.0 default), >0 enables it"),
    _k(name="memtable_heap_space_mib", kind="int", default=512, apply=RESTART, low=64, high=1024,
       log=True, grid=(64, 256, 512, 1024), yaml_key="memtable_heap_space", unit="MiB",
       rafiki="memtable cleanup threshold (MT) successor",
       help="on-heap memtable space (default heap/4)"),
    _k(name="memtable_offheap_space_mib", kind="int", default=512, apply=RESTART, low=64, high=2048,
       log=True, grid=(64, 512, 2048), yaml_key="memtable_offheap_space", unit="MiB",
       rafiki="memtable cleanup threshold (MT) successor",
       help="off-heap memtable space (used by offheap_* allocation types)"),
    _k(name="memtable_flush_writers", kind="int", default=2, apply=RESTART, low=1, high=4,
       grid=(1, 2, 4), yaml_key="memtable_flush_writers",
       rafiki="memtable cleanup threshold (MT) successor: threshold = 1/(1+flush_writers)",
       help="memtable flush threads"),
    _k(name="memtable_allocation_type", kind="choice", default="heap_buffers", apply=RESTART,
       choices=("heap_buffers", "offheap_buffers", "offheap_objects"),
       yaml_key="memtable_allocation_type", help="where memtable cells live"),
    _k(name="commitlog_segment_size_mib", kind="int", default=32, apply=RESTART, low=16, high=64,
       grid=(16, 32, 64), yaml_key="commitlog_segment_size", unit="MiB",
       help="commit log segment size (max mutation = half of it: keep >= 2x the store's chunk)"),
    _k(name="commitlog_sync", kind="choice", default="periodic", apply=RESTART,
       choices=("periodic", "group", "batch"), yaml_key="commitlog_sync",
       help="commit log sync mode: periodic acknowledges before fsync, group/batch after"),
    _k(name="commitlog_sync_period_ms", kind="int", default=10000, apply=RESTART, low=1000, high=60000,
       grid=(1000, 10000, 60000), discrete=True, yaml_key="commitlog_sync_period", unit="ms",
       active_when=("commitlog_sync", ("periodic",)), help="periodic sync interval"),
    # ---- the store's client options (no restart) ----
    _k(name="client_chunk_kib", kind="int", default=1024, apply=CLIENT, low=256, high=4096, log=True,
       grid=(256, 512, 1024, 2048, 4096), discrete=True, unit="KiB",
       help="the store's chunk size (CassandraIOManager chunk_size): one chunk = one partition"),
    _k(name="client_in_flight", kind="int", default=8, apply=CLIENT, low=1, high=32, log=True,
       grid=(2, 4, 8, 16, 32), discrete=True,
       help="chunk requests in flight per output (CassandraIOManager concurrency)"),
    _k(name="client_codec", kind="choice", default="none", apply=CLIENT, choices=("none", "lz4", "zstd"),
       help="the store's codec (CassandraIOManager codec): compress on the client, not the server"),
]}

def knob(name: str) -> Knob:
    try:
        return KNOBS[name]
    except KeyError:
        raise UnknownKnobError(name, KNOBS) from None


def cql_literal(value: Any) -> str:
    """A table option's value as CQL: a map ``{'k': 'v'}``, a quoted string, a number or boolean."""
    if isinstance(value, dict):  # a map option's values are strings, as system_schema reads them back
        return "{" + ", ".join(f"{_quoted(k)}: {_quoted(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return _quoted(value)


def _quoted(value: Any) -> str:
    return "'" + str(value).replace("'", "''") + "'"


# --- configuration value type ----------------------------------------------------------------
@dataclass(frozen=True, init=False, repr=False)
class Configuration:
    """A full, validated assignment of every knob (unlisted knobs take their default).

    Immutable and hashable; ``Configuration(concurrent_writes=64)`` or
    ``Configuration.from_dict({...})``.
    """

    values: tuple = field(default=())

    def __init__(self, values: Mapping[str, Any] | None = None, /, **kw: Any):
        merged = {**(dict(values) if values else {}), **kw}
        validated = validate(merged)
        object.__setattr__(self, "values", tuple(sorted(validated.items())))

    # mapping-ish
    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def __getitem__(self, name: str) -> Any:
        return self.as_dict()[knob(name).name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.as_dict().get(name, default)

    @classmethod
    def default(cls) -> "Configuration":
        return cls()

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "Configuration":
        return cls(values)

    def replace(self, **changes: Any) -> "Configuration":
        return Configuration({**self.as_dict(), **changes})

    def diff(self, other: "Configuration | None") -> dict[str, tuple[Any, Any]]:
        """Knobs whose value differs: ``{name: (other's, self's)}``."""
        mine, theirs = self.as_dict(), (other or Configuration()).as_dict()
        return {k: (theirs[k], v) for k, v in mine.items() if theirs[k] != v}

    def non_default(self) -> dict[str, Any]:
        return {k: v for k, v in self.values if KNOBS[k].default != v}

    def restart_part(self) -> tuple:
        return tuple((k, v) for k, v in self.values if KNOBS[k].apply == RESTART)

    # --- renderings ----------------------------------------------------------------------
    def yaml_overrides(self) -> dict[str, Any]:
        """cassandra.yaml overrides (``None`` removes a key: back to Cassandra's default)."""
        d = self.as_dict()
        out: dict[str, Any] = {}
        for name, kb in KNOBS.items():
            if not kb.yaml_key:
                continue
            v = d[name]
            if name == "file_cache_size_mib":
                out["file_cache_enabled"] = True if v > 0 else None
                out["file_cache_size"] = f"{v}MiB" if v > 0 else None
                continue
            # removing a key means Cassandra's default, except where the base config sets one
            if v == kb.default and name not in ("concurrent_compactors", "commitlog_sync",
                                                "commitlog_sync_period_ms"):
                out[kb.yaml_key] = None
                continue
            if kb.unit == "MiB":
                out[kb.yaml_key] = f"{v}MiB"
            elif kb.unit == "ms":
                out[kb.yaml_key] = f"{v}ms"
            elif kb.unit == "MiB/s":
                out[kb.yaml_key] = f"{v}MiB/s"
            else:
                out[kb.yaml_key] = v
        # group mode needs its window (Cassandra refuses to start without one); batch takes none
        out["commitlog_sync_group_window"] = "15ms" if d["commitlog_sync"] == "group" else None
        if d["commitlog_sync"] != "periodic":
            out["commitlog_sync_period"] = None
        return out

    def table_options(self) -> dict[str, dict[str, str] | str]:
        """``{"compaction": {...}, "compression": {...}, "memtable": "<name>"}``: the map-valued
        options as CQL map literals' contents, ``memtable`` as a plain string option."""
        d = self.as_dict()
        cm = d["compaction"]
        comp: dict[str, str] = {"class": COMPACTION_CLASS[cm]}
        if cm == "UCS":
            comp["scaling_parameters"] = d["ucs_scaling_parameters"]
        elif cm == "LCS":
            comp["sstable_size_in_mb"] = str(d["lcs_sstable_size_mib"])
        elif cm == "STCS":
            comp["min_threshold"] = str(d["stcs_min_threshold"])
        elif cm == "TWCS":
            comp["compaction_window_unit"] = "MINUTES"
            comp["compaction_window_size"] = "10"
        cls = COMPRESSION_CLASS[d["compression"]]
        compression = {"enabled": "false"} if cls is None else {
            "class": cls, "chunk_length_in_kb": str(d["chunk_length_kib"])}
        caching = {"keys": "ALL", "rows_per_partition": "ALL" if d["row_cache_size_mib"] > 0 else "NONE"}
        return {"compaction": comp, "compression": compression, "memtable": d["memtable"],
                "gc_grace_seconds": d["gc_grace_seconds"],
                "memtable_flush_period_in_ms": d["memtable_flush_period_ms"], "caching": caching}

    def alter_keyspace_cql(self, keyspace: str) -> str:
        return f"ALTER KEYSPACE {keyspace} WITH durable_writes = {cql_literal(self['durable_writes'])}"

    def client_options(self) -> dict[str, Any]:
        """The store's options (``CassandraIOManager`` / ``CassandraObjectStore`` field names)."""
        d = self.as_dict()
        return {"chunk_size": d["client_chunk_kib"] * 1024, "concurrency": d["client_in_flight"],
                "codec": d["client_codec"]}

    def alter_table_cql(self, keyspace: str, table: str = "objects") -> str:
        return f"ALTER TABLE {keyspace}.{table} WITH " + " AND ".join(
            f"{name} = {cql_literal(value)}" for name, value in self.table_options().items())

    def live_commands(self) -> dict[str, list[str]]:
        """nodetool argument lists that set each live knob."""
        d = self.as_dict()
        return {
            "concurrent_writes": ["setconcurrency", "MutationStage", str(d["concurrent_writes"])],
            "concurrent_reads": ["setconcurrency", "ReadStage", str(d["concurrent_reads"])],
            "concurrent_compactors": ["setconcurrentcompactors", str(d["concurrent_compactors"])],
            "compaction_throughput_mib": ["setcompactionthroughput", str(d["compaction_throughput_mib"])],
            # key, row (as started: the row cache is a restart knob), counter (5.0's default for 2G)
            "key_cache_size_mib": ["setcachecapacity", str(d["key_cache_size_mib"]),
                                   str(d["row_cache_size_mib"]), "50"],
        }


    def to_file_dict(self) -> dict[str, Any]:
        """What ``recommend`` writes: the knobs plus their three renderings."""
        return {
            "knobs": self.as_dict(),
            "yaml_overrides": self.yaml_overrides(),
            "table_options": self.table_options(),
            "live": {k: " ".join(v) for k, v in self.live_commands().items()},
            "keyspace": {"durable_writes": self["durable_writes"]},
            "client": self.client_options(),
            # the same, as CassandraIOManager fields: its own, and the keyspace's durable_writes in
            # its nested CassandraResource (for a keyspace the IO manager creates)
            "io_manager": {"chunk_size_bytes": self.client_options()["chunk_size"],
                           "concurrency": self["client_in_flight"], "codec": self["client_codec"],
                           "cassandra": {"durable_writes": self["durable_writes"]}},
        }

    def features(self, names: Sequence[str] | None = None) -> list[float]:
        d = self.as_dict()
        out: list[float] = []
        for name in names or KNOBS:
            out.extend(KNOBS[name].encode(d[name]))
        return out

    def __repr__(self) -> str:
        nd = self.non_default()
        return "Configuration(" + ", ".join(f"{k}={v!r}" for k, v in nd.items()) + ")"

    def short(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.non_default().items()) or "default"


def validate(values: Mapping[str, Any], heap_mib: int | None = 2048) -> dict[str, Any]:
    """Every knob's value (defaults filled in), or a :class:`KnobError` subclass."""
    out = {name: kb.default for name, kb in KNOBS.items()}
    for name, value in values.items():
        out[name] = knob(name).validate(value)
    if out["chunk_length_kib"] & (out["chunk_length_kib"] - 1):
        raise KnobConstraintError(f"chunk_length_kib must be a power of two, got {out['chunk_length_kib']}")
    # a head row holds up to two chunks inline; Cassandra refuses a mutation over half a segment
    if 2 * out["client_chunk_kib"] + 64 > out["commitlog_segment_size_mib"] * 512:
        raise KnobConstraintError(
            f"client_chunk_kib {out['client_chunk_kib']} needs commitlog_segment_size_mib >= "
            f"{(2 * out['client_chunk_kib'] + 64) // 512 + 1}: a head row of two inline chunks must fit in "
            "half a commit log segment")
    if heap_mib:
        on_heap = out["memtable_heap_space_mib"] + out["key_cache_size_mib"]
        if on_heap > heap_mib * 3 // 4:
            raise KnobConstraintError(
                f"memtable_heap_space_mib + key_cache_size_mib = {on_heap} MiB leaves too little of the "
                f"{heap_mib} MiB heap (limit {heap_mib * 3 // 4} MiB)")
    return out


# --- the configuration space ------------------------------------------------------------
def grid(names: Sequence[str]) -> Iterator[Configuration]:
    """Every combination of the ``names`` knobs' grid values (others default); invalid ones skipped."""
    import itertools

    axes = [KNOBS[n].values_for_grid() for n in names]
    for combo in itertools.product(*axes):
        try:
            yield Configuration(dict(zip(names, combo)))
        except KnobConstraintError:
            continue


def random_configuration(names: Sequence[str], rng: random.Random) -> Configuration:
    for _ in range(100):
        try:
            return Configuration({n: KNOBS[n].sample(rng) for n in names})
        except KnobConstraintError:
            continue
    raise KnobConstraintError("could not sample a valid configuration in 100 tries")
