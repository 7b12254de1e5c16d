"""Every Dagster input and output shape through real runs (``materialize`` and ``execute_job``), on
the real Cassandra: partitions one to one, time windows with offsets, all partitions, multi-partitions,
partition ranges, graph-backed assets and multi-assets, dynamic outputs, and the op and asset contexts.

The key rules are Dagster's own ``UPathIOManager``'s (the base of dagster-aws's S3 manager): an asset
lives under its key's path with the partition key appended, a multi-partition key as its dimension
keys sorted by dimension name and joined by ``/``; one partition loads as the value, several as a dict
by partition key, none as ``None``; ``allow_missing_partitions`` input metadata skips missing ones.
"""

import uuid

import pytest
from dagster import (
    AllPartitionMapping, AssetExecutionContext, AssetIn, AssetKey, AssetOut, DagsterInstance, DailyPartitionsDefinition,
    DynamicOut, DynamicOutput, DynamicPartitionsDefinition, MultiPartitionKey, MultiPartitionsDefinition,
    OpExecutionContext, Out, StaticPartitionsDefinition, TimeWindowPartitionMapping, asset, graph_asset, job,
    build_input_context, materialize, multi_asset, op,
)

from asgard_dagster import CassandraIOManager, CassandraResource
from asgard_dagster.io_manager import InputWithoutSourceError, OutputForSeveralPartitionsError
from asgard.resources.stores import ObjectKey, ObjectMissingError
from tests.conftest import TEST_KEYSPACE

pytestmark = pytest.mark.timeout(600)

DAYS = DailyPartitionsDefinition(start_date="2026-11-01", end_date="2026-11-08")


@pytest.fixture
def io_manager(cassandra_node):
    return CassandraIOManager(cassandra=CassandraResource(keyspace=TEST_KEYSPACE))


@pytest.fixture
def prefix():
    """An asset key prefix of this test alone (asset scopes are not purged with a run)."""
    return f"shapes_{uuid.uuid4().hex[:8]}"


def _materialize(assets, io_manager, instance, **kwargs):
    result = materialize(assets, resources={"io_manager": io_manager}, instance=instance, **kwargs)
    assert result.success
    return result


def test_time_window_with_offset_loads_three_days_as_a_dict(io_manager, prefix):
    @asset(key_prefix=[prefix], partitions_def=DAYS)
    def daily(context: AssetExecutionContext) -> dict:
        return {"day": context.partition_key}

    @asset(key_prefix=[prefix], partitions_def=DAYS,
           ins={"daily": AssetIn(key=AssetKey([prefix, "daily"]),
                                 partition_mapping=TimeWindowPartitionMapping(start_offset=-2))})
    def rolling(context: AssetExecutionContext, daily: dict) -> list:
        return sorted(v["day"] for v in daily.values())

    instance = DagsterInstance.ephemeral()
    for day in ("2026-11-02", "2026-11-03", "2026-11-04"):
        _materialize([daily], io_manager, instance, partition_key=day)
    result = _materialize([daily, rolling], io_manager, instance, partition_key="2026-11-04",
                          selection=[rolling])
    assert result.asset_value(AssetKey([prefix, "rolling"])) == ["2026-11-02", "2026-11-03", "2026-11-04"]
    # the window's input is a dict keyed by partition, as Dagster's UPathIOManager returns it
    loaded = io_manager.store().get(ObjectKey.for_asset([prefix, "rolling"], "2026-11-04"))[0]
    assert loaded == ["2026-11-02", "2026-11-03", "2026-11-04"]


def test_window_reaching_before_the_first_partition_loads_what_exists(io_manager, prefix):
    @asset(key_prefix=[prefix], partitions_def=DAYS)
    def daily(context: AssetExecutionContext) -> str:
        return context.partition_key

    @asset(key_prefix=[prefix], partitions_def=DAYS,
           ins={"daily": AssetIn(key=AssetKey([prefix, "daily"]),
                                 partition_mapping=TimeWindowPartitionMapping(start_offset=-2))})
    def rolling(daily: dict) -> list:
        return sorted(daily)

    instance = DagsterInstance.ephemeral()
    for day in ("2026-11-01", "2026-11-02"):
        _materialize([daily], io_manager, instance, partition_key=day)
    # the window of 11-02 is 10-31..11-02; Dagster clips it to the partitions that exist: two
    result = _materialize([daily, rolling], io_manager, instance, partition_key="2026-11-02", selection=[rolling])
    assert result.asset_value(AssetKey([prefix, "rolling"])) == ["2026-11-01", "2026-11-02"]


