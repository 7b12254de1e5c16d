"""The configuration in force, read back from the cluster rather than from a record of what was
applied: keyspace and table options from ``system_schema``, the node's settings (yaml and the
live values nodetool changed) from ``system_views.settings``.

A value that does not map onto a knob (a setting made by hand outside the knob's range, an
unknown compaction class) is reported in ``unreadable`` and the knob is taken at its default,
so a caller can tell a configuration it read from one it assumed.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from .knobs import CLIENT, COMPACTION_CLASS, KNOBS, Configuration, KnobError

_SIZE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB)?(/s)?\s*$")
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m)?\s*$")


def _mib(text: str) -> int:
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    n, unit = int(m.group(1)), m.group(2) or "MiB"
    return {"B": n // (1 << 20), "KiB": n // 1024, "MiB": n, "GiB": n * 1024}[unit]


def _ms(text: str) -> int:
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    return int(m.group(1)) * {"ms": 1, "s": 1000, "m": 60_000}[m.group(2) or "ms"]


def _table_values(table: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    comp = dict(table.compaction)
    cls = comp.get("class", "").rsplit(".", 1)[-1]
    short = {v: k for k, v in COMPACTION_CLASS.items()}
    if cls in short:
        out["compaction"] = short[cls]
        if "min_threshold" in comp:
            out["stcs_min_threshold"] = int(comp["min_threshold"])
        if "sstable_size_in_mb" in comp:
            out["lcs_sstable_size_mib"] = int(comp["sstable_size_in_mb"])
        if "scaling_parameters" in comp:
            out["ucs_scaling_parameters"] = comp["scaling_parameters"]
    else:
        out["compaction"] = cls  # refused by the knob: reported unreadable
    compression = dict(table.compression)
    if compression.get("enabled", "true") == "false" or not compression.get("class"):
        out["compression"] = "none"
    else:
        out["compression"] = {"LZ4Compressor": "LZ4", "ZstdCompressor": "Zstd"}.get(
            compression["class"].rsplit(".", 1)[-1], compression["class"])
        out["chunk_length_kib"] = int(compression.get("chunk_length_in_kb", 16))
    out["memtable"] = table.memtable or "default"
    out["gc_grace_seconds"] = int(table.gc_grace_seconds)
    out["memtable_flush_period_ms"] = int(table.memtable_flush_period_in_ms)
    return out


def _settings_values(settings: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, kb in KNOBS.items():
        key = kb.yaml_key
        if not key or key not in settings or settings[key] is None:
            continue
        text = settings[key]
        if name == "file_cache_size_mib":
            out[name] = _mib(text) if settings.get("file_cache_enabled") == "true" else 0
        elif kb.kind == "choice":
            out[name] = text
        elif kb.unit in ("MiB", "MiB/s"):
            out[name] = _mib(text)
        elif kb.unit == "ms":
            out[name] = _ms(text)
        else:
            out[name] = int(text)
    return out


def read_configuration(session: Any, keyspace: str, table: str = "objects",
                       client: Mapping[str, Any] | None = None, host: Any = None) -> tuple[Configuration, dict[str, str]]:
    """``(configuration in force, {knob: why unreadable})``; client knobs come from ``client``
    (knob values of the store's options) or their defaults. ``host``: the driver ``Host`` to ask
    (the settings are that member's own); None: whichever the driver picks."""
    values: dict[str, Any] = {}
    ks = session.execute("SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = %s",
                         (keyspace,), host=host).one()
    if ks is not None:
        values["durable_writes"] = bool(ks.durable_writes)
    t = session.execute(
        "SELECT compaction, compression, memtable, gc_grace_seconds, memtable_flush_period_in_ms "
        "FROM system_schema.tables WHERE keyspace_name = %s AND table_name = %s", (keyspace, table), host=host).one()
    if t is not None:
        values.update(_table_values(t))
    settings = {r.name: r.value for r in session.execute("SELECT name, value FROM system_views.settings", host=host)}
    unreadable: dict[str, str] = {}
    try:
        values.update(_settings_values(settings))
    except ValueError as exc:
        unreadable["settings"] = str(exc)
    for name, value in (client or {}).items():
        if KNOBS[name].apply == CLIENT:
            values[name] = value
    kept: dict[str, Any] = {}
    for name, value in values.items():
        try:
            kept[name] = KNOBS[name].validate(value)
        except KnobError as exc:
            unreadable[name] = str(exc)
    if kept.get("commitlog_sync", "periodic") != "periodic":
        kept.pop("commitlog_sync_period_ms", None)  # not read in group or batch mode
    try:
        return Configuration(kept), unreadable
    except KnobError as exc:  # a combination the knob space refuses: say so, assume nothing
        unreadable["combination"] = str(exc)
        return Configuration(), unreadable


def read_member_configurations(session: Any, keyspace: str, addresses: list[str], table: str = "objects",
                               timeout: float = 60.0) -> dict[str, tuple[Configuration, dict[str, str]]]:
    """:func:`read_configuration` of each ring member at ``addresses``, each asked of that member
    itself (``system_views.settings`` is per node). A member the driver has not seen up again
    since a restart is waited for, up to ``timeout`` seconds."""
    import time

    from cassandra import OperationTimedOut
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionException

    deadline = time.monotonic() + timeout
    out = {}
    for address in addresses:
        while True:
            host = next((h for h in session.cluster.metadata.all_hosts() if h.address == address), None)
            if host is not None and host.is_up:
                try:
                    out[address] = read_configuration(session, keyspace, table, host=host)
                    break
                except (NoHostAvailable, ConnectionException, OperationTimedOut):
                    pass  # marked down between the check and the request: a member just back; again
            if time.monotonic() > deadline:
                raise TimeoutError(f"ring member {address} did not answer through the driver within {timeout:.0f}s; "
                                   "check that it is running (`asgard cassandra status`)")
            time.sleep(0.2)
    return out
