"""The ``ALTER TABLE`` / ``ALTER KEYSPACE`` a retune sends: only the options a changed knob writes
and whose value differs from what the table has, each map-valued option merged onto the map read
back from ``system_schema``, so an operator's own settings survive a retune.

Cassandra (5.0, checked on the node) replaces a map option whole: ``caching = {'rows_per_partition':
'10'}`` resets ``keys`` to ``NONE``, and ``compaction`` / ``compression`` without ``class`` are refused.
So a knob that owns one sub-key sends the table's whole map with that sub-key changed:

* ``compaction`` (the class) replaces the map when the class changes, keeping only the operator's
  sub-options every strategy accepts (:data:`COMPACTION_COMMON`); the old class's own options do
  not apply to the new one. ``stcs_min_threshold`` / ``lcs_sstable_size_mib`` /
  ``ucs_scaling_parameters`` change their one sub-key of the class in force, the rest stays.
* ``compression`` likewise (its class; ``none`` is ``{'enabled': 'false'}``), keeping
  ``min_compress_ratio``; ``chunk_length_kib`` changes ``chunk_length_in_kb`` of the class in force.
* ``row_cache_size_mib`` changes ``caching``'s ``rows_per_partition`` (``ALL`` with a row cache,
  else ``NONE``); the operator's ``keys`` stays.
* ``gc_grace_seconds``, ``memtable_flush_period_ms``, ``memtable``, ``durable_writes``: plain options.

Read-back maps are written back as read (fully qualified class names and ``chunk_length_in_kb``
included: the node takes them back verbatim); a class the tuner names is written by its short name.

:func:`table_changes` and :func:`keyspace_changes` are pure; :func:`alter_schema` reads back,
computes and sends, for :func:`~.knob_apply.apply` (the project's own nodes) and
:func:`~.unmanaged.apply_unmanaged` (a cluster the user runs) alike.
"""
from __future__ import annotations

from typing import Any, Callable, Collection, Iterable, Mapping

from .knobs import COMPACTION_CLASS, COMPRESSION_CLASS, Configuration, cql_literal

#: each table option and the knobs that write (part of) it
TABLE_OPTION_KNOBS: dict[str, tuple[str, ...]] = {
    "compaction": ("compaction", "stcs_min_threshold", "lcs_sstable_size_mib", "ucs_scaling_parameters"),
    "compression": ("compression", "chunk_length_kib"),
    "caching": ("row_cache_size_mib",),
    "memtable": ("memtable",),
    "gc_grace_seconds": ("gc_grace_seconds",),
    "memtable_flush_period_in_ms": ("memtable_flush_period_ms",),
}
KEYSPACE_OPTION_KNOBS: dict[str, tuple[str, ...]] = {"durable_writes": ("durable_writes",)}
#: every knob that writes a keyspace or table option
SCHEMA_KNOBS = frozenset(k for knobs in (*TABLE_OPTION_KNOBS.values(), *KEYSPACE_OPTION_KNOBS.values())
                         for k in knobs)
#: the one sub-option of a compaction class a knob owns: {compaction: (knob, sub-option)}
COMPACTION_SUB_OPTION = {"STCS": ("stcs_min_threshold", "min_threshold"),
                         "LCS": ("lcs_sstable_size_mib", "sstable_size_in_mb"),
                         "UCS": ("ucs_scaling_parameters", "scaling_parameters")}
#: compaction sub-options all four strategies accept (UCS refuses max_threshold): an operator's
#: survive a change of class
COMPACTION_COMMON = frozenset({"enabled", "tombstone_threshold", "tombstone_compaction_interval",
                               "unchecked_tombstone_compaction", "only_purge_repaired_tombstones", "log_all",
                               "provide_overlapping_tombstones"})
#: compression sub-options every compressor accepts (``enabled`` is not carried: a table without
#: compression reads back ``enabled: false``, which would keep the new class off)
COMPRESSION_COMMON = frozenset({"min_compress_ratio"})


