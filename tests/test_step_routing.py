"""Which steps the host-routed celery executor sends to their producer's host, read from jobs'
definitions (the apps' and small ones), and what the IO manager's placement makes of it; the
routing itself runs on the emulated hosts in tests/test_celery_hosts.py."""
from __future__ import annotations

import dagster as dg
import pytest

from asgard_dagster.placement import executor_kind, readers_on_producer_host
from asgard_dagster.step_routing import HostQueuesError, PollIntervalError, StepRouter, followed_producers, host_routed_celery_executor

pytestmark = pytest.mark.fast

ROUTED = host_routed_celery_executor.configured({"host_queues": ["h1", "h2", "h3"]}, name="routed")


@dg.op(out={"parts": dg.DynamicOut()})
def scatter():
    for n in range(3):
        yield dg.DynamicOutput(n, mapping_key=f"k{n}")


@dg.op
def table():
    return 1


@dg.op
def first(x):
    return x


@dg.op
def second(x, t):
    return x + t


@dg.op(tags={"dagster-celery/queue": "h2"})
def pinned(x):
    return x


@dg.op
def gather(xs: list):
    return sum(xs)


@dg.op(ins={"start": dg.In(dg.Nothing), "x": dg.In()})
def after(x):
    return x


@dg.job(executor_def=host_routed_celery_executor.configured({"host_queues": []}, name="no_queues"))
def unroutable():
    first(table())


@dg.job(executor_def=host_routed_celery_executor.configured({"host_queues": ["h1"], "poll_interval_seconds": 0.0},
                                                            name="never_polls"))
def never_polls():
    first(table())


def test_followers_are_the_readers_of_a_producer_alone_in_its_mapping():
    @dg.job(executor_def=ROUTED)
    def chain():
        t = table()
        firsts = scatter().map(first)
        gather(firsts.map(lambda x: second(x, t)).collect())

    # second follows first (the only op reading it, one instance per key); first reads the scatter
    # (a dynamic output: its instances spread), table is read by every second (a broadcast)
    assert followed_producers(chain) == {"second": "first"}
    assert executor_kind(chain) == "celery_host_routed"
    same, why = readers_on_producer_host(chain, "first", "result")
    assert same is True and "sends its reader second to the host that ran first" in why
    assert readers_on_producer_host(chain, "table", "result")[0] is False  # second's instances: any host

    @dg.job(executor_def=ROUTED)
    def tagged():
        pinned(first(table()))

    # a reader with its own queue tag keeps it
    assert followed_producers(tagged) == {"first": "table"}


def test_a_reader_of_two_producers_alone_follows_neither_and_a_nothing_input_reads_nothing():
    @dg.job(executor_def=ROUTED)
    def two_parents():
        second(first.alias("a")(table()), first.alias("b")(table.alias("t2")()))

    assert followed_producers(two_parents) == {"a": "table", "b": "t2"}

    @dg.job(executor_def=ROUTED)
    def ordered():
        after(start=first.alias("a")(table()), x=first.alias("b")(table.alias("t2")()))

    # after waits for a (Nothing) and reads b: it follows b; a has no reader
    assert followed_producers(ordered) == {"a": "table", "b": "t2", "after": "b"}


def test_the_apps_followers():
    from asgard.pipelines.jobs import make_job

    followers = {app: followed_producers(make_job(app, "local")) for app in ("etl_columnar", "word_count")}
    assert followers == {"etl_columnar": {"join_customers": "filter_orders", "aggregate": "join_customers"},
                         "word_count": {}}


def test_the_router_sends_a_follower_where_its_producer_ran_and_nothing_else():
    router = StepRouter({"second": "first"}, ["h1", "h2"])
    router.ran("first[k0]", "dagster@h2")
    router.ran("first[k1]", "dagster@elsewhere")  # a worker whose host queue the executor may not use
    assert router.queue_for("second[k0]", "second", ["first[k0]", "table"], "dagster") == \
        ("h2", "follows first[k0], which ran there")
    assert router.queue_for("second[k1]", "second", ["first[k1]", "table"], "dagster")[0] == "dagster"
    assert router.queue_for("second[k2]", "second", ["first[k2]"], "dagster")[0] == "dagster"  # not run yet
    assert router.queue_for("table", "table", [], "dagster") == ("dagster", "no producer to follow")


def test_the_executor_needs_its_host_queues(tmp_path):
    # a run of it fails at the executor's start, saying what to give, before any step is sent
    with dg.DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        with pytest.raises(HostQueuesError, match="name at least one host queue") as raised:
            dg.execute_job(dg.reconstructable(unroutable), instance=instance)
        assert raised.value.host_queues == []
        (run,) = instance.get_runs()
        assert not instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)


def test_the_executor_refuses_a_poll_interval_that_is_not_positive(tmp_path):
    with dg.DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        with pytest.raises(PollIntervalError, match="give a positive number of seconds") as raised:
            dg.execute_job(dg.reconstructable(never_polls), instance=instance)
        assert raised.value.poll_interval_seconds == 0.0
        (run,) = instance.get_runs()
        assert not instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)
