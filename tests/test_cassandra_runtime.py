"""The Cassandra runtime: config rendering, restart with a changed knob, nodetool, a
stopped server's error, and two instances on 127.0.0.3/.4 as one ring."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from asgard_dagster import CassandraIOManager, CassandraResource
from asgard.resources.cassandra import CassandraCluster, CassandraNode
from asgard.resources.cassandra.config import base_config, render_config, token_for
from asgard.resources.cassandra.nodetool import pool_completed, ring_status
from asgard.resources.numa import NumaPlanError, format_cpulist, numa_nodes, numactl_prefix
from asgard.resources.process import ManagedServer
from asgard.resources.stores import ObjectKey, StoreUnavailableError


def test_render_config_applies_overrides_and_removals(tmp_path):
    base = base_config(tmp_path, "127.0.0.2", seeds=["127.0.0.1"], index=2, nodes=2)
    config = render_config(base, {"concurrent_writes": 64, "concurrent_compactors": None})
    assert config["concurrent_writes"] == 64 and "concurrent_compactors" not in config
    assert config["listen_address"] == config["rpc_address"] == "127.0.0.2"
    assert config["data_file_directories"] == [str(tmp_path / "data")]
    assert config["initial_token"] == token_for(2, 2) == "0"
    assert config["seed_provider"][0]["parameters"][0]["seeds"] == "127.0.0.1:7000"


def test_numa_topology_and_pinning():
    nodes = numa_nodes()
    assert nodes and all(n.cpus for n in nodes)
    assert numactl_prefix(None) == []
    prefix = numactl_prefix(nodes[0].node_id)
    # a whole node is bound by its CPU list (numa.py: --cpunodebind would widen a narrowed affinity)
    cpus = format_cpulist(c for c in nodes[0].cpus if c in os.sched_getaffinity(0))
    assert prefix == [] or prefix[1:] == [f"--physcpubind={cpus}", f"--membind={nodes[0].node_id}"]
    with pytest.raises(NumaPlanError, match="does not exist"):
        numactl_prefix(999)


@pytest.fixture(scope="module")
def node2():
    node = CassandraNode(index=2, heap="1G")
    node.set_overrides({}, replace=True)
    node.start()
    yield node
    node.stop()


def test_restart_with_changed_knob_is_read_back(node2):
    before = node2.settings(["concurrent_writes", "memtable_flush_writers"])
    target = 48 if before["concurrent_writes"] != "48" else 40
    seconds = node2.restart_with({"concurrent_writes": target, "memtable_flush_writers": 3})
    after = node2.settings(["concurrent_writes", "memtable_flush_writers"])
    assert after == {"concurrent_writes": str(target), "memtable_flush_writers": "3"}
    assert seconds > 0
    rendered = yaml.safe_load((node2.conf_dir / "cassandra.yaml").read_text())
    assert rendered["concurrent_writes"] == target
    # the restart's stop-to-ready time is on record for the cost-benefit analysis
    import json

    last = json.loads(node2.restart_log.read_text().splitlines()[-1])
    assert last["endpoint"] == "127.0.0.2:9042" and last["seconds"] == round(seconds, 3)
    assert node2.restart_seconds(recent=1) == round(seconds, 3)


def test_jvm_extra_opts_reach_the_server_last_as_cassandra_env_sh_appends_them(node2, monkeypatch):
    """``JVM_EXTRA_OPTS`` (Cassandra's own variable) is read at each start, split as a shell would,
    and goes after the project's flags, so an operator's flag wins over ours."""
    monkeypatch.setenv("JVM_EXTRA_OPTS", "-XX:TieredStopAtLevel=1  -Dasgard.extra='two words'")
    node2.restart()
    argv = Path(f"/proc/{node2.pid()}/cmdline").read_bytes().decode().split("\0")
    assert "-XX:TieredStopAtLevel=1" in argv and "-Dasgard.extra=two words" in argv
    assert argv.index("-Dasgard.extra=two words") > max(i for i, a in enumerate(argv) if a.startswith("-Dcassandra"))
    assert node2.settings(["concurrent_writes"])  # the JVM took the flags: the node answers
    monkeypatch.undo()  # the variable as the suite found it, for the module's later tests
    node2.restart()
    argv = Path(f"/proc/{node2.pid()}/cmdline").read_bytes().decode().split("\0")
    assert not any(a.startswith("-Dasgard.extra") for a in argv)


def test_the_servers_approximate_clock_is_sampled_every_20_ms(node2):
    """Cassandra samples its approximate clock (request timeouts, message expiry) every 2 ms by
    default, a wake-up every 2 ms of every idle node; the launcher sets 20 ms. The node lists
    the property among those it reads (``system_views.system_properties`` shows Cassandra's own
    properties only), with the launcher's value."""
    from asgard.resources.cassandra.node_command import APPROX_CLOCK_PROPERTY

    name, value = APPROX_CLOCK_PROPERTY.removeprefix("-D").split("=")
    cluster = node2.cql_cluster()
    try:
        row = cluster.connect().execute("SELECT value FROM system_views.system_properties WHERE name = %s",
                                        (name,)).one()
    finally:
        cluster.shutdown()
    assert row is not None and row.value == value == "20", row


def test_the_node_runs_the_projects_patch_to_cassandra(node2):
    """The install step applies resources/cassandra/patches/<version>/*.patch to the release's
    sources and puts the compiled classes first on the instance's classpath: the running JVM
    has them there, a multi-chunk object reads back byte for byte through the patched local
    read path, and Cassandra's own log says the patched class served it."""
    from asgard.resources.cassandra.install import patches_jar
    from asgard.resources.stores.cql import CassandraObjectStore

    jar = patches_jar(node2.version)
    assert jar is not None and jar.exists()
    argv = Path(f"/proc/{node2.pid()}/cmdline").read_bytes().split(b"\0")
    assert argv[argv.index(b"-cp") + 1].decode().split(os.pathsep)[0] == str(jar)
    store = CassandraObjectStore(contact_points=[node2.address], keyspace="asgard_patch")
    blob = os.urandom(3 * store.chunk_size + 12345)  # several chunks, each a large cell of its own
    key = ObjectKey.for_run("patched-read", "step", "out")
    put = store.put(key, blob)
    assert not put.manifest.inline and put.manifest.chunks == 4
    assert store.get(key)[0] == blob
    log = (node2.workdir / "logs" / "system.log").read_text(errors="replace")
    # the coordinator's own reads keep their rows (local-read-keep-rows); the serialize that
    # local-read-buffer-slack sizes is left to replicas answering another node (a ring)
    assert "asgard patch local-read-keep-rows: local reads keep their rows" in log
    # the request pool's idle workers: parked after 50 us of spinning on a small host (the
    # patched class read the property the launcher set), upstream's 10 ms on a larger one
    from asgard.resources.cassandra.node import SMALL_HOST_CPUS, SMALL_HOST_SEP_STOP_CHECK_NS

    small = len(os.sched_getaffinity(0)) <= SMALL_HOST_CPUS and "ASGARD_CASSANDRA_SEP_STOP_CHECK_NS" not in os.environ
    flag = f"-Dasgard.sep_stop_check_ns={SMALL_HOST_SEP_STOP_CHECK_NS}".encode()
    assert (flag in argv) == small, argv
    assert (f"stop after {SMALL_HOST_SEP_STOP_CHECK_NS} ns of spinning" in log) == small
    store.purge_scope(key.scope)


def _completed_tasks(node) -> dict[str, int]:
    return pool_completed(node.nodetool("tpstats"))


def test_client_requests_run_to_completion_on_one_thread(node2):
    """Patches sep-run-immediately and native-inline. Upstream, a coordinator's own local read
    or mutation is queued to a pool worker whenever nothing else is queued (CASSANDRA-21429),
    and every request goes from the event loop to the request pool and back. With the launcher's
    flags, 150 small puts and gets through the store reach no pool worker: ReadStage and
    MutationStage run (almost) none of them, and on a small host neither does
    Native-Transport-Requests. Every object reads back as written."""
    from asgard.resources.cassandra.node import SMALL_HOST_CPUS
    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(contact_points=[node2.address], keyspace="asgard_patch")
    count, blobs = 150, [os.urandom(10 * 1024 + i) for i in range(150)]
    keys = [ObjectKey.for_run("run-to-completion", "step", f"out{i}") for i in range(count)]
    store.put(keys[0], blobs[0])  # statements prepared, table there
    store.get(keys[0])
    before = _completed_tasks(node2)
    for key, blob in zip(keys, blobs):
        store.put(key, blob)
    got = [store.get(key)[0] for key in keys]
    after = _completed_tasks(node2)
    store.purge_scope(keys[0].scope)
    assert got == blobs
    ran = {pool: after.get(pool, 0) - before.get(pool, 0) for pool in
           ("ReadStage", "MutationStage", "Native-Transport-Requests")}
    # a few background tasks (system tables, the store's own index and settings reads) may land
    # in a pool; upstream, every one of the 2 x 150 requests did
    assert ran["ReadStage"] <= 10 and ran["MutationStage"] <= 10, ran
    argv = Path(f"/proc/{node2.pid()}/cmdline").read_bytes().split(b"\0")
    inline = b"-Dasgard.native_inline=true" in argv
    small = len(os.sched_getaffinity(0)) <= SMALL_HOST_CPUS and "ASGARD_CASSANDRA_NATIVE_INLINE" not in os.environ
    assert b"-Dasgard.sep_run_immediately=true" in argv and (inline == small or "ASGARD_CASSANDRA_NATIVE_INLINE" in os.environ)
    assert (ran["Native-Transport-Requests"] <= 10) if inline else ran["Native-Transport-Requests"] >= 2 * count, ran
    log = (node2.workdir / "logs" / "system.log").read_text(errors="replace")
    assert "asgard patch sep-run-immediately" in log
    assert ("asgard patch native-inline: client requests that cannot wait for another node, of up to 65536 bytes, "
            "run on their connection's event loop" in log) == inline


def test_a_bad_request_thread_setting_is_refused_before_start(monkeypatch, tmp_path):
    monkeypatch.setenv("ASGARD_CASSANDRA_NATIVE_INLINE", "yes")
    node = CassandraNode(index=24, workdir=tmp_path / "node")
    with pytest.raises(ValueError, match="ASGARD_CASSANDRA_NATIVE_INLINE must be 1 .* got 'yes'"):
        node.command()
    monkeypatch.setenv("ASGARD_CASSANDRA_NATIVE_INLINE", "0")
    argv = node.command()
    assert "-Dasgard.native_inline=true" not in argv and "-Dasgard.sep_run_immediately=true" in argv


def test_local_reads_that_keep_their_rows_answer_every_query_shape_as_before(node2):
    """The patch local-read-keep-rows hands the coordinator's own replica's rows over as read,
    with no serialize and parse in between. Every shape of read still answers as Cassandra's
    own semantics say, from memtables and again from sstables: partitions with static columns,
    a deleted row, a range tombstone, an expired cell, a deleted partition, reversed order,
    IN over partitions, a slice, paging, a range scan, an aggregate, large cells, and a counter
    table (which keeps the serialized path)."""
    import time

    from cassandra.query import SimpleStatement

    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(contact_points=[node2.address], keyspace="asgard_keep_rows")
    session = store.session
    session.execute("CREATE KEYSPACE IF NOT EXISTS asgard_keep_rows "
                    "WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}")
    session.execute("CREATE TABLE IF NOT EXISTS asgard_keep_rows.shapes "
                    "(p int, c int, s text static, v blob, n int, PRIMARY KEY (p, c))")
    session.execute("CREATE TABLE IF NOT EXISTS asgard_keep_rows.hits (p int PRIMARY KEY, n counter)")
    session.execute("TRUNCATE asgard_keep_rows.shapes")
    session.execute("TRUNCATE asgard_keep_rows.hits")
    insert = session.prepare("INSERT INTO asgard_keep_rows.shapes (p, c, s, v, n) VALUES (?, ?, ?, ?, ?)")
    model: dict[int, dict[int, tuple[bytes, int | None]]] = {}
    statics = {}
    for p in range(5):
        statics[p] = f"static-{p}"
        for c in range(10):
            value = os.urandom(1 << 20 if (p, c) in {(0, 4), (2, 9)} else 100 + 37 * c)
            session.execute(insert, (p, c, statics[p], value, p * 100 + c))
            model.setdefault(p, {})[c] = (value, p * 100 + c)
    session.execute("DELETE FROM asgard_keep_rows.shapes WHERE p = 1 AND c = 3")
    del model[1][3]
    session.execute("DELETE FROM asgard_keep_rows.shapes WHERE p = 2 AND c >= 5 AND c < 8")
    for c in (5, 6, 7):
        del model[2][c]
    session.execute("UPDATE asgard_keep_rows.shapes USING TTL 1 SET n = 7 WHERE p = 3 AND c = 0")
    model[3][0] = (model[3][0][0], None)
    session.execute("DELETE FROM asgard_keep_rows.shapes WHERE p = 4")
    del model[4], statics[4]
    for _ in range(2):
        session.execute("UPDATE asgard_keep_rows.hits SET n = n + 5 WHERE p = 1")
    time.sleep(2.2)  # the TTL'd cell has expired

    def rows(p):
        return [(c, value, n) for c, (value, n) in sorted(model[p].items())]

    def check(where: str):
        for p in model:
            got = session.execute(f"SELECT c, s, v, n FROM asgard_keep_rows.shapes WHERE p = {p}").all()
            assert [(r.c, r.v, r.n) for r in got] == rows(p), (where, p)
            assert {r.s for r in got} == {statics[p]}, (where, p)
        desc = session.execute("SELECT c, v FROM asgard_keep_rows.shapes WHERE p = 2 ORDER BY c DESC").all()
        assert [(r.c, r.v) for r in desc] == [(c, v) for c, v, _ in reversed(rows(2))], where
        many = session.execute("SELECT p, c FROM asgard_keep_rows.shapes WHERE p IN (0, 1, 2, 4)").all()
        assert [(r.p, r.c) for r in many] == [(p, c) for p in (0, 1, 2) for c, _, _ in rows(p)], where
        sliced = session.execute("SELECT c FROM asgard_keep_rows.shapes WHERE p = 1 AND c > 2 AND c <= 6").all()
        assert [r.c for r in sliced] == [c for c, _, _ in rows(1) if 2 < c <= 6], where
        paged = session.execute(SimpleStatement("SELECT c, v FROM asgard_keep_rows.shapes WHERE p = 0", fetch_size=3))
        assert [(r.c, r.v) for r in paged] == [(c, v) for c, v, _ in rows(0)], where
        scan = session.execute(SimpleStatement("SELECT p, c, n FROM asgard_keep_rows.shapes", fetch_size=7)).all()
        assert sorted((r.p, r.c, r.n) for r in scan) == sorted((p, c, n) for p in model for c, _, n in rows(p)), where
        count = session.execute("SELECT count(*) AS k, max(n) AS top FROM asgard_keep_rows.shapes WHERE p = 2").one()
        assert (count.k, count.top) == (len(model[2]), max(n for _, _, n in rows(2))), where
        assert session.execute("SELECT n FROM asgard_keep_rows.hits WHERE p = 1").one().n == 10, where
        assert session.execute("SELECT * FROM asgard_keep_rows.shapes WHERE p = 4").all() == [], where

    check("memtables")
    node2.nodetool("flush", "asgard_keep_rows")
    check("sstables")
    session.execute("DROP KEYSPACE asgard_keep_rows")


def test_a_read_past_the_kept_rows_bound_goes_on_serialized_and_answers_the_same(node2):
    """The patch local-read-keep-rows keeps a read's rows only up to 1 MiB of their object
    overhead (issue 38, part 7): past it, the read goes on serialized as upstream, what was kept
    first and then the rest, in order. Three partitions: ``a`` small, ``b`` with 30,000 rows of
    which 20,000 deleted one by one (tombstones) and 10,000 live, ``c`` small. Read whole, in
    reverse, sliced, paged, and in a scan of the table (one read across the partitions, where the
    bound falls inside ``b`` after ``a`` or ``c`` was kept), from memtables and from sstables:
    every answer is the live rows, and the node logs that a read passed the bound."""
    from cassandra.concurrent import execute_concurrent_with_args
    from cassandra.query import SimpleStatement

    from asgard.resources.stores.cql import build_cluster

    argv = Path(f"/proc/{node2.pid()}/cmdline").read_bytes().split(b"\0")
    patched = any(b"patches.jar" in arg for arg in argv)
    cluster = build_cluster([node2.address], admin=True)
    session = cluster.connect()
    try:
        session.execute("CREATE KEYSPACE IF NOT EXISTS asgard_keep_bound "
                        "WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}")
        session.execute("DROP TABLE IF EXISTS asgard_keep_bound.t")
        session.execute("CREATE TABLE asgard_keep_bound.t (p text, c int, v blob, PRIMARY KEY (p, c))")
        insert = session.prepare("INSERT INTO asgard_keep_bound.t (p, c, v) VALUES (?, ?, ?)")
        delete = session.prepare("DELETE FROM asgard_keep_bound.t WHERE p = ? AND c = ?")
        value = {c: os.urandom(16 + c % 50) for c in range(30_000)}
        execute_concurrent_with_args(session, insert, [("b", c, value[c]) for c in range(30_000)], concurrency=64)
        execute_concurrent_with_args(session, delete, [("b", c) for c in range(30_000) if c % 3], concurrency=64)
        live = [c for c in range(30_000) if c % 3 == 0]
        for p in ("a", "c"):
            execute_concurrent_with_args(session, insert, [(p, c, value[c]) for c in range(10)], concurrency=10)

        def check(where: str) -> None:
            whole = session.execute(SimpleStatement("SELECT c, v FROM asgard_keep_bound.t WHERE p = 'b'",
                                                    fetch_size=20_000)).all()
            assert [(r.c, r.v) for r in whole] == [(c, value[c]) for c in live], where
            back = session.execute(SimpleStatement("SELECT c FROM asgard_keep_bound.t WHERE p = 'b' ORDER BY c DESC",
                                                   fetch_size=20_000)).all()
            assert [r.c for r in back] == live[::-1], where
            part = session.execute("SELECT c FROM asgard_keep_bound.t WHERE p = 'b' AND c >= 100 AND c < 25000").all()
            assert [r.c for r in part] == [c for c in live if 100 <= c < 25_000], where
            paged = session.execute(SimpleStatement("SELECT c FROM asgard_keep_bound.t WHERE p = 'b'", fetch_size=700))
            assert [r.c for r in paged] == live, where
            scan = session.execute(SimpleStatement("SELECT p, c, v FROM asgard_keep_bound.t", fetch_size=20_000)).all()
            expected = {("a", c, value[c]) for c in range(10)} | {("c", c, value[c]) for c in range(10)} | {
                ("b", c, value[c]) for c in live}
            assert len(scan) == len(expected) and {(r.p, r.c, r.v) for r in scan} == expected, where

        check("memtables")
        node2.nodetool("flush", "asgard_keep_bound")
        check("sstables")
    finally:
        session.execute("DROP KEYSPACE IF EXISTS asgard_keep_bound")
        cluster.shutdown()
    # logged once per start, at the first such read: in this start's part of the log
    this_start = (node2.workdir / "logs" / "system.log").read_text(errors="replace").rsplit("Cassandra version:", 1)[-1]
    logged = "bytes of kept row overhead; such reads go on serialized" in this_start
    assert logged == patched


@pytest.fixture(scope="module")
def lone_node():
    """A standalone node of its own (127.0.0.24), on fresh data (no ring state another use of
    the address left behind) and wiped afterwards."""
    node = CassandraNode(index=24, heap="1G")
    node.wipe()
    node.start()
    yield node
    node.wipe()


def test_a_lone_node_restart_keeps_the_rows_written_right_before_it(lone_node):
    """A lone node stops by a flush of every table over JMX and SIGKILL (no drain, whose
    messaging shutdown waits a fixed 2 s): rows written right before the stop, to a keyspace
    without a commit log, read back after the restart, and the restart is on record with its
    stop's share and how it stopped. The start skips mlockall's heap pre-touch (when run as
    root) and the memtable row-overhead estimate measured by the first start."""
    import json
    import shutil

    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(contact_points=[lone_node.address], keyspace="asgard_fast_stop")
    assert store.durable_writes is False  # only a flush keeps these rows
    keys = [ObjectKey.for_run("fast-stop", "step", f"out{i}") for i in range(50)]
    for round_ in range(2):
        for i, key in enumerate(keys):
            store.put(key, {"round": round_, "i": i, "blob": b"x" * 997 * i})
        log_size = (lone_node.workdir / "logs" / "system.log").stat().st_size
        stops = lone_node.log_file.read_text().count("=== stop: AsgardStop connect")
        seconds = lone_node.restart()
        assert lone_node.last_stop == "flush+kill"
        last = json.loads(lone_node.restart_log.read_text().splitlines()[-1])
        assert last["endpoint"] == lone_node.endpoint and last["seconds"] == round(seconds, 3)
        assert last["stopped_by"] == "flush+kill" and 0 < last["stop_seconds"] < last["seconds"]
        assert lone_node.log_file.read_text().count("=== stop: AsgardStop connect") == stops + 1
        fresh = CassandraObjectStore(contact_points=[lone_node.address], keyspace="asgard_fast_stop")
        assert [fresh.get(k)[0] for k in keys] == [{"round": round_, "i": i, "blob": b"x" * 997 * i}
                                                  for i in range(len(keys))]
        with open(lone_node.workdir / "logs" / "system.log", errors="replace") as f:
            f.seek(log_size)
            started = f.read()
        assert "Estimated SkipListMemtable row overhead" not in started  # passed back, not measured
        if os.geteuid() == 0 and shutil.which("setpriv"):
            assert "Unable to lock JVM memory (ENOMEM)" in started and "mlockall successful" not in started
    assert json.loads(lone_node.row_overhead_file.read_text())["heap"] == "1G"


def test_nodetool_over_jmx(node2):
    from asgard.resources.cassandra.install import nodetool_cds_archive

    out = node2.nodetool("info")
    assert "Native Transport active: true" in out
    node2.nodetool("setcompactionthroughput", "32")
    assert "32" in node2.nodetool("getcompactionthroughput")
    # a run wrote the archive of nodetool's classes as it exited; later runs map it, their output as clean
    archive = nodetool_cds_archive()
    assert archive.stat().st_size > 0 and not list(archive.parent.glob(f"{archive.name}.*.partial"))
    assert node2.nodetool("getcompactionthroughput").strip().startswith("Current compaction throughput")


def test_a_live_session_survives_a_node_restart(node2):
    """A long-lived process (the bench, a sensor, the daemon) keeps its driver session while the
    retune job restarts the node: its next read and write go through once the driver reconnects."""
    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(contact_points=["127.0.0.2"], keyspace="asgard_restart")
    key = ObjectKey.for_run("restart", "step", "out")
    store.put(key, list(range(1000)))
    session = store.session
    node2.restart()
    assert store.get(key)[0] == list(range(1000))  # the same session, across the restart
    store.put(key, "rewritten")
    assert store.get(key)[0] == "rewritten" and store.session is session


def test_stopped_server_gives_unreachable_error(node2):
    io = CassandraIOManager(cassandra=CassandraResource(contact_points=["127.0.0.2"], keyspace="asgard_down",
                                                        connect_timeout=2.0, ride_through_seconds=2.0))
    io.store().put(ObjectKey.for_run("r", "s", "o"), 1)  # reachable while up
    node2.stop()
    try:
        fresh = CassandraIOManager(cassandra=CassandraResource(contact_points=["127.0.0.2"], keyspace="asgard_down2",
                                                               connect_timeout=2.0, ride_through_seconds=2.0))
        with pytest.raises(StoreUnavailableError, match=r"Cassandra is unreachable at 127.0.0.2:9042.*asgard cassandra up"):
            fresh.store().put(ObjectKey.for_run("r", "s", "o"), 1)
    finally:
        node2.start()


def test_two_instances_form_one_ring_with_replication():
    ring = CassandraCluster(nodes=2, first_index=3, heap="1G")
    try:
        ring.start()
        for node in ring.nodes:  # every member sees both Up and Normal once start returns
            assert ring_status(node.nodetool("status")) == {"127.0.0.3": "UN", "127.0.0.4": "UN"}
        from asgard.resources.stores.cql import CassandraObjectStore

        store = CassandraObjectStore(contact_points=ring.contact_points, keyspace="asgard_rf2",
                                     replication_factor=2, consistency="ALL")
        key = ObjectKey.for_run("ring", "step", "out")
        store.put(key, list(range(10_000)))
        assert store.get(key)[0] == list(range(10_000))
        owns = ring.nodes[0].nodetool("status", "asgard_rf2")
        assert owns.count("100.0%") == 2, owns  # each instance holds a full replica
    finally:
        ring.stop()
    # ring members drain on SIGTERM (peers told, hints written): no flush-and-kill for them
    assert [n.last_stop for n in ring.nodes] == ["sigterm", "sigterm"]


def test_a_start_that_holds_clients_opens_cql_only_after_its_check(node2):
    """``restart(before_clients=...)``: while the check runs the node is up (JMX answers) but its
    CQL port is closed; a failing check leaves it closed with an error that says how to open it."""
    from asgard.resources.process import ServerError, port_open

    seen = {}

    def check():
        seen["cql_open"] = port_open(node2.address, node2.native_port)
        seen["gossip"] = node2.nodetool("statusgossip").strip()

    node2.restart(before_clients=check)
    assert seen == {"cql_open": False, "gossip": "running"}
    assert port_open(node2.address, node2.native_port)

    def fails():
        raise RuntimeError("peers not seen")

    with pytest.raises(ServerError, match=r"CQL port closed, and it stays closed: peers not seen.*enablebinary"):
        node2.restart(before_clients=fails)
    try:
        assert node2.is_running() and not port_open(node2.address, node2.native_port)
    finally:
        node2.nodetool("enablebinary")
        node2.wait_ready(60)


def test_a_quorum_read_merges_a_stale_replica_with_the_other_whichever_coordinates():
    """RF 2, one member down while rows are written at ONE (handoff off, so it stays stale), then
    back: a QUORUM read through either member returns every row. The coordinator's own replica
    answers with its rows as read (patch local-read-keep-rows), the other's are serialized; the
    digests differ and the node merges both (read repair), the path a stale member takes."""
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import FallthroughRetryPolicy, WhiteListRoundRobinPolicy
    from cassandra.query import SimpleStatement

    ring = CassandraCluster(nodes=2, first_index=3, heap="1G")
    kept, stale = ring.nodes

    def session_on(node):  # this member coordinates every request
        profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([node.address]),
                                   retry_policy=FallthroughRetryPolicy())
        cluster = Cluster([node.address], execution_profiles={EXEC_PROFILE_DEFAULT: profile})
        return cluster, cluster.connect()

    try:
        ring.start()
        cluster, session = session_on(kept)
        session.execute("CREATE KEYSPACE IF NOT EXISTS asgard_stale WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 2}")
        session.execute("DROP TABLE IF EXISTS asgard_stale.t")
        session.execute("CREATE TABLE asgard_stale.t (k int, c int, s blob static, v blob, PRIMARY KEY (k, c))")
        for node in ring.nodes:
            node.nodetool("disablehandoff")
        stale.stop()
        insert = SimpleStatement("INSERT INTO asgard_stale.t (k, c, s, v) VALUES (%s, %s, %s, %s)",
                                 consistency_level=ConsistencyLevel.ONE)
        keys = range(60)
        for k in keys:
            for c in range(4):
                session.execute(insert, (k, c, b"S%d" % k, bytes([c]) * 5000))
        session.execute(SimpleStatement("DELETE FROM asgard_stale.t WHERE k = 0 AND c = 1",
                                        consistency_level=ConsistencyLevel.ONE))
        cluster.shutdown()
        stale.start()
        ring.wait_converged()
        # the member back has none of these rows (no hints): QUORUM must bring them from the other
        select = "SELECT c, s, v FROM asgard_stale.t WHERE k = %s"
        for coordinator, half in ((stale, keys[1::2]), (kept, keys[2::2])):
            cluster, session = session_on(coordinator)
            query = SimpleStatement(select, consistency_level=ConsistencyLevel.QUORUM, fetch_size=2)
            for k in half:  # each key read once: read repair makes the replicas agree after it
                rows = list(session.execute(query, (k,)))
                assert [(r.c, r.s, r.v) for r in rows] == [(c, b"S%d" % k, bytes([c]) * 5000) for c in range(4)], (
                    coordinator.address, k)
            rows = list(session.execute(SimpleStatement("SELECT c FROM asgard_stale.t WHERE k = 0",
                                                        consistency_level=ConsistencyLevel.QUORUM)))
            assert [r.c for r in rows] == [0, 2, 3]  # the delete, from the kept replica, wins
            cluster.shutdown()
        for node in ring.nodes:
            assert "local-read-keep-rows: local reads keep their rows" in node.system_log.read_text(errors="replace")
    finally:
        ring.stop()


