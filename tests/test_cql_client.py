"""The client's behaviour where a fast path fails, against the real node: a resent write keeps its
write timestamp (a newer write made in between stands), a fast path that steps aside is counted and
warned once, and a connect that fails says so at once."""
from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
import uuid

import pytest

from asgard.resources.stores import ObjectKey, StoreUnavailableError
from asgard.resources.stores.cql import CassandraObjectStore, fallbacks
from asgard.resources.stores.cql.direct_connection import DirectConnection, DirectConnectionError

from .conftest import TEST_KEYSPACE


def _applied_then_lost(monkeypatch, newer_write):
    """Make the direct connection's next exchange reach the node (applied), then, before its answer
    is read, run ``newer_write`` and fail as a connection lost at that moment would."""
    calls = []
    original = DirectConnection.request

    def request(self, message, *args, **kwargs):
        if calls:  # only the first exchange is lost
            return original(self, message, *args, **kwargs)
        calls.append(message)
        original(self, message, *args, **kwargs)  # the node applies it
        # another writer, on another thread (as another step would be): its own write timestamp
        other = threading.Thread(target=newer_write)
        other.start()
        other.join()
        raise DirectConnectionError("connection lost after the request was applied (test)")

    monkeypatch.setattr(DirectConnection, "request", request)
    return calls


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "control-unpinned"])
def test_a_direct_write_resent_after_the_node_applied_it_does_not_overwrite_a_newer_one(
        cassandra_node, monkeypatch, pinned):
    """A small put goes direct; its connection fails after the node applied the batch; meanwhile
    another writer stored a newer value under the same key; the store then resends through the
    session. The newer value stands (the resend carries the put's original timestamp). The control
    (the timestamp not pinned, as before) shows the same steps overwrite it, so the test can fail."""
    from asgard.resources.stores.cql import store as store_module

    if not pinned:
        monkeypatch.setattr(store_module, "pinned_timestamp", contextlib.nullcontext)
    monkeypatch.setattr("asgard.resources.stores.cql.direct.DIRECT_RETRY_SECONDS", 0.0)  # reopen at once
    writer = CassandraObjectStore(keyspace=TEST_KEYSPACE, direct_requests=True)
    other = CassandraObjectStore(keyspace=TEST_KEYSPACE, direct_requests=False)
    scope = f"run/{uuid.uuid4().hex}"
    key = ObjectKey(scope, "out/result")
    writer.put(ObjectKey(scope, "warm-up"), b"x")  # the session is up and the statements prepared
    writer.put(ObjectKey(scope, "warm-up2"), b"x")
    writer.put(ObjectKey(scope, "warm-up3"), b"x")  # the third goes direct: its connection is open
    assert writer.direct.session() is not None

    calls = _applied_then_lost(monkeypatch, lambda: other.put(key, "newer"))
    fallbacks.reset()
    writer.put(key, "older")
    assert len(calls) == 1, "the put did not go on the direct connection"
    assert "direct: the direct connection failed" in fallbacks.counts()
    value, _ = other.get(key)
    assert value == ("newer" if pinned else "older")
    writer.purge_scope(scope)


def test_a_fast_path_that_steps_aside_is_counted_each_time_and_warned_once(cassandra_node, monkeypatch, caplog):
    store = CassandraObjectStore(keyspace=TEST_KEYSPACE, direct_requests=True)
    scope = f"run/{uuid.uuid4().hex}"
    store.put(ObjectKey(scope, "warm-up"), b"x")
    store.put(ObjectKey(scope, "warm-up2"), b"x")

    def refused(self, *args, **kwargs):
        raise DirectConnectionError("refused (test)")

    monkeypatch.setattr(DirectConnection, "request", refused)
    monkeypatch.setattr("asgard.resources.stores.cql.direct.DIRECT_RETRY_SECONDS", 0.0)  # reopen at once
    fallbacks.reset()
    with caplog.at_level(logging.WARNING, logger="asgard.resources.stores.cql"):
        for i in range(3):
            store.put(ObjectKey(scope, f"p{i}"), b"v" * 100)
    # the first put's connection fails; each later put's reopening fails at its STARTUP
    counts = fallbacks.counts()
    for i in range(3):  # every one stored, through the session
        assert store.get(ObjectKey(scope, f"p{i}"))[0] == b"v" * 100
    assert counts["direct: the direct connection failed"] == 1
    assert counts["direct: the direct connection could not be opened"] == 2
    for reason in ("the direct connection failed", "the direct connection could not be opened"):
        warned = [r for r in caplog.records if f"stepped aside ({reason})" in r.getMessage()]
        assert len(warned) == 1 and warned[0].levelno == logging.WARNING, reason  # once, not per request
        assert "127.0.0.1:9042" in warned[0].getMessage()
    store.purge_scope(scope)


