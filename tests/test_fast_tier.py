"""The fast tier: the adapters' key layout, partition rules and reference format, through real
Dagster runs and Airflow's XCom class on the local store. No server; seconds
(``bash scripts/test.sh --fast``, or ``pytest -m fast``)."""
from __future__ import annotations

import dagster as dg
import pytest

from asgard_dagster import LocalIOManager
from asgard_dagster.io_manager import OutputForSeveralPartitionsError

pytestmark = pytest.mark.fast


@pytest.fixture
def io_manager(tmp_path) -> LocalIOManager:
    return LocalIOManager(base_dir=str(tmp_path / "objects"))


def test_an_op_output_lives_at_its_run_step_output_and_mapping_key(io_manager):
    @dg.op(out=dg.DynamicOut())
    def scatter():
        for i in range(3):
            yield dg.DynamicOutput(list(range(i + 1)), mapping_key=f"part_{i}")

    @dg.op(out={"total": dg.Out(), "count": dg.Out()})
    def gather(parts):
        return sum(map(sum, parts)), len(parts)

    @dg.job
    def layout():
        gather(scatter().collect())

    result = layout.execute_in_process(resources={"io_manager": io_manager})
    assert result.success
    store = io_manager.store()
    assert store.list_paths(f"run/{result.run_id}") == sorted(
        ["scatter/result/part_0", "scatter/result/part_1", "scatter/result/part_2", "gather/total", "gather/count"])
    total = [e for e in result.all_events if e.event_type_value == "HANDLED_OUTPUT" and e.step_key == "gather"][0]
    assert total.event_specific_data.metadata["dagster/uri"].value.startswith("file://")
    assert result.output_for_node("gather", "total") == 0 + 1 + 3  # [0], [0, 1], [0, 1, 2]
    io_manager.purge_run(result.run_id)
    assert store.list_paths(f"run/{result.run_id}") == []


COLORS = dg.StaticPartitionsDefinition(["red", "blue"])
SIZES = dg.StaticPartitionsDefinition(["s", "m"])
GRID = dg.MultiPartitionsDefinition({"size": SIZES, "color": COLORS})
DAYS = dg.DailyPartitionsDefinition(start_date="2026-11-01", end_date="2026-11-05")


@dg.asset(partitions_def=GRID)
def tile(context) -> str:
    return f"{context.partition_key.keys_by_dimension}"


@dg.asset(partitions_def=DAYS, backfill_policy=dg.BackfillPolicy.single_run())
def day(context) -> int:
    return int(context.partition_key_range.start[-2:])


@dg.asset(partitions_def=DAYS, ins={"day": dg.AssetIn(partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-2))})
def window(day: dict) -> list:
    return sorted(day.items())


@dg.asset(partitions_def=DAYS, ins={"day": dg.AssetIn(partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-2),
                                                       metadata={"allow_missing_partitions": True})})
def window_allowing_gaps(day: dict) -> list:
    return sorted(day)


def test_a_multi_partition_key_is_its_dimension_keys_sorted_by_dimension_name(io_manager):
    key = dg.MultiPartitionKey({"size": "m", "color": "red"})
    assert dg.materialize([tile], partition_key=key, resources={"io_manager": io_manager}).success
    # "color" sorts before "size", whatever order the dimensions were declared in (UPathIOManager's rule)
    assert io_manager.store().list_paths("asset/tile") == ["red/m"]


def test_a_window_of_partitions_loads_as_a_dict_and_a_gap_fails_unless_allowed(io_manager):
    resources = {"io_manager": io_manager}
    for d in ("2026-11-01", "2026-11-03"):
        assert dg.materialize([day], partition_key=d, resources=resources).success
    assert io_manager.store().list_paths("asset/day") == ["2026-11-01", "2026-11-03"]
    result = dg.materialize([day, window], selection=[window], partition_key="2026-11-03", resources=resources,
                            raise_on_error=False)  # 2026-11-02 was never materialized
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    cause = failure.event_specific_data.error.cause
    assert cause.cls_name == "ObjectMissingError" and "asset/day/2026-11-02" in cause.message
    result = dg.materialize([day, window_allowing_gaps], selection=[window_allowing_gaps],
                            partition_key="2026-11-03", resources=resources)
    assert result.asset_value("window_allowing_gaps") == ["2026-11-01", "2026-11-03"]
    assert dg.materialize([day], partition_key="2026-11-02", resources=resources).success
    result = dg.materialize([day, window], selection=[window], partition_key="2026-11-03", resources=resources)
    assert result.asset_value("window") == [("2026-11-01", 1), ("2026-11-02", 2), ("2026-11-03", 3)]


def test_one_output_for_several_partitions_is_refused_before_anything_is_stored(io_manager):
    with pytest.raises(OutputForSeveralPartitionsError, match="multi-run backfill"):
        dg.materialize([day], resources={"io_manager": io_manager}, tags={
            "dagster/asset_partition_range_start": "2026-11-01", "dagster/asset_partition_range_end": "2026-11-02"})
    assert io_manager.store().list_paths("asset/day") == []
