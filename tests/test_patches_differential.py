"""The project's Cassandra patches against the release (issue 28): two lone nodes side by side,
127.0.0.20 on the patches and 127.0.0.21 on the release's classes alone (``patches=False``,
the per-node form of ``ASGARD_CASSANDRA_PATCHES=0``), get the same generated writes and must
answer the same generated queries alike.

Why single nodes at RF 1, each queried as its own coordinator: the patch ``local-read-keep-rows``
changes what a coordinator's *own* replica hands over (the rows as read, instead of serialized
and parsed back), so it is on the path of every read here. The other four patches change on
which thread a request or a local read runs and how a response buffer grows; any of them
going wrong would show as a different or failed answer too.

A hypothesis example is a batch of cases (one flush per batch: ``nodetool`` starts a JVM, two
seconds, too slow per case), each case on fresh partitions of one shared table:
  1. its ``before`` writes, on both nodes;
  2. on odd batches its queries (memtable only), then ``nodetool flush`` on both;
  3. its queries again (sstables only; on even batches the 1-second TTLs of step 1 have expired
     by then: the runner waits them out before reading, so no read races an expiry);
  4. its ``after`` writes (memtable over sstables: shadowing across the flush) and its queries.
Plus a paged scan of a token range over everything written so far. A write carries an
explicit timestamp, so both nodes resolve it alike; a case's writes run in order (list appends
take their order from the node's clock), cases in parallel. Two writes of one timestamp that
both carry a TTL are resolved by their expiry, the node's clock at the write plus the TTL
(``Cells.resolveRegular``, ``LivenessInfo.supersedes`` in 5.0), so a second boundary that falls
between them on one node only would make the nodes differ with no patch involved (CI at f8146f1
failed so, once in 1,050 cases): each long TTL of a case is one second longer than the one
before it (:func:`_distinct_expiries`), and the later write expires later on both nodes.

Shrinking is off (each replay of a batch costs a flush), and a batch does not fail on its own:
every batch runs, and the test then fails with the cases that differed, each written out in
full, replayable on its own.
"""
from __future__ import annotations

import itertools
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from asgard.resources.cassandra import CassandraNode
from asgard.resources.cassandra.install import lib_dir, patches_jar
from asgard.resources.stores.cql import build_cluster

from .patches_cql import LONG_TTL, SCHEMA, SHORT_TTL, TABLE, case, render_query, render_write

KEYSPACE = "patch_diff"
PATCHED_INDEX, RELEASE_INDEX = 20, 21  # 127.0.0.20/.21, JMX 7218/7219: no other test uses them
CASES_PER_BATCH = 25
BATCHES = 42                # 1,050 cases
MIN_CASES = 1_000
KEEP_ROWS_LINE = "asgard patch local-read-keep-rows: local reads keep their rows"
TS_BASE = 1_600_000_000_000_000  # microseconds; each case gets 1,000 of its own