def test_a_self_dependent_asset_reads_none_before_its_first_partition(io_manager, prefix):
    """A daily asset reading its own previous day (Dagster's self-dependency): the first day's input
    maps to no partition and reads as None, as UPathIOManager returns it; the next day's reads it."""
    @asset(key_prefix=[prefix], partitions_def=DAYS,
           ins={"running": AssetIn(key=AssetKey([prefix, "running"]),
                                   partition_mapping=TimeWindowPartitionMapping(start_offset=-1, end_offset=-1))})
    def running(running: int | None) -> int:
        return 1 if running is None else running + 1

    instance = DagsterInstance.ephemeral()
    for day, expected in (("2026-11-01", 1), ("2026-11-02", 2)):
        result = _materialize([running], io_manager, instance, partition_key=day)
        assert result.asset_value(AssetKey([prefix, "running"])) == expected


def test_an_asset_reading_a_dynamically_partitioned_one_stores_its_output(io_manager, prefix):
    """The store's reader count comes from the job's topology, which lists a dynamic partitions
    definition's keys from the instance: an unpartitioned asset over all of them stores its output."""
    names = DynamicPartitionsDefinition(name=f"{prefix}_names")

    @asset(key_prefix=[prefix], partitions_def=names)
    def per_name(context: AssetExecutionContext) -> str:
        return context.partition_key.upper()

    @asset(key_prefix=[prefix], ins={"per_name": AssetIn(key=AssetKey([prefix, "per_name"]))})
    def everyone(per_name: dict) -> list:
        return sorted(per_name.values())

    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(names.name, ["ann", "bo"])
    for name in ("ann", "bo"):
        _materialize([per_name], io_manager, instance, partition_key=name)
    result = _materialize([per_name.to_source_asset(), everyone], io_manager, instance)
    assert result.asset_value(AssetKey([prefix, "everyone"])) == ["ANN", "BO"]


def test_an_input_with_nothing_stored_behind_it_fails_saying_what_to_do(io_manager):
    """An input context with neither an asset key nor an upstream output (``build_input_context``,
    as Dagster's docs test an IO manager): a typed error naming the input, not an AttributeError."""
    with pytest.raises(InputWithoutSourceError, match="Input 'x' of op .* has no upstream output and no asset key"):
        io_manager.load_input(build_input_context(name="x"))


def test_all_partitions_into_an_unpartitioned_asset(io_manager, prefix):
    colors = StaticPartitionsDefinition(["red", "green", "blue"])

    @asset(key_prefix=[prefix], partitions_def=colors)
    def shade(context: AssetExecutionContext) -> int:
        return len(context.partition_key)

    @asset(key_prefix=[prefix], ins={"shade": AssetIn(key=AssetKey([prefix, "shade"]),
                                                      partition_mapping=AllPartitionMapping())})
    def palette(shade: dict) -> dict:
        return dict(shade)

    instance = DagsterInstance.ephemeral()
    for c in ("red", "green", "blue"):
        _materialize([shade], io_manager, instance, partition_key=c)
    result = _materialize([shade, palette], io_manager, instance, selection=[palette])
    assert result.asset_value(AssetKey([prefix, "palette"])) == {"red": 3, "green": 5, "blue": 4}
    store = io_manager.store()
    assert store.list_paths(f"asset/{prefix}/shade") == ["blue", "green", "red"]
    assert store.list_paths(f"asset/{prefix}/palette") == ["__unpartitioned__"]


def test_multi_partitions_use_dimension_keys_sorted_by_dimension_name(io_manager, prefix):
    parts = MultiPartitionsDefinition({"date": DailyPartitionsDefinition(start_date="2026-11-01", end_date="2026-11-03"),
                                       "color": StaticPartitionsDefinition(["red", "blue"])})

    @asset(key_prefix=[prefix], partitions_def=parts)
    def cell(context: AssetExecutionContext) -> str:
        keys = context.partition_key.keys_by_dimension
        return f"{keys['color']}@{keys['date']}"

    @asset(key_prefix=[prefix], partitions_def=parts, ins={"cell": AssetIn(key=AssetKey([prefix, "cell"]))})
    def cell_upper(cell: str) -> str:
        return cell.upper()

    instance = DagsterInstance.ephemeral()
    key = MultiPartitionKey({"date": "2026-11-02", "color": "red"})
    _materialize([cell, cell_upper], io_manager, instance, partition_key=key)
    store = io_manager.store()
    # as UPathIOManager: "color" sorts before "date"
    assert store.list_paths(f"asset/{prefix}/cell") == ["red/2026-11-02"]
    assert store.get(ObjectKey(f"asset/{prefix}/cell_upper", "red/2026-11-02"))[0] == "RED@2026-11-02"


