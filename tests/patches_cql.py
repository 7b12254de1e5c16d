"""Generated CQL for tests/test_patches_differential.py: write sequences and queries over one
table with a static column, collections, a two-column clustering key of mixed order, TTLs and
every kind of deletion (cell, row, range, partition), as hypothesis strategies.

A case is one write sequence over a few partitions of its own and the queries run on them. Its
writes carry explicit timestamps (``USING TIMESTAMP``), so that the two nodes compared resolve
every conflict alike whatever the wall clock did between them; its partitions are given at run
time (:func:`render_case`), so that a batch replayed by hypothesis writes to fresh ones.
"""
from __future__ import annotations

from hypothesis import strategies as st

TABLE = "t"
SCHEMA = f"""CREATE TABLE IF NOT EXISTS {{ks}}.{TABLE} (
    pk int, c1 int, c2 int, s int static, v int, t text, l list<int>, st set<int>, m map<int, int>,
    PRIMARY KEY (pk, c1, c2)) WITH CLUSTERING ORDER BY (c1 ASC, c2 DESC)"""
# the clustering order and its reverse, as ORDER BY clauses
NATURAL, REVERSED = "ORDER BY c1 ASC, c2 DESC", "ORDER BY c1 DESC, c2 ASC"

# small domains, so that writes of one case hit the same rows, cells and ranges again
CK = st.integers(0, 3)
VAL = st.integers(-3, 3)
TEXT = st.sampled_from(["", "a", "b", "zz"])
INTS = st.lists(st.integers(0, 4), max_size=3)
SHORT_TTL = 1        # expired before the batch's next read (the runner waits it out)
LONG_TTL = 86_400    # never expires during a run


def _lit_list(xs) -> str:
    return "[" + ", ".join(map(str, xs)) + "]"


def _lit_set(xs) -> str:
    return "{" + ", ".join(map(str, sorted(set(xs)))) + "}"


def _lit_map(kv) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(kv.items())) + "}"


def _text(value: str) -> str:
    return "'" + value + "'"


# --- writes -----------------------------------------------------------------------------
# An op is a tuple (template, partition slot, timestamp offset, ttl); the template has {pk},
# {ts} and {using} (the USING clause) filled in by render_case.

@st.composite
def _insert(draw, ttl):
    cols = draw(st.lists(st.sampled_from(["v", "t", "l", "st", "m", "s"]), unique=True, min_size=1, max_size=4))
    values = {"v": lambda: str(draw(VAL)), "t": lambda: _text(draw(TEXT)), "l": lambda: _lit_list(draw(INTS)),
              "st": lambda: _lit_set(draw(INTS)), "s": lambda: str(draw(VAL)),
              "m": lambda: _lit_map(draw(st.dictionaries(st.integers(0, 3), VAL, max_size=2)))}
    names, lits = ["pk", "c1", "c2"], ["{pk}", str(draw(CK)), str(draw(CK))]
    for c in cols:
        names.append(c)
        lits.append(values[c]())
    return f"INSERT INTO {TABLE} ({', '.join(names)}) VALUES ({', '.join(lits)}) {{using}}", ttl


@st.composite
def _update(draw, ttl):
    setters = {
        "v": lambda: f"v = {draw(VAL)}", "t": lambda: f"t = {_text(draw(TEXT))}",
        "l+": lambda: f"l = l + {_lit_list(draw(INTS))}", "+l": lambda: f"l = {_lit_list(draw(INTS))} + l",
        "l-": lambda: f"l = l - {_lit_list(draw(INTS))}", "l=": lambda: f"l = {_lit_list(draw(INTS))}",
        "st+": lambda: f"st = st + {_lit_set(draw(INTS))}", "st-": lambda: f"st = st - {_lit_set(draw(INTS))}",
        "m[]": lambda: f"m[{draw(st.integers(0, 3))}] = {draw(VAL)}",
        "m+": lambda: f"m = m + {_lit_map(draw(st.dictionaries(st.integers(0, 3), VAL, max_size=2)))}",
        "m-": lambda: f"m = m - {_lit_set(draw(st.lists(st.integers(0, 3), max_size=2)))}",
        "s": lambda: f"s = {draw(VAL)}",
    }
    keys = draw(st.lists(st.sampled_from(sorted(setters)), unique_by=lambda k: k.strip("+-=[]"),
                         min_size=1, max_size=3))
    sets = ", ".join(setters[k]() for k in keys)
    if keys == ["s"]:  # a static column alone is updated by partition key alone
        return f"UPDATE {TABLE} {{using}} SET {sets} WHERE pk = {{pk}}", ttl
    return f"UPDATE {TABLE} {{using}} SET {sets} WHERE pk = {{pk}} AND c1 = {draw(CK)} AND c2 = {draw(CK)}", ttl