def _start_both(nodes):
    with ThreadPoolExecutor(len(nodes)) as pool:
        list(pool.map(lambda n: n.start(), nodes))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(patched, release): two lone nodes of 1 GiB heap, stopped at the end of the module."""
    patched = CassandraNode(index=PATCHED_INDEX, heap="1G", patches=True,
                            workdir=tmp_path_factory.mktemp("diff-patched"))
    release = CassandraNode(index=RELEASE_INDEX, heap="1G", patches=False,
                            workdir=tmp_path_factory.mktemp("diff-release"))
    try:
        _start_both([patched, release])  # a node that cannot start fails the module: no skip
        yield patched, release
    finally:
        for node in (patched, release):
            node.stop()


@pytest.fixture(scope="module")
def sessions(pair):
    from cassandra.query import tuple_factory

    out = []
    for node in pair:
        cluster = build_cluster([node.address], node.native_port, admin=True, connect_timeout=20)
        profile = cluster.profile_manager.default
        profile.row_factory, profile.request_timeout = tuple_factory, 60
        session = cluster.connect()
        session.execute(f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        session.execute(SCHEMA.format(ks=KEYSPACE))
        session.set_keyspace(KEYSPACE)
        out.append(session)
    yield out
    for session in out:
        session.cluster.shutdown()


def test_the_pair_runs_patched_and_release_classes(pair):
    """The comparison means something only if one node has the patch jar first on its classpath
    and the other has none of it."""
    patched, release = pair
    jar = patches_jar(patched.version, True)
    assert jar is not None

    def classpath(node):
        argv = open(f"/proc/{node.pid()}/cmdline", "rb").read().split(b"\0")
        return argv[argv.index(b"-cp") + 1].decode()

    assert classpath(patched).split(":")[0] == str(jar)
    assert classpath(release) == f"{lib_dir(release.version)}/*"  # the release's jars alone


# --- comparing answers ----------------------------------------------------------------------

def _norm(value):
    """A driver value as plain, comparable data (sets and maps come as the driver's own types)."""
    from cassandra.util import OrderedMapSerializedKey, SortedSet

    if isinstance(value, (list, tuple)):
        return tuple(_norm(v) for v in value)
    if isinstance(value, (SortedSet, set, frozenset)):
        return ("set", tuple(sorted(value)))
    if isinstance(value, (dict, OrderedMapSerializedKey)):
        return ("map", tuple((k, _norm(v)) for k, v in value.items()))
    return value


TIMEOUT_TRIES = 3


def _answer(session, cql: str, page: int | None, run: "Run"):
    """Rows of a query (every page), or the error it raised, as comparable data. A TTL column
    is kept as whether there is one: the seconds left differ by the time between the two reads.
    A timeout is no answer (CI runs the hosts ring beside this module on two cores): the read is
    tried again, up to TIMEOUT_TRIES times, and counted."""
    from cassandra import OperationTimedOut, ReadTimeout
    from cassandra.query import SimpleStatement

    for attempt in range(TIMEOUT_TRIES):
        try:
            result = session.execute(SimpleStatement(cql, fetch_size=page))
            names = list(result.column_names or [])
            rows = [tuple(_norm(v) for v in row) for row in result]
            break
        except (ReadTimeout, OperationTimedOut) as exc:
            run.timeouts += 1
            if attempt == TIMEOUT_TRIES - 1:
                return _refusal(exc)
        except Exception as exc:  # compared like an answer: both nodes must refuse alike
            return _refusal(exc)
    ttl_cols = [i for i, n in enumerate(names) if n.startswith("ttl(")]
    if ttl_cols:
        rows = [tuple((v is not None) if i in ttl_cols else v for i, v in enumerate(row)) for row in rows]
    return ("rows", tuple(names), tuple(rows))


def _refusal(exc: Exception) -> tuple:
    """An error as comparable data: its type and first line, the node's own address blanked out
    (a replica failure names the replica)."""
    import re

    return ("error", type(exc).__name__, re.sub(r"127\.0\.0\.\d+", "<node>", str(exc).split("\n")[0])[:300])


def _write(session, cql: str):
    try:
        session.execute(cql)
        return None
    except Exception as exc:
        return _refusal(exc)


class Run:
    """What one run of the module compared, and what differed."""

    def __init__(self):
        self.cases = self.queries = self.writes = self.errors = self.timeouts = 0
        self.refusals: dict[str, str] = {}  # a refusal's message: one statement that got it
        self.differences: list[str] = []
        self.pk = itertools.count(1)
        self.ts_case = itertools.count(1)
        self.batches = 0


def _run_case(sessions, run: Run, case, pks, ts_base, phase: str, short_ttl: bool) -> list[str]:
    """One phase of one case on both nodes; returns the differences, written out."""
    patched, release = sessions
    found = []
    if phase in ("before", "after"):
        for op in case[phase]:
            cql = render_write(op, pks, ts_base)
            a, b = _write(patched, cql), _write(release, cql)
            run.writes += 1
            if a is not None:
                run.errors += 1
                run.refusals.setdefault(a[2][:120], cql)
            if a != b:
                found.append(f"write {cql!r}: patched {a}, release {b}")
        return found
    for q in case["queries"]:
        cql, page = render_query(q, pks)
        a, b = _answer(patched, cql, page, run), _answer(release, cql, page, run)
        run.queries += 1
        if a[0] == "error":
            run.errors += 1
            run.refusals.setdefault(a[2][:120], cql)
        if a != b:
            found.append(f"[{phase}] {cql} (fetch_size {page}):\n    patched {a}\n    release {b}")
    return found


def _describe(case, pks, ts_base, short_ttl) -> str:
    lines = [f"case on partitions {pks} (short TTLs {'on' if short_ttl else 'off'}):"]
    lines += [f"  before flush: {render_write(op, pks, ts_base)}" for op in case["before"]]
    lines += [f"  after flush:  {render_write(op, pks, ts_base)}" for op in case["after"]]
    return "\n".join(lines)


def _flush_both(pair):
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda n: n.nodetool("flush", KEYSPACE, TABLE), pair))