def test_partition_range_in_one_run_reads_every_partition(io_manager, prefix):
    @asset(key_prefix=[prefix], partitions_def=DAYS)
    def daily(context: AssetExecutionContext) -> str:
        return context.partition_key

    @asset(key_prefix=[prefix], ins={"daily": AssetIn(key=AssetKey([prefix, "daily"]))})
    def week(daily: dict) -> list:
        return sorted(daily)

    instance = DagsterInstance.ephemeral()
    for day in ("2026-11-01", "2026-11-02", "2026-11-03"):
        _materialize([daily], io_manager, instance, partition_key=day)
    # an unpartitioned downstream of a partitioned asset depends on all partitions; the missing
    # ones (11-04..11-07) are allowed to be absent only when the input says so
    with pytest.raises(ObjectMissingError, match="2026-11-04"):
        materialize([daily, week], resources={"io_manager": io_manager}, instance=instance, selection=[week])

    @asset(key_prefix=[prefix], name="week",
           ins={"daily": AssetIn(key=AssetKey([prefix, "daily"]), metadata={"allow_missing_partitions": True})})
    def week_tolerant(daily: dict) -> list:
        return sorted(daily)

    result = _materialize([daily, week_tolerant], io_manager, instance, selection=[week_tolerant])
    assert result.asset_value(AssetKey([prefix, "week"])) == ["2026-11-01", "2026-11-02", "2026-11-03"]


def test_an_output_for_several_partitions_is_refused_with_what_to_do(io_manager, prefix):
    from dagster import BackfillPolicy

    @asset(key_prefix=[prefix], partitions_def=DAYS, backfill_policy=BackfillPolicy.single_run())
    def daily(context: AssetExecutionContext) -> str:
        return "one value for a range"

    with pytest.raises(OutputForSeveralPartitionsError, match="3 partitions.*multi-run backfill"):
        materialize([daily], resources={"io_manager": io_manager}, instance=DagsterInstance.ephemeral(),
                    tags={"dagster/asset_partition_range_start": "2026-11-01",
                          "dagster/asset_partition_range_end": "2026-11-03"})


def test_graph_backed_asset_and_multi_asset(io_manager, prefix):
    @op
    def fetch() -> list:
        return [3, 1, 2]

    @op
    def order(values: list) -> list:
        return sorted(values)

    @graph_asset(key_prefix=[prefix])
    def ordered() -> list:
        return order(fetch())

    @multi_asset(outs={"low": AssetOut(key_prefix=[prefix]), "high": AssetOut(key_prefix=[prefix])})
    def split(context: OpExecutionContext, ordered: list):
        return ordered[0], ordered[-1]

    result = _materialize([ordered, split], io_manager, DagsterInstance.ephemeral())
    assert result.asset_value(AssetKey([prefix, "low"])) == 1 and result.asset_value(AssetKey([prefix, "high"])) == 3
    store = io_manager.store()
    for name, value in (("ordered", [1, 2, 3]), ("low", 1), ("high", 3)):
        assert store.get(ObjectKey.for_asset([prefix, name]))[0] == value
    # the graph's inner op output is a run output, under the run's scope
    inner = store.list_paths(f"run/{result.run_id}")
    assert inner == [f"{prefix}__ordered.fetch/result"]
    io_manager.purge_run(result.run_id)


def test_dynamic_outputs_and_fan_in_through_a_job(io_manager):
    @op(out=DynamicOut())
    def scatter():
        for key in ("a_1", "B_2", "c__3"):
            yield DynamicOutput(key.lower(), mapping_key=key)

    @op
    def shout(context: OpExecutionContext, s: str) -> str:
        return s.upper()

    @op
    def gather(parts: list) -> str:
        return ",".join(sorted(parts))

    @job(resource_defs={"io_manager": io_manager})
    def shapes_dynamic():
        gather(scatter().map(shout).collect())

    result = shapes_dynamic.execute_in_process(instance=DagsterInstance.ephemeral())
    assert result.success and result.output_for_node("gather") == "A_1,B_2,C__3"
    store = io_manager.store()
    assert store.list_paths(f"run/{result.run_id}") == sorted([
        "scatter/result/a_1", "scatter/result/B_2", "scatter/result/c__3",
        "shout[a_1]/result", "shout[B_2]/result", "shout[c__3]/result", "gather/result"])
    io_manager.purge_run(result.run_id)