@st.composite
def _delete(draw):
    kind = draw(st.sampled_from(["row", "cells", "elements", "static", "prefix", "c1 range", "c2 range",
                                 "open range", "partition"]))
    row = f"pk = {{pk}} AND c1 = {draw(CK)} AND c2 = {draw(CK)}"
    if kind == "row":
        return f"DELETE FROM {TABLE} {{using}} WHERE {row}", None
    if kind == "cells":
        cols = draw(st.lists(st.sampled_from(["v", "t", "l", "st", "m"]), unique=True, min_size=1, max_size=3))
        return f"DELETE {', '.join(cols)} FROM {TABLE} {{using}} WHERE {row}", None
    if kind == "elements":
        return f"DELETE m[{draw(st.integers(0, 3))}] FROM {TABLE} {{using}} WHERE {row}", None
    if kind == "static":
        return f"DELETE s FROM {TABLE} {{using}} WHERE pk = {{pk}}", None
    if kind == "prefix":  # a range tombstone over one c1
        return f"DELETE FROM {TABLE} {{using}} WHERE pk = {{pk}} AND c1 = {draw(CK)}", None
    if kind == "c1 range":
        lo, hi = sorted((draw(CK), draw(CK)))
        op_lo, op_hi = draw(st.sampled_from([">", ">="])), draw(st.sampled_from(["<", "<="]))
        return f"DELETE FROM {TABLE} {{using}} WHERE pk = {{pk}} AND c1 {op_lo} {lo} AND c1 {op_hi} {hi}", None
    if kind == "c2 range":  # within one c1, on the DESC column
        op = draw(st.sampled_from([">", ">=", "<", "<="]))
        return f"DELETE FROM {TABLE} {{using}} WHERE pk = {{pk}} AND c1 = {draw(CK)} AND c2 {op} {draw(CK)}", None
    if kind == "open range":
        op = draw(st.sampled_from([">", ">=", "<", "<="]))
        return f"DELETE FROM {TABLE} {{using}} WHERE pk = {{pk}} AND c1 {op} {draw(CK)}", None
    return f"DELETE FROM {TABLE} {{using}} WHERE pk = {{pk}}", None


def write_op(short_ttl: bool):
    """One write: a partition slot (0..2), a timestamp offset (0..15: ties and writes that arrive
    older than what they meet), and the statement. ``short_ttl``: TTLs of 1 s may be drawn."""
    ttls = st.sampled_from([None, None, LONG_TTL] + ([SHORT_TTL] if short_ttl else []))
    return st.tuples(st.integers(0, 2), st.integers(0, 15),
                     st.one_of(ttls.flatmap(_insert), ttls.flatmap(_update), _delete()))


# --- queries ----------------------------------------------------------------------------
# A query is (template with {pk0} {pk1} {pk2}, fetch_size: None = no paging, else the page size).

SELECTIONS = [
    "*",
    "pk, c1, c2, s, v, t, l, st, m, writetime(v), ttl(v), writetime(s)",
    "c1, c2, m[1], m[0..2], st",
    "s",
    "c1, c2, v, l",
]
AGGREGATES = ["count(*)", "count(*), min(v), max(v), sum(v)", "count(v), count(l), max(c2), min(t)",
              "max(s), count(s), count(v)"]