def test_a_connect_to_an_address_where_nothing_listens_warns_at_once_then_fails_typed(caplog):
    with socket.socket() as s:  # a port on loopback that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = CassandraObjectStore(contact_points=["127.0.0.1"], port=port, keyspace=TEST_KEYSPACE,
                                 ride_through_seconds=3.0, connect_timeout=1.0)
    start, wall = time.monotonic(), time.time()
    with caplog.at_level(logging.WARNING, logger="asgard.resources.stores.cql"):
        with pytest.raises(StoreUnavailableError) as raised:
            store.put(ObjectKey("run/x", "y"), b"z")
    elapsed = time.monotonic() - start
    assert 3.0 <= elapsed < 15.0
    (warning,) = [r for r in caplog.records if "cannot reach Cassandra" in r.getMessage()]
    text = warning.getMessage()
    assert f"127.0.0.1:{port}" in text and "ride_through_seconds" in text and "trying again for up to" in text
    assert warning.created - wall < 2.5, "the warning came only after the wait"
    assert f"127.0.0.1:{port}" in str(raised.value)


def test_every_chunk_size_up_to_the_largest_opens_and_round_trips_its_objects(cassandra_node):
    """A chunk size of over half the largest one (7.5 MiB) used to make the store's own default
    inline size (two chunks) refuse itself; up to 15 MiB now opens, one over is refused, typed."""
    import numpy as np

    from asgard.resources.stores import StoreConfigError

    MiB = 1 << 20
    data = np.arange(20 * MiB // 8, dtype=np.int64)  # 20 MiB: chunked at every size below
    for chunk in (8 * MiB, 15 * MiB):
        store = CassandraObjectStore(**cassandra_node.client_options(), keyspace=TEST_KEYSPACE, chunk_size=chunk)
        key = ObjectKey(f"run/chunk-{uuid.uuid4().hex[:8]}", "out")
        manifest = store.put(key, data).manifest
        assert store.inline_bytes == 15 * MiB and manifest.chunks == -(-manifest.size // chunk), manifest
        assert np.array_equal(store.get(key)[0], data)
        store.purge_scope(key.scope)
    with pytest.raises(StoreConfigError, match="chunk_size 16777216 is outside"):
        CassandraObjectStore(**cassandra_node.client_options(), keyspace=TEST_KEYSPACE, chunk_size=16 * MiB)


def test_closing_the_sessions_to_one_cluster_leaves_the_others_open(cassandra_node):
    """``close_sessions(contact_points)``: a process done with one cluster (a ring that went down)
    drops the sessions to it and keeps the others; with no argument every one goes."""
    from asgard.resources.stores.cql import close_sessions

    # two sessions to the one node, by two spellings of its address (two clusters to the driver)
    by_ip = CassandraObjectStore(contact_points=["127.0.0.1"], keyspace=TEST_KEYSPACE)
    by_name = CassandraObjectStore(contact_points=["localhost"], keyspace=TEST_KEYSPACE)
    key = ObjectKey(f"run/{uuid.uuid4().hex}", "kept")
    by_ip.put(key, b"written before")
    assert by_name.get(key)[0] == b"written before"
    name_session, ip_session = by_name.session, by_ip.session
    assert name_session is not ip_session
    close_sessions(["localhost"])
    assert name_session.cluster.is_shutdown and not ip_session.cluster.is_shutdown
    assert by_ip.get(key)[0] == b"written before"
    # a store made afterwards opens its own session again
    again = CassandraObjectStore(contact_points=["localhost"], keyspace=TEST_KEYSPACE)
    assert again.get(key)[0] == b"written before"
    again_session = again.session
    assert again_session is not name_session and not again_session.cluster.is_shutdown
    by_ip.delete(key)
    close_sessions()
    assert ip_session.cluster.is_shutdown and again_session.cluster.is_shutdown
