"""The one chain of senders (resources/stores/cql/senders.py) as a step process meets it: its first
put and get go before anything is prepared (early, on the pre-opened connection, or first, by
known ids), the ones after on the direct connection, and a session with request listeners (a
user's tracing) gets every request on the session, the direct path stepping aside with its reason."""
from __future__ import annotations

import json
import subprocess
import sys
import uuid

from asgard.resources.stores import ObjectKey
from tests.conftest import TEST_KEYSPACE

STEP = """
import json, sys
from asgard.resources.stores import ObjectKey
from asgard.resources.stores.cql import CassandraObjectStore, senders
store = CassandraObjectStore(keyspace=sys.argv[1])
key = ObjectKey(sys.argv[2], "out")
store.put(key, b"x" * 10_000)
first_put = senders.taken()
assert store.get(key)[0] == b"x" * 10_000
first_get = senders.taken()
for i in range(20):
    store.put(key, bytes([i]) * 10_000)
    assert store.get(key)[0] == bytes([i]) * 10_000
print(json.dumps({"first_put": first_put, "first_get": first_get, "all": senders.taken()}))
"""


def test_a_step_process_first_requests_go_before_preparing_and_the_rest_direct(cassandra_store):
    cassandra_store.ensure_schema()  # a step writes into a table that is there (the IO manager made it)
    scope = f"run/senders-{uuid.uuid4().hex[:8]}"
    out = subprocess.run([sys.executable, "-c", STEP, TEST_KEYSPACE, scope], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    [(first_put, one)] = seen["first_put"].items()
    assert first_put in ("put: early", "put: first") and one == 1, seen
    [first_get] = set(seen["first_get"]) - set(seen["first_put"])
    assert first_get in ("read: early", "read: first", "read: direct"), seen
    taken = seen["all"]
    assert sum(n for k, n in taken.items() if k.startswith("put: ")) == 21, taken
    assert sum(n for k, n in taken.items() if k.startswith("read: ")) == 21, taken
    # once the session is open, the chain's fast sender takes them (the session only while it opens)
    assert taken.get("put: direct", 0) >= 15 and taken.get("read: direct", 0) >= 15, taken
    cassandra_store.purge_scope(scope)


def test_a_session_with_request_listeners_gets_every_request_and_direct_says_why(cassandra_store):
    from asgard.resources.stores.cql import CassandraObjectStore, senders
    from asgard.resources.stores.cql import fallbacks

    store = CassandraObjectStore(keyspace=TEST_KEYSPACE)
    key = ObjectKey(f"run/senders-{uuid.uuid4().hex[:8]}", "out")
    store.put(key, b"warm")  # the session is open and the statements prepared
    store.get(key)
    seen = []

    def listener(future):  # a user's tracing or metrics hook
        seen.append(future.query)

    session = store.session
    session.add_request_init_listener(listener)
    try:
        senders.reset()
        fallbacks.reset()
        for i in range(3):
            store.put(key, bytes([i]) * 10_000)
            assert store.get(key)[0] == bytes([i]) * 10_000
        assert senders.taken() == {"put: session": 3, "read: session": 3}
        assert fallbacks.counts()["direct: the session has request-init listeners"] >= 6
        # the listener saw each put (one batch of the head and index rows) and each head read
        assert len(seen) >= 6
    finally:
        session.remove_request_init_listener(listener)
        store.purge_scope(key.scope)


def forget_prepared(store, name: str, markers, partition_key) -> None:
    """Give ``store`` statement ``name`` under an id its node does not hold, as after its restart or
    its table's ALTER: the same text with a comment of its own (nodes keep prepared statements across
    restarts, so each run needs a text never prepared before)."""
    from cassandra import ConsistencyLevel

    from asgard.resources.stores.cql.statements import keep_registered, known_prepared

    layout, cluster = store.statements.layout, store.session.cluster
    text = f"{store.statements.texts[name]} /* {uuid.uuid4().hex} */"
    forgotten = known_prepared(text, layout.keyspace, layout.table, markers, partition_key, cluster.protocol_version)
    forgotten.consistency_level = getattr(ConsistencyLevel, layout.consistency)
    keep_registered(cluster, forgotten)  # what the driver re-prepares from
    store.statements.prepared[name] = forgotten


def test_a_node_that_no_longer_holds_a_prepared_id_is_prepared_again_quietly(cassandra_store, caplog):
    """A member that restarted forgets the ids prepared on it: the direct path's EXECUTE is answered
    UNPREPARED, the session's way prepares the statement again (the driver's normal course), and
    nothing is logged at WARNING; the step-aside is counted under its own reason."""
    import logging

    from asgard.resources.stores.cql import CassandraObjectStore, fallbacks, senders
    from asgard.resources.stores.cql.direct import UNPREPARED
    from asgard.resources.stores.cql.statements import FIRST_MARKERS, FIRST_PARTITION_KEY

    store = CassandraObjectStore(keyspace=TEST_KEYSPACE)
    key = ObjectKey(f"run/senders-{uuid.uuid4().hex[:8]}", "out")
    store.put(key, b"warm")
    for _ in range(2):
        store.get(key)  # the statement prepared, and the direct connection open
    forget_prepared(store, "select_head", FIRST_MARKERS["select_head"], FIRST_PARTITION_KEY["select_head"])
    senders.reset()
    fallbacks.reset()
    with caplog.at_level(logging.DEBUG, logger="asgard.resources.stores.cql"):
        assert store.get(key)[0] == b"warm"
        assert store.get(key)[0] == b"warm"
    assert senders.taken() == {"read: session": 1, "read: direct": 1}  # prepared again, then direct
    assert fallbacks.counts() == {f"direct: {UNPREPARED}": 1}
    # the store says nothing; the driver's own reconnect lines while the node came back may show
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("asgard")]
    store.purge_scope(key.scope)