@st.composite
def _slice(draw) -> str:
    kind = draw(st.sampled_from(["", "", "c1 =", "c1 range", "c2 within c1", "tuple", "c1 in", "row"]))
    if kind == "c1 =":
        return f" AND c1 = {draw(CK)}"
    if kind == "c1 range":
        return f" AND c1 {draw(st.sampled_from(['>', '>=']))} {draw(CK)} AND c1 {draw(st.sampled_from(['<', '<=']))} {draw(CK)}"
    if kind == "c2 within c1":
        return f" AND c1 = {draw(CK)} AND c2 {draw(st.sampled_from(['>', '>=', '<', '<=']))} {draw(CK)}"
    if kind == "tuple":
        return f" AND (c1, c2) {draw(st.sampled_from(['>', '>=', '<', '<=']))} ({draw(CK)}, {draw(CK)})"
    if kind == "c1 in":
        return f" AND c1 IN ({', '.join(map(str, sorted(set(draw(st.lists(CK, min_size=1, max_size=3))))))})"
    if kind == "row":
        return f" AND c1 = {draw(CK)} AND c2 = {draw(CK)}"
    return ""


@st.composite
def query(draw):
    where_pk = draw(st.sampled_from(["pk = {pk0}", "pk = {pk1}", "pk IN ({pk0}, {pk1}, {pk2})", "pk IN ({pk2}, {pk0})"]))
    in_pk = "IN" in where_pk
    page = draw(st.sampled_from([None, 1, 2, 3, 5, 100]))
    kind = draw(st.sampled_from(["rows", "rows", "rows", "aggregate", "group", "distinct", "filter"]))
    slice_ = draw(_slice())
    if kind == "distinct":
        return f"SELECT DISTINCT pk, s FROM {TABLE} WHERE {where_pk}", page
    if kind == "aggregate":
        return f"SELECT {draw(st.sampled_from(AGGREGATES))} FROM {TABLE} WHERE {where_pk}{slice_}", page
    if kind == "group":
        by = draw(st.sampled_from(["pk", "pk, c1"]))
        return f"SELECT pk, c1, count(*), max(v) FROM {TABLE} WHERE {where_pk}{slice_} GROUP BY {by}", page
    if kind == "filter":
        cond = draw(st.sampled_from(["v > 0", "v <= 0", "m CONTAINS KEY 1", "st CONTAINS 2", "s = 1"]))
        return f"SELECT * FROM {TABLE} WHERE {where_pk}{slice_} AND {cond} ALLOW FILTERING", page
    order = draw(st.sampled_from(["", "", NATURAL, REVERSED]))
    if order and in_pk:
        page = None  # Cassandra refuses to page an ordered IN query (it sorts in memory)
    limit = draw(st.sampled_from(["", "", " LIMIT 1", " LIMIT 3", " PER PARTITION LIMIT 1", " PER PARTITION LIMIT 2 LIMIT 3"]))
    if limit.startswith(" PER PARTITION") and order and in_pk:
        limit = ""  # not with the in-memory ordering of an IN query
    selection = draw(st.sampled_from(SELECTIONS))
    if selection == "s" and slice_:
        selection = "c2, s"  # a static column alone may not be selected with a clustering restriction
    return f"SELECT {selection} FROM {TABLE} WHERE {where_pk}{slice_}{(' ' + order) if order else ''}{limit}", page


@st.composite
def case(draw, short_ttl: bool):
    """Writes before the flush, writes after it, and the queries."""
    before = draw(st.lists(write_op(short_ttl), min_size=1, max_size=6))
    after = draw(st.lists(write_op(False), max_size=4))
    queries = draw(st.lists(query(), min_size=2, max_size=5))
    return {"before": before, "after": after, "queries": queries}


def render_write(op, pks: list[int], ts_base: int) -> str:
    slot, offset, (template, ttl) = op
    using = f"USING TIMESTAMP {ts_base + offset}" + (f" AND TTL {ttl}" if ttl else "")
    # str.replace, not format: set and map literals have braces of their own
    return template.replace("{pk}", str(pks[slot])).replace("{using}", using)


def render_query(q, pks: list[int]) -> tuple[str, int | None]:
    template, page = q
    for i, pk in enumerate(pks):
        template = template.replace(f"{{pk{i}}}", str(pk))
    return template, page
