"""A 3-instance local ring (127.0.0.11-13): one run's outputs spread over every instance; and a
2-instance ring's start (127.0.0.3/.4) whose seed does not answer the member's first shadow round."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from asgard.resources.cassandra import CassandraCluster
from asgard.resources.cassandra.nodetool import ring_status

from .driver_view import wait_driver_sees

pytestmark = pytest.mark.usefixtures("forked_steps")
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def ring():
    ring = CassandraCluster(nodes=3, first_index=11, heap="1G")  # the ring `asgard bench io --nodes 3` uses
    # where each instance's server.log stood before this module's launches (it is appended to)
    ring.log_offsets = {n.address: n.log_file.stat().st_size if n.log_file.exists() else 0 for n in ring.nodes}
    ring.started_at = time.monotonic()
    ring.start()
    yield ring
    ring.stop()


@pytest.mark.parametrize("rf", [1, 2])
def test_one_run_lands_on_every_instance(ring, rf):
    from asgard_bench.io import spread

    result = spread(ring.nodes, {"contact_points": ring.contact_points, "replication_factor": rf,
                                 "consistency": "ONE"}, outputs=6, size_mib=16)
    shares = result["instance_bytes"]
    assert set(shares) == {"127.0.0.11", "127.0.0.12", "127.0.0.13"}
    total = sum(shares.values())
    # every instance holds part of the run, and the replicas add up to rf copies of it
    assert all(b > 0.1 * total for b in shares.values()), shares
    assert rf * 96 * MiB <= total <= rf * 96 * MiB * 1.1, shares
    if rf == 2:  # two replicas on three instances: each holds about two thirds of the run
        assert all(b > 0.4 * 96 * MiB for b in shares.values()), shares
    assert result["largest_partition_bytes"] <= 1.25 * result["chunk_group_bytes"]


def test_requests_go_to_a_replica_of_their_partition(ring):
    """Token-aware routing without the full schema at connect: each chunk's write and read is
    coordinated by the instance that holds it."""
    import numpy as np

    from asgard.resources.stores import ObjectKey
    from asgard.resources.stores.cql import CassandraObjectStore

    store = CassandraObjectStore(contact_points=ring.contact_points, keyspace="asgard_ring_route",
                                 consistency="ONE", chunk_size=256 * 1024)
    key = ObjectKey.for_run("route", "map", "result")
    # 24 chunks over the ring: with 12, all on two of three instances happened 1 time in 40
    store.put(key, np.arange(6 * 1024 * 1024 // 8, dtype=np.float64))
    session = store.session
    manifest = store.read_manifest(key)
    metadata = session.cluster.metadata
    statement = store.statements.get("select_chunk")
    coordinators, replicas = [], []
    for i in range(manifest.chunks):
        bound = statement.bind((key.scope, key.path, manifest.version, i // store.chunks_per_partition, i))
        future = session.execute_async(bound)
        future.result()
        coordinators.append(future.coordinator_host.endpoint)
        replicas.append({h.endpoint for h in metadata.get_replicas("asgard_ring_route", bound.routing_key)})
    assert all(len(r) == 1 for r in replicas)
    assert all(c in r for c, r in zip(coordinators, replicas)), (coordinators, replicas)
    assert len(set(coordinators)) == 3  # 24 partitions reach all three instances


def test_direct_requests_go_to_a_replica_of_their_head_partition(ring, monkeypatch):
    """A small put and a get on the store's direct connections (cql.direct) go to the instance
    that holds the object's head, as the driver's token-aware routing would send them."""
    from cassandra.protocol import BatchMessage, ExecuteMessage

    from asgard.resources.stores import ObjectKey
    from asgard.resources.stores.cql import CassandraObjectStore
    from asgard.resources.stores.cql.direct_connection import DirectConnection

    store = CassandraObjectStore(contact_points=ring.contact_points, keyspace="asgard_ring_route",
                                 consistency="ONE")
    store.put(ObjectKey.for_run("direct", "warm", "up"), 1)  # prepares the statements
    store.get(ObjectKey.for_run("direct", "warm", "up"))
    hosts = []
    send = DirectConnection._send

    def record(conn, messages, *streams):
        if isinstance(messages[0], (BatchMessage, ExecuteMessage)):  # not a login
            hosts.append(conn.host)
        return send(conn, messages, *streams)

    monkeypatch.setattr(DirectConnection, "_send", record)
    keys = [ObjectKey.for_run("direct", "small", str(i)) for i in range(24)]
    for i, key in enumerate(keys):
        store.put(key, i)
        assert store.get(key)[0] == i
    metadata, head = store.session.cluster.metadata, store.statements.prepared["select_head"]
    replicas = [{h.endpoint.address for h in metadata.get_replicas(
        "asgard_ring_route", head.bind((key.scope, key.path, "", 0)).routing_key)} for key in keys]
    assert len(hosts) == 2 * len(keys)
    assert all(hosts[2 * i] in r and hosts[2 * i + 1] in r for i, r in enumerate(replicas)), (hosts, replicas)
    assert len(set(hosts)) == 3


def test_a_fan_out_run_survives_an_instance_killed_mid_run_with_rf2(ring, dagster_instance):
    """Replication factor 2, consistency ONE: every partition keeps a live replica when one
    instance dies (SIGKILL, nothing flushed), so the run's writes and reads go on there.
    The killed instance is started again at the end, whole ring for the bench test after it."""
    import threading
    import time

    from dagster import execute_job, reconstructable

    from tests.forkserver_steps import forkserver_with_this_environment
    from tests.ring_fault_job import ring_fault_job

    victim = ring.nodes[1]
    outcome = {}

    def run():
        forkserver_with_this_environment()
        with execute_job(reconstructable(ring_fault_job), instance=dagster_instance) as result:
            outcome["success"] = result.success
            outcome["total"] = result.output_for_node("gather") if result.success else None
            outcome["failures"] = [str(e.event_specific_data.error.message)[:300]
                                   for e in result.all_events if e.is_step_failure]

    worker = threading.Thread(target=run)
    worker.start()
    try:
        # kill once the fan-out has started: the first mapped step has stored its output
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
                e.step_key and e.step_key.startswith("work") and e.is_step_success
                for e in _events(dagster_instance)):
            time.sleep(0.2)
        assert victim.kill()
        assert "success" not in outcome, "the run ended before the instance was killed"
        worker.join(timeout=600)
    finally:
        victim.start()
    assert outcome.get("success"), outcome
    assert outcome["total"] == sum(2 * i * 250_000 for i in range(8))


def _events(instance):
    from dagster import EventRecordsFilter, DagsterEventType

    records = instance.get_event_records(EventRecordsFilter(event_type=DagsterEventType.STEP_SUCCESS))
    return [r.event_log_entry.dagster_event for r in records]


def test_requests_that_may_wait_for_another_node_leave_the_event_loop(ring):
    """Patch native-inline on a ring (issue 38, part 7): a request runs on its connection's event
    loop only where it cannot wait for another node. A write at QUORUM to a keyspace of RF 3 waits
    for a remote replica, so each one goes to the request pool (Native-Transport-Requests counts
    it), however small; a read of ``system.local`` (LocalStrategy: every replica is this node)
    stays on the loop. On the release's classes, or with the patch off, both go to the pool."""
    import uuid
    from pathlib import Path

    from cassandra import ConsistencyLevel

    from asgard.resources.cassandra.nodetool import pool_completed
    from asgard_bench.slow_replica import coordinator_session

    first = ring.nodes[0]
    cluster, session = coordinator_session(first.address)  # every request coordinated by the first member
    try:
        session.execute("CREATE KEYSPACE IF NOT EXISTS asgard_ring_inline WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 3}")
        session.execute("CREATE TABLE IF NOT EXISTS asgard_ring_inline.kv (k uuid PRIMARY KEY, v blob)")
        write = session.prepare("INSERT INTO asgard_ring_inline.kv (k, v) VALUES (?, ?)")
        write.consistency_level = ConsistencyLevel.QUORUM
        local = session.prepare("SELECT release_version FROM system.local WHERE key = 'local'")
        count, keys = 150, [uuid.uuid4() for _ in range(150)]

        def pool_ran(requests) -> int:
            before = pool_completed(first.nodetool("tpstats")).get("Native-Transport-Requests", 0)
            for request in requests:
                request()
            return pool_completed(first.nodetool("tpstats")).get("Native-Transport-Requests", 0) - before

        writes = pool_ran([lambda k=k: session.execute(write, (k, b"x" * 100)) for k in keys])
        reads = pool_ran([lambda: session.execute(local)] * count)
        check = session.prepare("SELECT k FROM asgard_ring_inline.kv WHERE k = ?")
        check.consistency_level = ConsistencyLevel.QUORUM
        assert all(session.execute(check, (k,)).one() is not None for k in keys)
    finally:
        session.execute("DROP KEYSPACE IF EXISTS asgard_ring_inline")
        cluster.shutdown()
    argv = Path(f"/proc/{first.pid()}/cmdline").read_bytes().split(b"\0")
    # the patch is loaded where the project's patch jar is on the class path, and on where the flag is set
    patched = any(b"patches.jar" in arg for arg in argv) and b"-Dasgard.native_inline=true" in argv
    log = (first.workdir / "logs" / "system.log").read_text(errors="replace").rsplit("Cassandra version:", 1)[-1]
    assert ("asgard patch native-inline: client requests that cannot wait for another node" in log) == patched
    # every write went to the pool in both cases (a few background tasks may add to the count)
    assert writes >= count, (writes, patched)
    assert (reads <= 10) if patched else reads >= count, (reads, patched)


