"""A fresh process's first requests to the store (what every step process of a multiprocess or
k8s executor makes): no prepare and no settings read before its first put, its first get before
the session is up, threads sharing one session, a missing table, routing, and the statement ids
the node holds. Split from test_cassandra_io_manager.py (the store's own suite)."""
from __future__ import annotations

import pytest

from asgard.resources.stores import ObjectKey
from tests.conftest import TEST_KEYSPACE


_FIRST_REQUESTS = r"""
import json, os, sys
from cassandra import connection
sent, early = [], []
send_msg = connection.Connection.send_msg
def record(self, msg, request_id, cb, *args, **kwargs):
    if hasattr(msg, "queries"):  # a batch: its statements by prepared id, or as text
        what = "ids" if all(prepared for prepared, _, _ in msg.queries) else "text"
    elif hasattr(msg, "query_id"):
        what = msg.query_id.hex()
    else:
        what = " ".join(str(getattr(msg, "query", "")).split())[:80]
    sent.append([type(msg).__name__, what])
    return send_msg(self, msg, request_id, cb, *args, **kwargs)
connection.Connection.send_msg = record
wait_for_responses = connection.Connection.wait_for_responses
def record_early(self, *msgs, **kwargs):  # the pre-opened connection, before the session is up
    answers = wait_for_responses(self, *msgs, **kwargs)
    early.extend([type(m).__name__, ok] for m, (ok, _) in zip(msgs, answers)
                 if type(m).__name__ in ("BatchMessage", "ExecuteMessage"))
    return answers
connection.Connection.wait_for_responses = record_early
from asgard.resources.stores import ObjectKey
from asgard.resources.stores.cql import CassandraObjectStore
store = CassandraObjectStore(keyspace=sys.argv[1], **({"table": sys.argv[3]} if len(sys.argv) > 3 else {}))
if os.environ.get("FIRST_GET"):  # a downstream step: its first request reads its input
    got, _ = store.get(ObjectKey.for_run(sys.argv[2], "first", "put"))
    missing = store.exists(ObjectKey.for_run(sys.argv[2], "never", "put"))
    print(json.dumps({"sent": sent, "early": early, "got": got.hex(), "missing": missing}))
    sys.exit(0)
payload = os.urandom(10 * 1024)
store.put(ObjectKey.for_run(sys.argv[2], "first", "put"), payload)
store.put(ObjectKey.for_run(sys.argv[2], "second", "put"), payload)
back = [store.get(ObjectKey.for_run(sys.argv[2], name, "put"))[0] == payload for name in ("first", "second")]
print(json.dumps({"sent": sent, "early": early, "back": back, "prepared": sorted(store.statements.prepared)}))
"""