def test_runs_ride_through_restarts_of_their_only_replica(node2, dagster_instance):
    """Replication factor 1, the node restarted twice (as a retune applying a restart-only knob
    does) while runs loop on the multiprocess executor: every run succeeds and every output
    reads back intact (each downstream step checks what it read)."""
    import threading

    from dagster import execute_job, reconstructable

    from tests.ride_through_job import EXPECTED, KEYSPACE, ride_through_job

    results, stop = [], threading.Event()
    instance = dagster_instance
    if True:  # runs loop in a thread while this one restarts the node
        def loop():
            while not stop.is_set() and len(results) < 12:
                with execute_job(reconstructable(ride_through_job), instance=instance, raise_on_error=False) as r:
                    results.append(r.success)

        worker = threading.Thread(target=loop)
        worker.start()
        try:
            import time

            time.sleep(4)
            restarts = [node2.restart(), node2.restart()]
        finally:
            stop.set()
            worker.join(timeout=300)
    assert results and all(results), f"run outcomes: {results}"
    assert all(s > 0 for s in restarts)
    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(contact_points=["127.0.0.2"], keyspace=KEYSPACE)
    import numpy as np

    assert np.array_equal(store.get(ObjectKey("ride-through", "last"))[0], EXPECTED)


def test_a_session_whose_pools_all_failed_is_retried_as_a_restart(node2):
    """The driver's NoHostAvailable lists bare hosts (not {host: error}) when the control
    connection got in but every pool failed after it: a node going down between the two. That
    is a restart to ride through, not a crash while reading the error (CI saw the latter)."""
    from cassandra.cluster import NoHostAvailable

    from asgard.resources.stores.cql.errors import LOCAL_HINT, connect_failure

    exc = NoHostAvailable("Unable to connect to any servers", [node2.address])
    assert connect_failure(exc, (node2.address,), node2.native_port, None, 2.0) == (LOCAL_HINT, True)