def test_first_puts_from_three_processes_at_once_create_one_schema(ring):
    """Three processes, each through another member, make their first put at the same moment on
    a fresh keyspace: each creates the keyspace and the tables. Before 5.1 Cassandra lets
    coordinators that create one table at once give it two ids, and a CREATE can reach a member
    the keyspace has not reached yet. The store creates each table with the one id its name gives
    (table_id) and sends such a CREATE again, so every put reads back, on three fresh keyspaces,
    and every member's schema holds that id."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from asgard.resources.stores.cql.statements import table_id
    from asgard_bench.slow_replica import coordinator_session

    repo = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")])))
    for attempt in range(3):
        keyspace = f"asgard_schema_race_{attempt}"
        cluster, session = coordinator_session(ring.nodes[0].address)
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)
        start_at = time.time() + 8  # the three processes' imports and connects done by then
        procs = [subprocess.Popen([sys.executable, "-m", "tests.schema_race", node.address, keyspace, str(i),
                                   str(start_at)], cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for i, node in enumerate(ring.nodes)]
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=180)
            results.append(out.strip().splitlines()[-1] if out.strip() else f"exit {proc.returncode}: {err[-800:]}")
        assert results == ["ok"] * 3, (keyspace, results)
        for node in ring.nodes:  # each member's own schema (system_schema is local)
            member, member_session = coordinator_session(node.address)
            rows = member_session.execute("SELECT table_name, id FROM system_schema.tables WHERE keyspace_name = %s",
                                          (keyspace,)).all()
            member.shutdown()
            assert {r.table_name: r.id for r in rows} == {t: table_id(keyspace, t) for t in ("objects", "objects_index")}
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)
        cluster.shutdown()


def test_chunks_read_at_one_from_the_nearest_replica_fall_back_where_it_has_none(ring, monkeypatch):
    """chunk_reads="nearest-one" (issue 37, consistency per edge): a chunk is read at ONE, routed to
    the replica on the reader's host first, and a chunk the replica that answered does not hold
    (written while it was down, hints off) is read again at the store's level: every value comes
    back whole. On loopback every member is local; which one is the reader's host is set here."""
    import numpy as np

    from asgard.resources.stores import ObjectKey, StoreConfigError
    from asgard.resources.stores.cql import CassandraObjectStore
    from asgard.resources.stores.cql import cluster as cql_cluster

    behind = ring.nodes[0]
    options = dict(contact_points=ring.contact_points, keyspace="asgard_nearest", replication_factor=3,
                   consistency="LOCAL_QUORUM", chunk_size=64 * 1024, inline_bytes=0)
    writer = CassandraObjectStore(**options)
    writer.ensure_schema()
    rng = np.random.default_rng(7)
    # 24 objects of 2 chunks, each object's chunks one partition of its own token: about a third
    # have the member that missed them first among their replicas
    values = {ObjectKey.for_run("nearest-one", "s", f"o{i}"): rng.random(2 * 64 * 1024 // 8) for i in range(24)}
    for node in ring.nodes:
        node.nodetool("disablehandoff")
    behind.stop()
    try:
        for key, value in values.items():  # two of three replicas: the stopped one will have none of it
            writer.put(key, value)
    finally:
        # `behind` coordinates the reads below: without the dynamic snitch it reads each chunk at ONE from the
        # token's first replica (SimpleSnitch), not from whichever member its latency scores favour after its
        # restart (all of them the others' once: no read found it empty, in one clone's CI of twelve)
        kept = behind.overrides()
        behind.set_overrides({"dynamic_snitch": False})
        behind.start()
        behind.set_overrides(kept, replace=True)  # from its next start as before
        for node in ring.nodes:
            node.nodetool("enablehandoff")

    # the reader's host runs `behind`: the query plan of a chunk read starts at it, a replica of every chunk
    monkeypatch.setattr(cql_cluster, "is_local_address", lambda address: address == behind.address)
    reader = CassandraObjectStore(**options, chunk_reads="auto")
    # the process's session marked `behind` down while it was stopped: its plan leaves it out until
    # the driver's reconnection (backing off up to seconds) sees it up again
    wait_driver_sees(reader.session.cluster, behind.address)
    reads, reason = reader.chunk_reads_for()
    assert reads == "nearest-one" and behind.address in reason, reason
    key = next(iter(values))
    manifest = reader.read_manifest(key)
    bound = reader.statements.get("select_chunk").bind((key.scope, key.path, manifest.version, 0, 0))
    policy = reader.session.cluster.profile_manager.default.load_balancing_policy
    plan = [h.address for h in policy.make_query_plan("asgard_nearest", bound)]
    assert plan[0] == behind.address and sorted(plan) == sorted(ring.contact_points), plan
    for key, value in values.items():
        got, result = reader.get(key)
        assert np.array_equal(got, value) and result.chunk_reads == "nearest-one", key
    # the chunks `behind` lacks came whole from the store's level (the loopback ring's SimpleSnitch
    # has the coordinator read the token's first replica, `behind` for about a third of them)
    assert reader.chunk_read_fallbacks > 0, reader.chunk_read_fallbacks

    # an edge's own choice wins over the store's; a quorum read never falls back
    for key, value in values.items():
        got, result = reader.get(key, "quorum")
        assert np.array_equal(got, value) and result.chunk_reads == "quorum", key
    # on loopback as it is, every member is this host's: auto keeps the store's level
    monkeypatch.setattr(cql_cluster, "is_local_address", lambda address: True)
    assert reader.chunk_reads_for() == ("quorum", "auto: every member runs on this host: no link between hosts "
                                                  "to save")
    with pytest.raises(StoreConfigError, match="chunk_reads 'fastest' is not one of"):
        reader.get(key, "fastest")
    writer.purge_scope("run/nearest-one")


def test_no_instance_spins_on_its_default_role_setup(ring):
    """An instance started before its peers are up retries its default-role setup; it must wait
    between attempts. With a retry delay of 0 one instance logged 32 million "skipped default
    role setup" lines (5 GB) and kept a core busy. Checked over the whole module: starts, a kill
    and a restart of one instance."""
    seconds = time.monotonic() - ring.started_at
    for node in ring.nodes:
        with node.log_file.open("rb") as log:
            log.seek(ring.log_offsets[node.address])
            retries = sum(1 for line in log if b"skipped default role setup" in line)
        assert retries <= 10 * seconds, (node.address, retries, seconds)


def test_a_member_whose_seed_does_not_answer_gossip_is_started_again_with_a_longer_shadow_round(tmp_path):
    """A seed starved of CPU (here: stopped with SIGSTOP) does not answer the joining member's
    shadow round, which fails "Unable to gossip with any peers"; the member's start (the ring's
    start, a killed member's restart) starts it once more with a longer window (ring_delay_ms), and
    the seed, back, answers it."""
    from asgard.resources.cassandra.node import NO_GOSSIP_PEERS, SECOND_START_RING_DELAY_MS

    ring = CassandraCluster(nodes=2, first_index=3, heap="1G", workdir=tmp_path)
    seed, member = ring.nodes
    resumed = threading.Event()

    def resume_seed_after_the_first_failure():
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not resumed.is_set():
            if member.log_file.exists() and NO_GOSSIP_PEERS in member.log_file.read_text(errors="replace"):
                break
            time.sleep(0.2)
        os.kill(seed.pid(), signal.SIGCONT)
        resumed.set()

    try:
        seed.start()
        os.kill(seed.pid(), signal.SIGSTOP)
        watcher = threading.Thread(target=resume_seed_after_the_first_failure, daemon=True)
        watcher.start()
        member.start()  # the member's own start, as a restart of a killed member is (not only the ring's)
        watcher.join()
        ring.wait_converged()
        launches = [line for line in member.log_file.read_text().splitlines() if line.startswith("=== start")]
        assert len(launches) == 2  # one that found no seed, one that joined
        assert "-Dcassandra.ring_delay_ms=0" in launches[0]
        assert f"-Dcassandra.ring_delay_ms={SECOND_START_RING_DELAY_MS}" in launches[1]  # after the 0: it wins
        assert ring_status(seed.nodetool("status")) == {"127.0.0.3": "UN", "127.0.0.4": "UN"}
    finally:
        if not resumed.is_set() and seed.pid():
            os.kill(seed.pid(), signal.SIGCONT)
        resumed.set()
        ring.stop()