def test_workspace_assets_word_count_map_side_multiprocess_then_reduce(cassandra_node, dagster_instance):
    """The workspace's word-count assets as a user runs them: each split's partition of the map side
    through ``execute_job`` on the multiprocess executor, then the reduce side and a rolling window
    (several upstream partitions into one) through ``materialize``."""
    from dagster import execute_job, reconstructable

    from asgard.pipelines.assets import ASSETS, SPLITS, word_counts_rolling
    from asgard.pipelines.word_count import reference_counts
    from tests.jobs import word_count_map_assets_job

    io_manager = CassandraIOManager(cassandra=CassandraResource(keyspace=TEST_KEYSPACE))
    splits = SPLITS.get_partition_keys()
    for split in splits:
        with execute_job(reconstructable(word_count_map_assets_job), instance=dagster_instance,
                         tags={"dagster/partition": split}) as result:
            assert result.success
            assert {e.step_key for e in result.get_step_success_events()} == {"corpus_split", "split_word_counts"}
    store = io_manager.store()
    assert store.list_paths("asset/split_word_counts") == splits
    result = _materialize(ASSETS, io_manager, dagster_instance, selection=["word_counts"])
    from asgard.pipelines.assets import CORPUS_SCALE
    assert result.asset_value("word_counts") == dict(reference_counts(CORPUS_SCALE))
    result = _materialize(ASSETS, io_manager, dagster_instance, selection=[word_counts_rolling], partition_key="split_3")
    assert result.asset_value("word_counts_rolling")["splits"] == ["split_1", "split_2", "split_3"]
    result = _materialize(ASSETS, io_manager, dagster_instance, selection=[word_counts_rolling], partition_key="split_0")
    assert result.asset_value("word_counts_rolling")["splits"] == ["split_0"]


def test_workspace_daily_assets_three_day_window(cassandra_node, dagster_instance):
    """The workspace's time-window assets: ``sample_3day`` of a day reads that day and the two
    before it, each as stored by ``daily_sample``; on the first day, that day alone."""
    import numpy as np

    from asgard.pipelines.assets import ASSETS, daily_sample, sample_3day

    io_manager = CassandraIOManager(cassandra=CassandraResource(keyspace=TEST_KEYSPACE))
    days = ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]
    stored = {}
    for day in days:
        result = _materialize(ASSETS, io_manager, dagster_instance, selection=[daily_sample], partition_key=day)
        stored[day] = result.asset_value("daily_sample")
    result = _materialize(ASSETS, io_manager, dagster_instance, selection=[sample_3day], partition_key="2026-11-04")
    window = result.asset_value("sample_3day")
    assert window["days"] == ["2026-11-02", "2026-11-03", "2026-11-04"]
    expected = np.concatenate([stored[d] for d in window["days"]])
    assert window["values"] == expected.size and window["mean"] == float(expected.mean())
    result = _materialize(ASSETS, io_manager, dagster_instance, selection=[sample_3day], partition_key="2026-11-01")
    assert result.asset_value("sample_3day")["days"] == ["2026-11-01"]
    assert io_manager.store().list_paths("asset/sample_3day") == ["2026-11-01", "2026-11-04"]


def test_asset_run_reexecuted_from_failure_reads_the_parent_runs_output(cassandra_node, dagster_instance,
                                                                          tmp_path, monkeypatch):
    """An asset job on the multiprocess executor fails in its second asset; re-executed from
    failure, it runs that asset alone, which reads what the first run stored."""
    from dagster import ReexecutionOptions, execute_job, reconstructable

    from tests.jobs import flaky_assets_job

    flag = tmp_path / "fail-once"
    flag.write_text("1")
    monkeypatch.setenv("ASGARD_TEST_FAIL_FLAG", str(flag))
    with execute_job(reconstructable(flaky_assets_job), instance=dagster_instance) as first:
        assert not first.success
        assert {e.step_key for e in first.get_step_success_events()} == {"flaky_upstream"}
        parent = first.run_id
    flag.unlink()
    options = ReexecutionOptions.from_failure(parent, dagster_instance)
    with execute_job(reconstructable(flaky_assets_job), instance=dagster_instance,
                     reexecution_options=options) as second:
        assert second.success
        assert {e.step_key for e in second.get_step_success_events()} == {"flaky_downstream"}
        assert second.output_for_node("flaky_downstream") == float(sum(range(50_000)))