def _scan(sessions, run: Run, draw_range) -> list[str]:
    """A paged scan of a token range over the whole table (every batch so far), on both nodes."""
    lo, width, page = draw_range
    hi = min(lo + width, 2**63 - 1)
    found = []
    for cql in (f"SELECT token(pk), pk, c1, c2, s, v, l, m FROM {TABLE} WHERE token(pk) > {lo} AND token(pk) <= {hi}",
                f"SELECT count(*), max(v) FROM {TABLE} WHERE token(pk) > {lo} AND token(pk) <= {hi}"):
        a, b = _answer(sessions[0], cql, page, run), _answer(sessions[1], cql, page, run)
        run.queries += 1
        if a != b:
            found.append(f"[scan] {cql} (fetch_size {page}):\n    patched {a}\n    release {b}")
    return found


def _distinct_expiries(case, short_ttl: bool):
    """The case with each long TTL one second longer than the one before it, in the order the
    writes run (``before``, then ``after``): of two writes of one timestamp, the later then
    expires later on both nodes, whatever second each node wrote them in (see the module's doc).
    On odd batches (``short_ttl`` false) a 1 s TTL becomes a long one too. Two 1 s TTLs of one
    timestamp are left alike: both have expired before any read, and either is a tombstone."""
    extra = itertools.count()

    def fix(op):
        slot, offset, (template, ttl) = op
        if ttl is None or (ttl == SHORT_TTL and short_ttl):
            return op
        return slot, offset, (template, LONG_TTL + next(extra))

    return {**case, "before": [fix(op) for op in case["before"]], "after": [fix(op) for op in case["after"]]}


def _batch(pair, sessions, run: Run, batch, scan_range):
    """One hypothesis example: a batch of cases through the four steps of the module's doc."""
    run.batches += 1
    short_ttl = run.batches % 2 == 0  # even batches: 1 s TTLs before the flush, no memtable-only reads
    # odd batches read before a 1 s expiry could be waited out: their TTLs are all long
    placed = [(_distinct_expiries(c, short_ttl), [next(run.pk) for _ in range(3)], TS_BASE + 1_000 * next(run.ts_case))
              for c in batch]
    differences: dict[int, list[str]] = {}

    def phase(name):
        with ThreadPoolExecutor(8) as pool:
            results = pool.map(lambda p: _run_case(sessions, run, p[0], p[1], p[2], name, short_ttl), placed)
            for i, found in enumerate(results):
                if found:
                    differences.setdefault(i, []).extend(found)

    phase("before")
    written = time.monotonic()
    if not short_ttl:
        phase("memtable")
    _flush_both(pair)
    if short_ttl:  # TTL 1 s: expired once a second and a half has passed since the last write
        time.sleep(max(0.0, SHORT_TTL + 1.1 - (time.monotonic() - written)))
    phase("sstable")
    phase("after")
    phase("sstable+memtable")
    scan = _scan(sessions, run, scan_range)
    run.cases += len(placed)
    for i, found in sorted(differences.items()):
        c, pks, ts = placed[i]
        run.differences.append(_describe(c, pks, ts, short_ttl) + "\n  " + "\n  ".join(found))
    run.differences += scan


