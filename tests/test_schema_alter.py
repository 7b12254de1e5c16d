"""A retune's ALTER names only the options it changes, and an operator's other settings survive
(issue 38): the statement computed from the options read back and the knobs that changed (plain
cases and hypothesis), then the retune's own apply path on the real node."""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgard.tuner.knobs import KNOBS, Configuration, cql_literal
from asgard.tuner.readback import _table_values
from asgard.tuner.schema_alter import (
    COMPACTION_COMMON, TABLE_OPTION_KNOBS, alter_keyspace_statement, alter_table_statement, table_changes,
)

STCS = "org.apache.cassandra.db.compaction.SizeTieredCompactionStrategy"
LZ4 = "org.apache.cassandra.io.compress.LZ4Compressor"


def stock_table(**options) -> dict:
    """A table as ``system_schema.tables`` reads back a fresh one on Cassandra 5.0."""
    return {"compaction": {"class": STCS, "max_threshold": "32", "min_threshold": "4"},
            "compression": {"chunk_length_in_kb": "16", "class": LZ4},
            "caching": {"keys": "ALL", "rows_per_partition": "NONE"}, "memtable": None,
            "gc_grace_seconds": 864000, "memtable_flush_period_in_ms": 0, **options}


def test_the_reported_case_one_knob_one_option_the_operators_caching_untouched():
    table = stock_table(caching={"keys": "ALL", "rows_per_partition": "10"})
    new = Configuration(gc_grace_seconds=3600)
    assert alter_table_statement("ks", "objects", table, new, {"gc_grace_seconds"}) == (
        "ALTER TABLE ks.objects WITH gc_grace_seconds = 3600")
    # the previous configuration unknown (every knob): still only what differs from the table
    assert table_changes(table, new) == {"gc_grace_seconds": 3600,
                                         "caching": {"keys": "ALL", "rows_per_partition": "NONE"}}


def test_nothing_changes_no_statement():
    table = stock_table()
    assert alter_table_statement("ks", "objects", table, Configuration()) is None
    assert alter_table_statement("ks", "objects", table, Configuration(gc_grace_seconds=3600), set()) is None
    # a knob that changed in the record but is in force already
    assert alter_table_statement("ks", "objects", table, Configuration(), {"compaction", "gc_grace_seconds"}) is None
    assert alter_keyspace_statement("ks", {"durable_writes": True}, Configuration(), {"durable_writes"}) is None
    assert alter_keyspace_statement("ks", {"durable_writes": True}, Configuration(durable_writes=False),
                                    {"durable_writes"}) == "ALTER KEYSPACE ks WITH durable_writes = false"


def test_a_sub_option_knob_changes_its_sub_key_and_keeps_the_others():
    table = stock_table(compaction={"class": STCS, "max_threshold": "20", "min_threshold": "4",
                                    "tombstone_threshold": "0.3"},
                        compression={"chunk_length_in_kb": "16", "class": LZ4, "min_compress_ratio": "1.1"})
    changes = table_changes(table, Configuration(stcs_min_threshold=8, chunk_length_kib=64),
                            {"stcs_min_threshold", "chunk_length_kib"})
    assert changes == {
        "compaction": {"class": "SizeTieredCompactionStrategy", "max_threshold": "20", "min_threshold": "8",
                       "tombstone_threshold": "0.3"},
        "compression": {"chunk_length_in_kb": "64", "class": "LZ4Compressor", "min_compress_ratio": "1.1"}}


def test_a_class_change_replaces_the_map_keeping_what_every_class_accepts():
    table = stock_table(compaction={"class": STCS, "max_threshold": "20", "min_threshold": "4",
                                    "tombstone_threshold": "0.3", "enabled": "false"},
                        compression={"chunk_length_in_kb": "16", "class": LZ4, "min_compress_ratio": "1.1"})
    new = Configuration(compaction="UCS", ucs_scaling_parameters="L4", compression="Zstd")
    changes = table_changes(table, new, {"compaction", "ucs_scaling_parameters", "compression"})
    # UCS refuses max_threshold: the old class's own options go
    assert changes["compaction"] == {"class": "UnifiedCompactionStrategy", "scaling_parameters": "L4",
                                     "tombstone_threshold": "0.3", "enabled": "false"}
    assert changes["compression"] == {"class": "ZstdCompressor", "chunk_length_in_kb": "16",
                                      "min_compress_ratio": "1.1"}
    off = table_changes(table, Configuration(compression="none"), {"compression"})
    assert off == {"compression": {"enabled": "false"}}
    assert table_changes(stock_table(compression={"enabled": "false"}), Configuration(compression="none")) == {}