class SchemaMissingError(LookupError):
    """The keyspace or table to alter does not exist (the store creates it with its first output)."""


def _short(cls: Any) -> str:
    return str(cls or "").rsplit(".", 1)[-1]


def _as_written(options: Mapping[str, Any]) -> dict[str, str]:
    """A map option as compared: every value a string, the class by its short name."""
    return {str(k): _short(v) if k == "class" else str(v) for k, v in options.items()}


def _compaction(read_back: Mapping[str, Any], new: Configuration, knobs: Collection[str] | None) -> dict | None:
    wanted = new.table_options()["compaction"]
    in_force = dict(read_back or {})
    same_class = _short(in_force.get("class")) == wanted["class"]
    if not same_class:
        if knobs is not None and "compaction" not in knobs:
            return None  # the class knob did not change: the class in force stays
        return {**wanted, **{k: str(v) for k, v in in_force.items() if k in COMPACTION_COMMON}}
    owned = COMPACTION_SUB_OPTION.get(new["compaction"])
    if owned is None or (knobs is not None and owned[0] not in knobs):
        return None
    sub = owned[1]
    merged = {**in_force, "class": wanted["class"], sub: wanted[sub]}
    return None if _as_written(merged) == _as_written(in_force) else merged


def _compression(read_back: Mapping[str, Any], new: Configuration, knobs: Collection[str] | None) -> dict | None:
    wanted = new.table_options()["compression"]
    in_force = dict(read_back or {})
    off = in_force.get("enabled") == "false" or not in_force.get("class")
    if COMPRESSION_CLASS[new["compression"]] is None:
        if off or (knobs is not None and "compression" not in knobs):
            return None
        return wanted
    if off or _short(in_force["class"]) != wanted["class"]:
        if knobs is not None and "compression" not in knobs:
            return None
        return {**wanted, **{k: str(v) for k, v in in_force.items() if k in COMPRESSION_COMMON}}
    if knobs is not None and "chunk_length_kib" not in knobs:
        return None
    merged = {**in_force, "class": wanted["class"], "chunk_length_in_kb": wanted["chunk_length_in_kb"]}
    return None if _as_written(merged) == _as_written(in_force) else merged


def _caching(read_back: Mapping[str, Any], new: Configuration, knobs: Collection[str] | None) -> dict | None:
    if knobs is not None and "row_cache_size_mib" not in knobs:
        return None
    in_force = dict(read_back or {})
    # a partial map resets the missing sub-key (keys to NONE): the whole map goes, keys as in force
    merged = {"keys": "ALL", **in_force, "rows_per_partition": new.table_options()["caching"]["rows_per_partition"]}
    return None if _as_written(merged) == _as_written(in_force) else merged


def table_changes(read_back: Mapping[str, Any], new: Configuration,
                  knobs: Collection[str] | None = None) -> dict[str, Any]:
    """``{option: value}`` an ``ALTER TABLE`` sends to bring the table read back (``system_schema.tables``'
    columns ``compaction``, ``compression``, ``caching``, ``memtable``, ``gc_grace_seconds``,
    ``memtable_flush_period_in_ms``) to ``new``, for the changed ``knobs`` only (``None``: every
    knob, the previous configuration unknown). Empty when the table has it all already."""
    out: dict[str, Any] = {}
    for option, merge in (("compaction", _compaction), ("compression", _compression), ("caching", _caching)):
        value = merge(read_back.get(option) or {}, new, knobs)
        if value is not None:
            out[option] = value
    wanted = new.table_options()
    for option in ("memtable", "gc_grace_seconds", "memtable_flush_period_in_ms"):
        [knob_name] = TABLE_OPTION_KNOBS[option]
        if knobs is not None and knob_name not in knobs:
            continue
        in_force = read_back.get(option)
        if option == "memtable":
            in_force = in_force or "default"  # no memtable option: cassandra.yaml's default configuration
        if in_force != wanted[option]:
            out[option] = wanted[option]
    return out