def test_patched_and_release_nodes_answer_alike(pair, sessions):
    run = Run()
    t0 = time.monotonic()

    # max_examples batches, each of CASES_PER_BATCH cases; shrinking off (see the module's doc);
    # no example database: a run is not steered by the last one's examples
    @settings(max_examples=BATCHES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(batch=st.lists(case(short_ttl=True), min_size=CASES_PER_BATCH, max_size=CASES_PER_BATCH),
           scan_range=st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(0, 2**59), st.sampled_from([3, 10, 50])))
    def compare(batch, scan_range):
        # no assert here: a failing example would be replayed on the next batch's parity and
        # partitions, and reported as flaky with the whole batch instead of the cases that differ
        _batch(pair, sessions, run, batch, scan_range)

    logging.getLogger("cassandra.protocol").setLevel(logging.ERROR)  # "Aggregation query used on multiple partition keys"
    compare()
    seconds = time.monotonic() - t0
    print(f"\ncompared {run.cases} cases ({run.batches} batches, {run.writes} writes, {run.queries} queries; "
          f"{run.errors} refused alike by both; {run.timeouts} reads timed out and were tried again) "
          f"between the patched and the release node in {seconds:.0f}s")
    for message, cql in run.refusals.items():
        print(f"  refused alike: {message}\n    e.g. {cql}")
    assert not run.differences, (f"{len(run.differences)} of {run.cases} cases differ between the patched and "
                                 "the release node; the first:\n\n" + "\n\n".join(run.differences[:3]))
    assert run.cases >= MIN_CASES
    # the generated CQL is valid: answers compared, not mostly errors
    assert run.errors <= 0.01 * (run.writes + run.queries), run.refusals
    # and the patched node's own reads went through the patch (it logs so at its first local read)
    patched, release = pair
    assert KEEP_ROWS_LINE in patched.system_log.read_text()
    assert "asgard patch" not in release.system_log.read_text()


def test_of_two_expiring_writes_of_one_timestamp_the_later_expiry_stands_whatever_the_clock(sessions):
    """Why :func:`_distinct_expiries`: with equal TTLs, which of two writes of one timestamp stands
    depends on whether a second boundary fell between them (on the release too); with the later
    write's TTL a second longer, the later one stands either way, on both nodes."""
    pks = itertools.count(10_000_000)  # above any partition the differential cases use

    def pair_of_writes(session, ttls, cross_second):
        """v = 3, then v = 1, both at timestamp 7: which v stands. The node shares this host's
        clock: a pair meant for one second that spans two (a slow request) is written again."""
        while True:
            pk = next(pks)
            while time.time() % 1 > 0.3:  # start early in a second
                time.sleep(0.01)
            first = time.time()
            session.execute(f"INSERT INTO {TABLE} (pk, c1, c2, v) VALUES ({pk}, 0, 0, 3) USING TIMESTAMP 7 AND TTL {ttls[0]}")
            if cross_second:
                time.sleep(1.05)
            session.execute(f"INSERT INTO {TABLE} (pk, c1, c2, v) VALUES ({pk}, 0, 0, 1) USING TIMESTAMP 7 AND TTL {ttls[1]}")
            if cross_second or int(time.time()) == int(first):
                return session.execute(f"SELECT v FROM {TABLE} WHERE pk = {pk} AND c1 = 0 AND c2 = 0").one()[0]

    for session in sessions:
        # equal TTLs: the same second compares the values (3 stands), across one the expiry (1)
        assert pair_of_writes(session, (LONG_TTL, LONG_TTL), False) == 3
        assert pair_of_writes(session, (LONG_TTL, LONG_TTL), True) == 1
        # distinct expiries, as the differential cases write them: the later write either way
        assert pair_of_writes(session, (LONG_TTL, LONG_TTL + 1), False) == 1
        assert pair_of_writes(session, (LONG_TTL, LONG_TTL + 1), True) == 1