def test_the_row_cache_knob_sets_rows_per_partition_and_keeps_keys():
    table = stock_table(caching={"keys": "NONE", "rows_per_partition": "10"})
    assert table_changes(table, Configuration(row_cache_size_mib=256), {"row_cache_size_mib"}) == {
        "caching": {"keys": "NONE", "rows_per_partition": "ALL"}}
    assert table_changes(table, Configuration(row_cache_size_mib=256), {"gc_grace_seconds"}) == {}


def test_a_sub_option_knob_of_another_class_sends_nothing():
    table = stock_table(compaction={"class": "org.apache.cassandra.db.compaction.LeveledCompactionStrategy",
                                    "sstable_size_in_mb": "160"})
    new = Configuration(compaction="LCS", stcs_min_threshold=8)
    assert table_changes(table, new, {"stcs_min_threshold"}) == {}
    # a stale record (STCS) against the table's LCS: the class knob did not change, the class stays
    assert table_changes(table, Configuration(stcs_min_threshold=8), {"stcs_min_threshold"}) == {}


def test_map_values_are_quoted_as_cql():
    assert cql_literal({"class": "X", "note": "it's"}) == "{'class': 'X', 'note': 'it''s'}"


# --- properties: over read-back tables and configurations ------------------------------------
OWNED_KNOBS = [k for knobs in TABLE_OPTION_KNOBS.values() for k in knobs]
configurations = st.fixed_dictionaries(
    {name: st.sampled_from(KNOBS[name].values_for_grid()) for name in OWNED_KNOBS}).map(Configuration)


@st.composite
def operator_tables(draw):
    """The table as a configuration renders it, with an operator's own settings beside, read
    back as Cassandra does (fully qualified class names)."""
    config = draw(configurations)
    options = config.table_options()
    compaction = {**options["compaction"], "class": "org.apache.cassandra.db.compaction." + options["compaction"]["class"]}
    if draw(st.booleans()):
        compaction["tombstone_threshold"] = "0.3"
    if config["compaction"] != "UCS" and draw(st.booleans()):
        compaction["max_threshold"] = "20"
    compression = dict(options["compression"])
    if "class" in compression:
        compression["class"] = "org.apache.cassandra.io.compress." + compression["class"]
        if draw(st.booleans()):
            compression["min_compress_ratio"] = "1.1"
    caching = {"keys": draw(st.sampled_from(["ALL", "NONE"])),
               "rows_per_partition": draw(st.sampled_from(["ALL", "NONE", "10"]))}
    memtable = draw(st.sampled_from([options["memtable"], None])) if options["memtable"] == "default" else options["memtable"]
    table = {"compaction": compaction, "compression": compression, "caching": caching, "memtable": memtable,
             "gc_grace_seconds": options["gc_grace_seconds"],
             "memtable_flush_period_in_ms": options["memtable_flush_period_in_ms"], "comment": "the operator's"}
    return config, table


def active(name: str, config: Configuration) -> bool:
    when = KNOBS[name].active_when
    return when is None or config[when[0]] in when[1]