class _SleepServer(ManagedServer):
    """A stand-in server: the process ``start`` launches, nothing else."""

    def command(self):
        return ["sleep", "300"]

    def is_ready(self):
        return self.is_running()


_START_WITH_TERM_IGNORED = r"""
import signal, sys
from pathlib import Path
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as a supervisor or a library may leave it
from tests.test_cassandra_runtime import _SleepServer
_SleepServer("sleeper", Path(sys.argv[1])).start()
"""


def test_a_server_gets_sigterm_even_from_a_parent_that_ignores_it(tmp_path):
    """The stop signal reaches the server, so it shuts down cleanly (Cassandra drains) instead of
    being SIGKILLed after stop's timeout."""
    import subprocess
    import sys
    import time

    subprocess.run([sys.executable, "-c", _START_WITH_TERM_IGNORED, str(tmp_path)], check=True,
                   cwd=str(Path(__file__).resolve().parent.parent))
    server = _SleepServer("sleeper", tmp_path)
    pid = server.pid()
    assert pid is not None
    ignored = int(next(line.split()[1] for line in open(f"/proc/{pid}/status") if line.startswith("SigIgn")), 16)
    assert not ignored & (1 << (15 - 1)), "SIGTERM is ignored in the server"
    t0 = time.monotonic()
    assert server.stop(timeout=20)
    assert time.monotonic() - t0 < 5  # SIGTERM did it, not the SIGKILL after the timeout
