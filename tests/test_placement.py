"""The placement of each output (resources/stores/local_copy.py, asgard_dagster/placement.py), in
real Dagster runs against the local Cassandra node: on the multiprocess executor the outputs whose
readers share the producer's host are kept there too and read from that copy, the ring still holds
every one, a changed or cut-short copy falls back to the ring with the right bytes, the output's own
choice wins, and a forced producer-local its readers cannot use fails before anything is written."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest
from dagster import DagsterInstance, execute_job, job, op, reconstructable

from asgard.resources.stores import ObjectKey
from asgard.resources.stores.cql import CassandraObjectStore
from asgard.resources.stores.local_copy import LocalCopies

from .forkserver_steps import forkserver_with_this_environment
from .placement_jobs import misnamed_placement_job, placement_job, unservable_placement_job, values

pytestmark = pytest.mark.usefixtures("forked_steps")


def _metadata(result, kind: str, step: str) -> dict:
    """The metadata of ``step``'s one ``kind`` event (HANDLED_OUTPUT, LOADED_INPUT)."""
    [event] = [e for e in result.all_events if e.event_type_value == kind and e.step_key == step]
    return {k: getattr(v, "value", v) for k, v in event.event_specific_data.metadata.items()}


def test_readers_on_the_producers_host_read_its_local_copy_and_the_ring_keeps_every_output(
        cassandra_node, dagster_instance, tmp_path, monkeypatch):
    monkeypatch.setenv("ASGARD_HOME", str(tmp_path / "host"))  # this host's root: its copies, its own
    forkserver_with_this_environment()
    with execute_job(reconstructable(placement_job), instance=dagster_instance) as result:
        assert result.success
        run_id = result.run_id
        sums = {step: result.output_for_node(step) for step in
                ("total_a", "total_b", "total_ring", "total_single", "total_flipped", "total_truncated")}
        out = {s: _metadata(result, "HANDLED_OUTPUT", s) for s in
               ("shared", "forced_ring", "single", "flipped", "truncated", "leaf_forced_local")}
        read = {s: _metadata(result, "LOADED_INPUT", s) for s in sums}
    expected = {"total_a": values(1).sum(), "total_b": values(1).sum(), "total_ring": values(2).sum(),
                "total_single": values(6).sum(), "total_flipped": values(3).sum(), "total_truncated": values(4).sum()}
    assert sums == pytest.approx(expected)
    # auto: the multiprocess executor runs the readers on the producer's host; the metadata says so
    assert out["shared"]["placement"] == "producer-local", out["shared"]
    assert "multiprocess executor runs its 2 reader(s)" in out["shared"]["placement_reason"]
    for step in ("total_a", "total_b"):
        assert read[step]["read_from"] == "local copy" and read[step]["local_copy_reads"] == 1, read[step]
    # one reader on the host: the copy would cost the put more than the read saves, so the ring
    assert out["single"]["placement"] == "ring", out["single"]
    assert "runs its 1 reader(s) on the producer's host, but a copy costs the put" in out["single"]["placement_reason"]
    assert "read_from" not in read["total_single"], read["total_single"]
    # the output's own choice wins: over auto's producer-local, and over auto's ring for an unread output
    forced = out["forced_ring"]
    assert forced["placement"] == "ring" and "chosen by the caller" in forced["placement_reason"], forced
    assert "read_from" not in read["total_ring"], read["total_ring"]  # nothing local named: the ring, as before
    assert out["leaf_forced_local"]["placement"] == "producer-local", out["leaf_forced_local"]
    assert "no step of this job reads it" in out["leaf_forced_local"]["placement_reason"]
    # a changed byte and a cut-short copy: the ring served the right bytes, the fallback counted
    for step, why in (("total_flipped", "mismatch"), ("total_truncated", "partial")):
        assert read[step]["read_from"] == "ring" and read[step]["local_copy_fallback"] == why, read[step]
    assert read["total_flipped"]["local_copy_fallbacks"] == 1, read["total_flipped"]

    # the ring is the source of truth: a store that never reads local copies finds every output whole
    ring = CassandraObjectStore(keyspace="asgard_test", local_reads=False)
    for step, seed in (("shared", 1), ("forced_ring", 2), ("flipped", 3), ("truncated", 4), ("leaf_forced_local", 5)):
        value, got = ring.get(ObjectKey.for_run(run_id, step, "result"))
        assert got.source == "ring" and np.array_equal(value, values(seed)), step
    # a reader on another host (another ASGARD_HOME) finds no copy of its own and reads the ring
    monkeypatch.setenv("ASGARD_HOME", str(tmp_path / "other-host"))
    elsewhere = CassandraObjectStore(keyspace="asgard_test")
    value, got = elsewhere.get(ObjectKey.for_run(run_id, "shared", "result"))
    assert got.source == "ring" and got.fallback is None and np.array_equal(value, values(1))
    # the run's purge removes this host's copies with its rows
    monkeypatch.setenv("ASGARD_HOME", str(tmp_path / "host"))
    here = CassandraObjectStore(keyspace="asgard_test")
    copy = here.local_copies.path(ObjectKey.for_run(run_id, "shared", "result"))
    assert copy.is_file()
    here.purge_scope(f"run/{run_id}")
    assert not copy.parent.exists() and here.list_paths(f"run/{run_id}") == []