@settings(max_examples=300, deadline=None)
@given(operator_tables(), configurations, st.booleans())
def test_the_statement_changes_only_what_changed_and_converges(in_force, new, previous_known):
    current, table = in_force
    knobs = set(new.diff(current)) if previous_known else None
    changes = table_changes(table, new, knobs)
    for option in changes:  # an option is written only for a knob that changed
        assert knobs is None or set(TABLE_OPTION_KNOBS[option]) & knobs, option
    after = {**table, **changes}  # Cassandra replaces an option, a map option whole
    read = _table_values(SimpleNamespace(**after))
    for name in (OWNED_KNOBS if knobs is None else knobs):
        if name in read and active(name, new):
            assert read[name] == new[name], name
    assert table_changes(after, new, knobs) == {}  # applied again: nothing to send
    # the operator's own settings
    assert after["comment"] == "the operator's" and after["caching"]["keys"] == table["caching"]["keys"]
    if "caching" not in changes:
        assert after["caching"] == table["caching"]
    for sub in COMPACTION_COMMON & set(table["compaction"]):
        assert after["compaction"][sub] == table["compaction"][sub]
    if "compaction" in changes and table["compaction"]["class"].endswith(changes["compaction"]["class"]):
        owned = {"class", "min_threshold", "sstable_size_in_mb", "scaling_parameters"}  # the knobs' sub-keys
        assert {k: v for k, v in after["compaction"].items() if k not in owned} == {
            k: v for k, v in table["compaction"].items() if k not in owned}
    if "min_compress_ratio" in table["compression"] and new["compression"] != "none":
        assert after["compression"]["min_compress_ratio"] == "1.1"


# --- the real apply path on the node ------------------------------------------------------------
def test_the_retunes_apply_keeps_the_operators_settings_and_sends_nothing_twice(cassandra_store):
    """A table an operator set up by hand; the retune on a cluster the project does not run
    (:func:`apply_unmanaged`, as the retune job calls it) changes one table knob."""
    from asgard.tuner.readback import read_configuration
    from asgard.tuner.unmanaged import apply_unmanaged

    session = cassandra_store.session
    keyspace = f"asgard_alter_{uuid.uuid4().hex[:8]}"
    sent: list[str] = []

    def record(response_future):  # every request the session sends, as sent
        query = getattr(response_future.query, "query_string", "")
        if query.startswith("ALTER") and keyspace in query:
            sent.append(query)

    session.execute(f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', "
                    "'replication_factor': 1}", timeout=60)
    try:
        session.execute(f"CREATE TABLE {keyspace}.objects (k text PRIMARY KEY, v blob) WITH "
                        "caching = {'keys': 'ALL', 'rows_per_partition': '10'} AND comment = 'kept by ops' "
                        "AND gc_grace_seconds = 7200 AND compaction = {'class': 'SizeTieredCompactionStrategy', "
                        "'max_threshold': '20', 'tombstone_threshold': '0.3'} AND compression = "
                        "{'class': 'LZ4Compressor', 'chunk_length_in_kb': '16', 'min_compress_ratio': '1.1'}",
                        timeout=60)
        current, unreadable = read_configuration(session, keyspace)
        assert not {k for k in unreadable if k != "settings"}, unreadable
        assert current["gc_grace_seconds"] == 7200
        new = current.replace(chunk_length_kib=64)
        session.add_request_init_listener(record)
        try:
            outcomes = apply_unmanaged(session, keyspace, "objects", current, new, members=[])
            assert [(o.name, o.applied) for o in outcomes] == [("chunk_length_kib", True)]
            assert sent == [f"ALTER TABLE {keyspace}.objects WITH compression = {{'chunk_length_in_kb': '64', "
                            "'class': 'LZ4Compressor', 'min_compress_ratio': '1.1'}"]
            row = session.execute("SELECT caching, comment, gc_grace_seconds, compaction, compression "
                                  "FROM system_schema.tables WHERE keyspace_name = %s AND table_name = 'objects'",
                                  (keyspace,)).one()
            assert dict(row.compression) == {"chunk_length_in_kb": "64", "class": LZ4, "min_compress_ratio": "1.1"}
            assert dict(row.caching) == {"keys": "ALL", "rows_per_partition": "10"}
            assert row.comment == "kept by ops" and row.gc_grace_seconds == 7200
            assert dict(row.compaction) == {"class": STCS, "max_threshold": "20", "min_threshold": "4",
                                            "tombstone_threshold": "0.3"}
            # the same decision again (its record of what was in force now stale): nothing sent
            again = apply_unmanaged(session, keyspace, "objects", current, new, members=[])
            assert [(o.name, o.applied) for o in again] == [("chunk_length_kib", True)]
            assert again[0].how.startswith("nothing sent") and len(sent) == 1
            assert read_configuration(session, keyspace)[0]["chunk_length_kib"] == 64
        finally:
            session.remove_request_init_listener(record)
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