def keyspace_changes(read_back: Mapping[str, Any], new: Configuration,
                     knobs: Collection[str] | None = None) -> dict[str, Any]:
    """``{option: value}`` an ``ALTER KEYSPACE`` sends (``durable_writes``), as :func:`table_changes`."""
    if knobs is not None and "durable_writes" not in knobs:
        return {}
    if read_back.get("durable_writes") is new["durable_writes"]:
        return {}
    return {"durable_writes": new["durable_writes"]}


def _statement(head: str, changes: Mapping[str, Any]) -> str | None:
    if not changes:
        return None
    return head + " WITH " + " AND ".join(f"{name} = {cql_literal(value)}" for name, value in changes.items())


def alter_table_statement(keyspace: str, table: str, read_back: Mapping[str, Any], new: Configuration,
                          knobs: Collection[str] | None = None) -> str | None:
    """The ``ALTER TABLE`` of :func:`table_changes`, or None when nothing changes."""
    return _statement(f"ALTER TABLE {keyspace}.{table}", table_changes(read_back, new, knobs))


def alter_keyspace_statement(keyspace: str, read_back: Mapping[str, Any], new: Configuration,
                             knobs: Collection[str] | None = None) -> str | None:
    """The ``ALTER KEYSPACE`` of :func:`keyspace_changes`, or None when nothing changes."""
    return _statement(f"ALTER KEYSPACE {keyspace}", keyspace_changes(read_back, new, knobs))


#: ``execute(cql, params)``: the rows a statement returns (a driver session's ``execute``)
Execute = Callable[[str, tuple], Iterable[Any]]
TABLE_COLUMNS = tuple(TABLE_OPTION_KNOBS)


def read_table_options(execute: Execute, keyspace: str, table: str) -> dict[str, Any] | None:
    """The table's options as ``system_schema.tables`` has them (maps as dicts), or None."""
    rows = list(execute(f"SELECT {', '.join(TABLE_COLUMNS)} FROM system_schema.tables "
                        "WHERE keyspace_name = %s AND table_name = %s", (keyspace, table)))
    if not rows:
        return None
    row = rows[0]
    return {c: dict(v) if isinstance(v, Mapping) else v for c in TABLE_COLUMNS for v in [getattr(row, c)]}


def read_keyspace_options(execute: Execute, keyspace: str) -> dict[str, Any] | None:
    rows = list(execute("SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = %s", (keyspace,)))
    return {"durable_writes": bool(rows[0].durable_writes)} if rows else None


def schema_statements(execute: Execute, keyspace: str, table: str, new: Configuration,
                      knobs: Collection[str] | None = None) -> list[str]:
    """The ``ALTER KEYSPACE`` and ``ALTER TABLE`` (each only if something changes) that bring the
    schema read back now to ``new`` for the changed ``knobs``; nothing is sent.
    :class:`SchemaMissingError` if the keyspace or table does not exist."""
    statements = []
    if knobs is None or any(k in knobs for ks in KEYSPACE_OPTION_KNOBS.values() for k in ks):
        in_force = read_keyspace_options(execute, keyspace)
        if in_force is None:
            raise SchemaMissingError(f"keyspace {keyspace} does not exist")
        statements.append(alter_keyspace_statement(keyspace, in_force, new, knobs))
    if knobs is None or any(k in knobs for ks in TABLE_OPTION_KNOBS.values() for k in ks):
        in_force = read_table_options(execute, keyspace, table)
        if in_force is None:
            raise SchemaMissingError(f"table {keyspace}.{table} does not exist")
        statements.append(alter_table_statement(keyspace, table, in_force, new, knobs))
    return [s for s in statements if s]


def alter_schema(execute: Execute, keyspace: str, table: str, new: Configuration,
                 knobs: Collection[str] | None = None) -> list[str]:
    """Send :func:`schema_statements`; the statements sent (none when the schema has it all)."""
    statements = schema_statements(execute, keyspace, table, new, knobs)
    for cql in statements:
        execute(cql, ())
    return statements