def test_a_fresh_process_first_put_waits_for_no_prepare_and_no_settings_read(cassandra_store, run_id):
    """A step process connects afresh (issue 13, item 5): its first put is sent before any
    PREPARE or settings read, over connections that skipped OPTIONS. It goes out on the
    pre-opened connection as soon as that has started, while the control connection's REGISTER
    and topology reads may still be under way (nothing else comes first), and the node takes
    it. It names its statements by the ids the node holds them under, so the node parses no
    text, and the process sends no PREPARE at all: its puts and gets all go by id, and both
    objects read back."""
    import collections
    import json
    import os
    import subprocess
    import sys

    cassandra_store.ensure_schema()
    for name in ("insert_head", "insert_index", "select_head"):  # the node holds them, as after any step
        cassandra_store.statements.get(name)
    out = subprocess.run([sys.executable, "-c", _FIRST_REQUESTS, TEST_KEYSPACE, run_id], capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": os.getcwd()}).stdout
    result = json.loads(out.strip().splitlines()[-1])
    sent = [tuple(m) for m in result["sent"]]
    kinds = [kind for kind, _ in sent]
    assert "OptionsMessage" not in kinds, sent
    first = kinds.index("BatchMessage")
    # the pool's STARTUP, and of the control connection's STARTUP, REGISTER, peers and local
    # whatever it had sent by then: nothing else
    before = collections.Counter(kinds[:first])
    assert before["StartupMessage"] >= 1 and before <= collections.Counter(
        {"StartupMessage": 2, "RegisterMessage": 1, "QueryMessage": 2}), sent
    # the head and the index row, two requests at once (over the batch warning threshold), both taken
    assert [kind for kind, _ in result["early"]] == ["BatchMessage"] * 2 and all(ok for _, ok in result["early"]), result
    assert all("system.peers" in q or "system.local" in q for kind, q in sent[:first] if kind == "QueryMessage"), sent
    assert not any(kind == "PrepareMessage" or "system_views" in q for kind, q in sent[:first + 1]), sent
    assert sent[first] == ("BatchMessage", "ids"), sent
    assert "PrepareMessage" not in kinds, sent
    assert result["back"] == [True, True]
    assert {"insert_head", "insert_index", "select_head"} <= set(result["prepared"]), result
    cassandra_store.purge_scope(f"run/{run_id}")


def test_a_fresh_process_first_get_reads_its_input_before_the_session_is_up(cassandra_store, run_id):
    """A downstream step's first request is its input's get: it goes out by the statement's id
    on the pre-opened connection (no PREPARE, no wait for the topology reads), and gives the
    bytes the upstream step put; a key that was never written reads as absent."""
    import json
    import os
    import subprocess
    import sys

    cassandra_store.ensure_schema()
    cassandra_store.statements.get("select_head")  # the node holds it, as after any step
    payload = os.urandom(10 * 1024)
    cassandra_store.put(ObjectKey.for_run(run_id, "first", "put"), payload)
    out = subprocess.run([sys.executable, "-c", _FIRST_REQUESTS, TEST_KEYSPACE, run_id], capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": os.getcwd(), "FIRST_GET": "1"}).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["early"] == [["ExecuteMessage", True]], result
    assert bytes.fromhex(result["got"]) == payload and result["missing"] is False
    assert "PrepareMessage" not in [kind for kind, _ in result["sent"]], result
    cassandra_store.purge_scope(f"run/{run_id}")


_THREADS_FIRST = r"""
import json, os, sys, threading
from cassandra import connection
early = []
wait_for_responses = connection.Connection.wait_for_responses
def record_early(self, *msgs, **kwargs):
    answers = wait_for_responses(self, *msgs, **kwargs)
    early.extend(type(m).__name__ for m in msgs if type(m).__name__ in ("BatchMessage", "ExecuteMessage"))
    return answers
connection.Connection.wait_for_responses = record_early
from cassandra import cluster as driver_cluster
clusters = []
cluster_init = driver_cluster.Cluster.__init__
def count_clusters(self, *args, **kwargs):
    clusters.append(1)
    return cluster_init(self, *args, **kwargs)
driver_cluster.Cluster.__init__ = count_clusters
from asgard.resources.stores import ObjectKey
from asgard.resources.stores.cql import CassandraObjectStore
store = CassandraObjectStore(keyspace=sys.argv[1])
payloads = {i: os.urandom(10 * 1024 + i) for i in range(8)}
barrier, errors = threading.Barrier(8), []
def put(i):
    try:
        barrier.wait()
        store.put(ObjectKey.for_run(sys.argv[2], "threads", str(i)), payloads[i])
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
back = [store.get(ObjectKey.for_run(sys.argv[2], "threads", str(i)))[0] == payloads[i] for i in range(8)]
print(json.dumps({"early": early, "errors": errors, "back": back, "clusters": len(clusters)}))
"""


def test_eight_threads_first_puts_in_a_fresh_process_share_one_session(cassandra_store, run_id):
    """Eight threads of a fresh process put at once: one of them goes early on the pre-opened
    connection, the others wait for the one session opening meanwhile (never a second one),
    and every object reads back whole."""
    import json
    import os
    import subprocess
    import sys

    cassandra_store.ensure_schema()
    for name in ("insert_head", "insert_index", "select_head"):
        cassandra_store.statements.get(name)
    out = subprocess.run([sys.executable, "-c", _THREADS_FIRST, TEST_KEYSPACE, run_id], capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": os.getcwd()}).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["errors"] == [] and result["back"] == [True] * 8 and result["clusters"] == 1, result
    # one put's head and index rows (two requests: over the batch warning threshold until it is read)
    assert result["early"] == ["BatchMessage"] * 2, result
    assert sorted(cassandra_store.list_paths(f"run/{run_id}")) == sorted(f"threads/{i}" for i in range(8))
    cassandra_store.purge_scope(f"run/{run_id}")


def test_a_fresh_process_first_put_into_a_missing_table_falls_back_and_creates_it(cassandra_store, run_id):
    """The early first put (on the pre-opened connection, before the session is up) meets a
    table that does not exist: the node refuses it, nothing is torn, and the put goes the
    session's way, which creates the table; both objects read back in the same process."""
    import json
    import os
    import subprocess
    import sys
    import uuid

    cassandra_store.ensure_schema()  # the keyspace exists; the table does not
    table = f"early_{uuid.uuid4().hex[:8]}"
    try:
        out = subprocess.run([sys.executable, "-c", _FIRST_REQUESTS, TEST_KEYSPACE, run_id, table],
                             capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": os.getcwd()}).stdout
        result = json.loads(out.strip().splitlines()[-1])
        assert result["early"] and not any(ok for _, ok in result["early"]), result
        assert result["back"] == [True, True], result
    finally:
        for t in (table, f"{table}_index"):
            cassandra_store.session.execute(f"DROP TABLE IF EXISTS {TEST_KEYSPACE}.{t}")


def test_a_first_put_into_a_missing_table_creates_it(cassandra_node, run_id):
    """The unprepared first put meets a table that does not exist: it falls back to the prepared
    path, which creates the table, and the object reads back (the first get likewise)."""
    import uuid

    from asgard.resources.stores.cql import CassandraObjectStore

    stores = [CassandraObjectStore(keyspace=TEST_KEYSPACE, table=f"first_{uuid.uuid4().hex[:8]}") for _ in range(2)]
    key = ObjectKey.for_run(run_id, "first", "put")
    try:
        stores[0].put(key, b"z" * 10_000)  # a put first
        fresh = CassandraObjectStore(keyspace=TEST_KEYSPACE, table=stores[0].table)  # nothing prepared
        assert fresh.get(key)[0] == b"z" * 10_000
        assert not stores[1].exists(key)  # a read first
        stores[1].put(key, b"y" * 10_000)
        assert stores[1].get(key)[0] == b"y" * 10_000
    finally:
        for store in stores:
            for t in (store.qualified_table, store.qualified_index):
                store.session.execute(f"DROP TABLE IF EXISTS {t}")


@pytest.mark.parametrize("first", ["known", "text"])
def test_a_first_put_routes_by_its_head_partition(cassandra_store, run_id, monkeypatch, first):
    """Token-aware routing of small puts and gets: the first put's batch, sent without a prepare
    (by known ids, or as text where those do not apply), carries the keyspace and the routing key
    of the head's partition (scope, path, '', 0), the key a prepared statement that binds all four
    gives (select_chunk); the index row alone, its scope's. The prepared head statements bind all
    four too, so later puts and gets are routed the same."""
    import asgard.resources.stores.cql as module

    monkeypatch.setitem(module.options._current, "options", module.options.opts())
    module.set_options(first_requests=first)
    cassandra_store.ensure_schema()
    scope, path = f"run/{run_id}", "step/out"
    head = ("insert_head", (scope, path, "", 0, b"manifest", b"data", 60))
    index = ("insert_index", (scope, path, "v1", 0, True, 60))
    head_key = cassandra_store.statements.get("select_chunk").bind((scope, path, "", 0, 0)).routing_key
    index_key = cassandra_store.statements.get("insert_index").bind(index[1]).routing_key
    assert head_key is not None and index_key is not None
    assert cassandra_store.statements.get("insert_head").bind(head[1]).routing_key == head_key
    assert cassandra_store.statements.get("select_head").bind((scope, path, "", 0)).routing_key == head_key
    for requests, want in (((head, index), head_key), ((head,), head_key), ((index,), index_key)):
        batch, known = cassandra_store.first_requests.batch(requests, cassandra_store.session.cluster)
        assert bool(known) == (first == "known")
        assert batch.keyspace == cassandra_store.keyspace
        assert batch.routing_key == want, requests


def test_the_ids_a_first_put_and_get_send_are_the_nodes_own(cassandra_store):
    """The prepared ids a fresh process computes for its first statements (MD5 of the text, as
    Cassandra files statements for a connection without a keyspace) are the ids the node answers
    a PREPARE of the same text with, and bind the same columns with the same types."""
    cassandra_store.ensure_schema()
    session = cassandra_store.session
    for name in ("insert_head", "insert_index", "select_head"):
        known = cassandra_store.statements.known(name, session.cluster)
        prepared = session.prepare(cassandra_store.statements.texts[name])
        assert known.query_id == prepared.query_id, name
        assert [(c.keyspace_name, c.table_name, c.name, c.type) for c in known.column_metadata] == [
            (c.keyspace_name, c.table_name, c.name, c.type) for c in prepared.column_metadata], name
        assert known.routing_key_indexes == prepared.routing_key_indexes, name


def test_a_first_put_by_an_id_the_node_does_not_hold_is_prepared_then(cassandra_node, run_id):
    """A fresh table's statements were never prepared: the first put names them by id, the node
    answers UNPREPARED, the driver prepares their text there and sends the put again; the node
    then holds them (system.prepared_statements), and the object reads back."""
    import uuid

    from asgard.resources.stores.cql import CassandraObjectStore

    table = f"ids_{uuid.uuid4().hex[:8]}"
    setup = CassandraObjectStore(keyspace=TEST_KEYSPACE, table=table)
    setup.ensure_schema()  # creates the tables (and prepares only select_head)
    try:
        store = CassandraObjectStore(keyspace=TEST_KEYSPACE, table=table)
        ids = {name: store.statements.known(name, store.session.cluster).query_id for name in ("insert_head", "insert_index")}

        def held() -> set:
            rows = store.session.execute("SELECT prepared_id FROM system.prepared_statements")
            return {bytes(r.prepared_id) for r in rows} & set(ids.values())

        assert held() == set()
        key = ObjectKey.for_run(run_id, "ids", "put")
        store.put(key, b"i" * 10_000)
        assert held() == set(ids.values())
        assert {"insert_head", "insert_index"} <= set(store.statements.prepared)
        assert CassandraObjectStore(keyspace=TEST_KEYSPACE, table=table).get(key)[0] == b"i" * 10_000
    finally:
        for t in (setup.qualified_table, setup.qualified_index):
            setup.session.execute(f"DROP TABLE IF EXISTS {t}")