@pytest.mark.parametrize("store_mib_s, placement, why", [
    (100.0, "producer-local", "1 read(s) through a copy pay for it from 1 (reads through the store at 100 MiB/s"),
    (1500.0, "ring", "a copy costs the put about what 7 reads through it save, and it has 1 (reads through the "
                     "store at 1500 MiB/s"),
    (4000.0, "ring", "a copy saves its readers nothing (reads through the store at 4000 MiB/s"),
])
def test_a_one_reader_edge_gets_a_copy_where_the_stores_measured_reads_are_slow_enough(
        cassandra_node, dagster_instance, tmp_path, monkeypatch, store_mib_s, placement, why):
    """``auto`` weighs a copy by the store's reads as this host's processes measured them (a slow
    link or a busy ring: one reader pays for it; an idle loopback node: it takes seven); reads
    through a copy are not the store's speed and leave the measure as it was."""
    from asgard.resources.stores.codec_choice import ThroughputRecord

    from .placement_jobs import one_reader_job

    monkeypatch.setenv("ASGARD_HOME", str(tmp_path / "host"))
    store_id = CassandraObjectStore(keyspace="asgard_test").identity()
    ThroughputRecord().observe(store_id, "read", 64 << 20, 64 / store_mib_s)  # an earlier step's read, as measured
    forkserver_with_this_environment()
    with execute_job(reconstructable(one_reader_job), instance=dagster_instance) as result:
        assert result.success
        out = _metadata(result, "HANDLED_OUTPUT", "single")
        read = _metadata(result, "LOADED_INPUT", "total")
    assert out["placement"] == placement and why in out["placement_reason"], out
    assert read.get("read_from", "ring") == ("local copy" if placement == "producer-local" else "ring"), read
    measured = ThroughputRecord().read_mib_s(store_id)
    if placement == "producer-local":  # its one read came from the copy: not folded into the store's
        assert measured == pytest.approx(store_mib_s)
    else:  # read through the store: folded in
        assert measured != pytest.approx(store_mib_s)


def test_a_forced_producer_local_its_readers_cannot_use_fails_before_anything_is_written(cassandra_node,
                                                                                      cassandra_store):
    from asgard_dagster import OutputSettingError, PlacementCannotServeError

    with DagsterInstance.ephemeral() as instance:
        result = execute_job(reconstructable(unservable_placement_job), instance=instance, raise_on_error=False)
        assert not result.success
        [failure] = [e for e in result.all_events if e.is_step_failure]
        text = failure.step_failure_data.error.to_string()
        assert PlacementCannotServeError.__name__ in text and "elsewhere executor" in text, text
        assert cassandra_store.list_paths(f"run/{result.run_id}") == []
        # a value that is not a placement: OutputSettingError, as for a codec
        result = misnamed_placement_job.execute_in_process(instance=instance, raise_on_error=False)
        assert not result.success
        text = [e for e in result.all_events if e.is_step_failure][0].step_failure_data.error.to_string()
        assert OutputSettingError.__name__ in text and "'nearby'" in text and "producer-local" in text, text
        assert cassandra_store.list_paths(f"run/{result.run_id}") == []


