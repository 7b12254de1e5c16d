"""Log analytics (asgard.pipelines.log_analytics; the data-heavy day's text): a real run on the
multiprocess executor against the local Cassandra node gets the result of one process, its log files
travel as text and its parsed tables as columns, and codec auto gives the two kinds of edge the codec
each pays for."""
from __future__ import annotations

import pytest

from asgard.pipelines import log_analytics as la
from asgard.pipelines.jobs import SMALL, run_app


def test_log_files_are_scattered_as_text_parsed_into_tables_and_summed_as_one_process_sums_them(
        cassandra_node, dagster_instance):
    sizes = SMALL["log_analytics"]
    run = run_app("log_analytics", "cassandra", instance=dagster_instance, **sizes)
    assert run.success
    want = la.expected_result(sizes["scale"], sizes["fanout"])
    assert {k: v for k, v in run.result.items() if k != "mean_latency_ms"} == \
        {k: v for k, v in want.items() if k != "mean_latency_ms"}
    assert run.result["mean_latency_ms"] == pytest.approx(want["mean_latency_ms"], rel=1e-9)
    assert run.result["groups"] == len(la.PATHS) * len(set(la.STATUSES))
    fanout = sizes["fanout"]
    # the scatter: each log file written once, read by its own parse; each table by its own summary
    assert sorted(w for w in run.writes if w[0] == "land_logs") == [("land_logs", "result")] * fanout
    parses = sorted((r[0], r[2]) for r in run.reads if r[0].startswith("parse_logs"))
    assert parses == [(f"parse_logs[p{p:03d}]", "land_logs") for p in range(fanout)]
    assert sorted(r[2] for r in run.reads if r[0] == "merge_traffic") == \
        [f"traffic_by_path[p{p:03d}]" for p in range(fanout)]
    assert len(run.writes) == 3 * fanout + 1 and len(run.reads) == 3 * fanout


@pytest.mark.fast  # no server: the codecs' trials on the pipeline's data
def test_a_log_file_and_its_parsed_table_each_get_the_codec_that_pays_for_them_on_a_cloud_link():
    """The same run's two kinds of edge at a store measured at 96 MB/s (the cloud profile's node on the
    day, docs/results/issue37-bench-day-cloud.txt), the codecs at a whole core: the text compresses as
    text does (LZ4 or zstd), the table's 8-byte columns after Blosc's byte shuffle. One codec for both
    edges would cost one of them."""
    from asgard.resources.stores.codec_choice import CpuShare, Throughput, choose_codec
    from asgard.resources.stores.serde import get_serializer

    raw = la.log_file(0.02, 1, 0, 0)
    table = la._parsed(raw)
    pickled = get_serializer("pickle5")
    cloud, alone = Throughput(96.0, 96.0, True), CpuShare(1.0, 1)
    text = choose_codec([memoryview(f) for f in pickled.dumps(raw)], readers=1, throughput=cloud, share=alone)
    columns = choose_codec([memoryview(f) for f in pickled.dumps(table)], readers=1, throughput=cloud, share=alone)
    assert text.codec in ("lz4", "zstd"), text.reason
    assert columns.codec == "blosc-lz4", columns.reason
    # the other edge's codec costs each of them more than its own (the model's seconds, the trials measured)
    assert text.expected_seconds["blosc-lz4"] > text.expected_seconds[text.codec] * 1.2, text.expected_seconds
    assert columns.expected_seconds[text.codec] > columns.expected_seconds["blosc-lz4"] * 1.2, columns.expected_seconds


@pytest.mark.fast  # no server
def test_a_log_file_that_travelled_as_text_parses_to_the_same_table():
    """Airflow's serde carries no bytes: a stock XCom backend's runs pass the file as str, and the DAG's
    parse task hands the op (its input typed bytes) the file's bytes again."""
    from asgard.pipelines.airflow_apps import _carried, _file_bytes, call_op

    raw = la.log_file(0.001, 2, 0, 1)
    carried = _carried(raw, {"tables": "pandas"})
    assert isinstance(carried, str) and _carried(raw, {}) is raw
    assert call_op(la.parse_logs, _file_bytes(carried)).equals(la._parsed(raw))


@pytest.mark.fast  # no server
def test_the_airflow_days_peer_passes_dataframes_for_every_app_with_tables():
    from asgard.pipelines.airflow_apps import TABLE_APPS
    from asgard_bench.day_airflow import PEER_CONF

    assert set(PEER_CONF) == set(TABLE_APPS) and all(c == {"tables": "pandas"} for c in PEER_CONF.values())
