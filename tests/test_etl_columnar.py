"""The columnar ETL (asgard.pipelines.etl_columnar; issue 37's data-heavy day) in real runs on the
multiprocess executor against the local Cassandra node: its result is the one computed in one
process, its edges are a scatter, a broadcast and a fan-in of Arrow tables, and ``asgard bench apps``
prints the store's share of the steps' time for it beside a stock peer's."""
from __future__ import annotations

import csv

import pytest
from click.testing import CliRunner

from asgard.pipelines.etl_columnar import expected_result
from asgard.pipelines.jobs import SMALL, run_app


def test_the_etl_passes_arrow_tables_through_the_store_and_gets_the_result_of_one_process(
        cassandra_node, dagster_instance):
    sizes = SMALL["etl_columnar"]
    run = run_app("etl_columnar", "cassandra", instance=dagster_instance, **sizes)
    assert run.success
    want = expected_result(sizes["scale"], sizes["fanout"])
    assert {k: v for k, v in run.result.items() if k != "net_revenue"} == \
        {k: v for k, v in want.items() if k != "net_revenue"}
    assert run.result["net_revenue"] == pytest.approx(want["net_revenue"], rel=1e-9)  # summed in another order
    fanout = sizes["fanout"]
    # the scatter: each partition of the orders written once and read by its filter
    assert sorted(w for w in run.writes if w[0] == "generate") == \
        [("generate", "customers")] + [("generate", "orders")] * fanout
    # the broadcast: the customers table written once, read by every join
    joins = [r for r in run.reads if r[2] == "generate" and r[3] == "customers"]
    assert sorted(r[0] for r in joins) == [f"join_customers[p{p:03d}]" for p in range(fanout)]
    # the fan-in: every partition's aggregate read by the one merge
    assert sorted(r[2] for r in run.reads if r[0] == "merge_aggregates") == \
        [f"aggregate[p{p:03d}]" for p in range(fanout)]
    # every edge went through the store: the Arrow tables and the result
    assert len(run.writes) == 1 + 4 * fanout + 1 and len(run.reads) == 5 * fanout


def test_bench_apps_prints_the_stores_share_of_the_etls_step_time(tmp_path, cassandra_node):
    from asgard_bench.apps_cli import apps as apps_command

    out = tmp_path / "bench"
    result = CliRunner().invoke(apps_command, [
        "--apps", "etl_columnar", "--backends", "cassandra,s3_stock", "--repetitions", "1", "--small",
        "--no-warmup", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "| store % |" in result.output
    rows = list(csv.DictReader(open(out / "runs.csv")))
    assert {r["backend"] for r in rows} == {"cassandra", "s3_stock"}
    for r in rows:
        assert r["success"] == "True", r
        assert float(r["write_s_total"]) > 0 and float(r["read_s_total"]) > 0, r
        assert 0 < float(r["store_share_pct"]) < 100, r
        # a table of the small scale is over a MiB: every edge but the result carries one
        assert int(r["bytes_written"]) > (1 + 3 * SMALL["etl_columnar"]["fanout"]) * 2 ** 20, r