@pytest.mark.fast  # no server: definitions only
def test_on_celery_only_a_reader_pinned_to_the_producers_queue_shares_its_host():
    """dagster-celery's placement of steps, read from the job's definition (no worker runs)."""
    from dagster import Out
    from dagster_celery import celery_executor

    from asgard_dagster import PlacementCannotServeError, check_job_placements
    from asgard_dagster.placement import readers_on_producer_host

    def celery_job(reader_queue: str | None):
        @op(tags={"dagster-celery/queue": "asgard-h1"}, out=Out(metadata={"asgard/placement": "producer-local"}))
        def produce() -> int:
            return 1

        @op(tags={"dagster-celery/queue": reader_queue} if reader_queue else {})
        def consume(value: int) -> int:
            return value

        @job(executor_def=celery_executor, name=f"celery_{reader_queue or 'untagged'}".replace("-", "_"))
        def the_job():
            consume(produce())

        return the_job

    pinned, apart, untagged = celery_job("asgard-h1"), celery_job("asgard-h2"), celery_job(None)
    check_job_placements(pinned)  # the reader is routed to the producer's queue: the copy serves
    assert readers_on_producer_host(pinned, "produce", "result")[0] is True
    for the_job, queue in ((apart, "'asgard-h2'"), (untagged, "'dagster'")):
        with pytest.raises(PlacementCannotServeError) as caught:
            check_job_placements(the_job)
        error = caught.value
        assert (error.output, error.key, error.value) == ("output 'result' of op 'produce'", "asgard/placement",
                                                          "producer-local")
        assert queue in error.why and "dagster-celery/queue" in error.what_to_do, error
        assert readers_on_producer_host(the_job, "produce", "result")[0] is False



@pytest.mark.fast  # no server: definitions only
def test_on_celery_the_io_managers_producer_local_for_readers_on_any_host_is_refused():
    """The IO manager's ``placement="producer-local"`` is checked like an output's own metadata,
    for the outputs that IO manager stores (an output with metadata of its own keeps it)."""
    from dagster import Out
    from dagster_celery import celery_executor

    from asgard_dagster import PlacementCannotServeError, check_job_placements

    @op
    def produce() -> int:
        return 1

    @op(out=Out(io_manager_key="elsewhere"))
    def other() -> int:
        return 2

    @op(out=Out(metadata={"asgard/placement": "ring"}))
    def keeps_its_own() -> int:
        return 3

    @op
    def consume(a: int, b: int, c: int) -> int:
        return a + b + c

    @job(executor_def=celery_executor)
    def untagged():
        consume(produce(), other(), keeps_its_own())

    check_job_placements(untagged, io_manager_key="io_manager", io_manager_placement="ring")
    with pytest.raises(PlacementCannotServeError) as caught:
        check_job_placements(untagged, io_manager_key="io_manager", io_manager_placement="producer-local")
    error = caught.value
    assert (error.output, error.key, error.value) == ("output 'result' of op 'produce'", "placement", "producer-local")
    assert "an IO manager whose field 'placement'" in str(error) and "'dagster'" in error.why, error
    # only what that IO manager stores ('other' goes to another one); 'keeps_its_own' names its own placement
    with pytest.raises(PlacementCannotServeError) as caught:
        check_job_placements(untagged, io_manager_key="elsewhere", io_manager_placement="producer-local")
    assert caught.value.output == "output 'result' of op 'other'"


@pytest.mark.fast  # no server: definitions only
def test_copies_older_than_the_ttl_and_dead_producers_temporary_files_are_swept(tmp_path, monkeypatch):
    monkeypatch.setenv("ASGARD_HOME", str(tmp_path))
    copies = LocalCopies("a store", ttl_seconds=3600)
    old, fresh, orphan = (copies.root / "run%2Fr1" / name for name in ("old.copy", "fresh.copy", ".tmp-x"))
    old.parent.mkdir(parents=True)
    for path in (old, fresh, orphan):
        path.write_bytes(b"x")
    for path in (old, orphan):
        os.utime(path, (time.time() - 7200, time.time() - 7200))
    assert copies.sweep() == 2 and fresh.exists() and not old.exists() and not orphan.exists()