def test_a_chunk_read_answered_unprepared_goes_the_sessions_way_quietly(cassandra_store, caplog):
    """A node forgets a table's prepared ids when the table is altered (the tuner's retune): the
    direct path's chunk reads, several in flight, are answered UNPREPARED. The read finishes the
    session's way, which prepares again; nothing is logged at WARNING, the step-aside is counted
    under that reason, not as a failed connection, and the next read goes direct again."""
    import logging

    from asgard.resources.stores.cql import CassandraObjectStore, fallbacks
    from asgard.resources.stores.cql.direct import UNPREPARED

    store = CassandraObjectStore(keyspace=TEST_KEYSPACE)
    key = ObjectKey(f"run/senders-{uuid.uuid4().hex[:8]}", "out")
    data = bytes(range(256)) * (3 * 4096 + 7)  # three chunks and a bit at the store's 1 MiB
    store.put(key, data)
    for _ in range(2):
        assert store.get(key)[0] == data  # the statements prepared, and the direct connection open
    markers = (("scope", "text"), ("path", "text"), ("version", "text"), ("grp", "int"), ("chunk", "int"))
    forget_prepared(store, "select_chunk", markers, (0, 1, 2, 3))
    fallbacks.reset()
    with caplog.at_level(logging.DEBUG, logger="asgard.resources.stores.cql"):
        assert store.get(key)[0] == data
        assert fallbacks.counts() == {f"direct: {UNPREPARED}": 1}
        assert store.get(key)[0] == data
    assert fallbacks.counts() == {f"direct: {UNPREPARED}": 1}  # prepared again: no second step-aside
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("asgard")]
    store.purge_scope(key.scope)


def test_puts_after_their_table_is_altered_in_a_process_whose_first_puts_raced_the_prepare(cassandra_store,
                                                                                          monkeypatch):
    """A process's first puts, several at once, go by the statements' known ids while the statements are
    prepared (:class:`.early.FirstRequests`), and every store of the process shares one driver session: a
    put that made its known statement after the prepare, or a store that prepared and has gone, replaced
    the statement in the driver's registry of prepared ids, which holds them weakly. When the table is
    altered (the tuner's retune: compaction, compression, gc_grace_seconds...) the node forgets its ids and
    answers the next batch UNPREPARED; the driver re-prepares a batch only from that registry, and every
    small put failed ("'bytes' object has no attribute 'encode'", its message for an id it does not know)
    until the process ended. Here the puts after the ALTER are written, on the session's way."""
    import gc

    import asgard.resources.stores.cql as module
    from asgard.resources.stores.cql import CassandraObjectStore, senders

    monkeypatch.setitem(module.options._current, "options", module.options.opts())
    module.set_options(direct=False)  # the batch on the session, as when the direct path steps aside
    table = "objects_altered"  # a table of its own: its ALTER makes the node forget only its ids
    store = CassandraObjectStore(keyspace=TEST_KEYSPACE, table=table)
    key = ObjectKey(f"run/senders-{uuid.uuid4().hex[:8]}", "out")
    for i in range(2):
        store.put(key, bytes([i]) * 10_000)  # the insert statements prepared
    gone = CassandraObjectStore(keyspace=TEST_KEYSPACE, table=table)
    gone.put(key, b"another store's put")  # its own prepared statements replace this store's in the registry
    for name in ("insert_head", "insert_index"):
        # a racing first put's, gone with its request
        assert store.statements.known(name, store.session.cluster) is not None
        assert gone.statements.known(name, store.session.cluster) is not None
    del gone
    gc.collect()
    session = store.session
    grace = session.execute("SELECT gc_grace_seconds FROM system_schema.tables WHERE keyspace_name = %s "
                            "AND table_name = %s", (TEST_KEYSPACE, table)).one().gc_grace_seconds
    alter = f"ALTER TABLE {TEST_KEYSPACE}.{table} WITH gc_grace_seconds = %d"
    session.execute(alter % (grace + 1))
    try:
        senders.reset()
        store.put(key, b"after the alter" * 1000)
        assert senders.taken() == {"put: session": 1}
        assert store.get(key)[0] == b"after the alter" * 1000
        another = CassandraObjectStore(keyspace=TEST_KEYSPACE, table=table)
        another.put(key, b"and another store's")
        assert store.get(key)[0] == b"and another store's"
    finally:
        session.execute(alter % grace)
        store.purge_scope(key.scope)
