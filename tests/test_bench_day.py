"""``asgard bench day`` in miniature on loopback, through the click command: a day of two ETL runs
at once, its four variants interleaved round by round, best_static's search, the loop's sensor and
retune job, the --json object scripts read, and the node put back as found."""
from __future__ import annotations

import json

from click.testing import CliRunner

from asgard.cli import main


def test_a_day_runs_four_variants_interleaved_and_prints_the_json_scripts_read(cassandra_node, tmp_path):
    from asgard_dagster.retune import applied_config_file

    overrides_before = cassandra_node.overrides()
    state_before = applied_config_file().read_text() if applied_config_file().exists() else None
    out = tmp_path / "day"
    res = CliRunner().invoke(main, ["bench", "day", "--settings", "loopback", "--rounds", "2",
                                    "--mix", "etl_columnar:fanout=3;scale=0.1,etl_columnar:fanout=2;scale=0.05",
                                    "--search-probes", "2", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)  # stderr carries the progress lines
    settings = summary["settings"]
    assert set(settings) == {"loopback", "cloud", "hosts3"}
    assert settings["cloud"] == {"run": False, "reason": "not selected (--settings)"}
    assert settings["hosts3"] == {"run": False, "reason": "not selected (--settings)"}
    loopback = settings["loopback"]
    assert set(loopback["variants"]) == {"peer", "default", "best_static", "loop"}
    for name, v in loopback["variants"].items():
        assert v["failed_runs"] == 0, name
        assert v["e2e_s"] > 0 and v["perf_per_dollar"] > 0, name
    assert loopback["failed_runs"] == 0
    assert loopback["noise_pct"] is not None and loopback["noise_pct"] >= 0  # two default days: an A/A spread
    assert 0 < loopback["store_share_pct"] < 100
    ratios = loopback["ratios"]
    assert ratios["loop_over_best_static_e2e"] == round(
        loopback["variants"]["best_static"]["e2e_s"] / loopback["variants"]["loop"]["e2e_s"], 3)

    full = json.loads((out / "day.json").read_text())["settings"]["loopback"]
    # interleaved: each round runs every variant once, the order rotated
    assert [d["variant"] for d in full["days"]] == ["peer", "default", "best_static", "loop",
                                                   "default", "best_static", "loop", "peer"]
    # each day ran both pipelines, at once: the day is shorter than its runs one after the other
    for d in full["days"]:
        assert [r["app"] for r in d["runs"]] == ["etl_columnar", "etl_columnar"] and all(r["success"] for r in d["runs"])
        assert d["e2e_s"] - d["reconfiguration_s"] < sum(r["e2e_s"] for r in d["runs"]) + 5
    # the peer is dagster-aws's manager on MinIO, priced by requests; the others on Cassandra
    assert {d["backend"] for d in full["days"] if d["variant"] == "peer"} == {"s3_stock"}
    assert {d["backend"] for d in full["days"] if d["variant"] != "peer"} == {"cassandra"}
    # best_static: its probes, and the one it kept: the second where its runs' puts and loads took less
    # than the first's by more than the noise, else the first (the store's defaults)
    from asgard_bench.day_plan import SEARCH_MIN_GAIN

    trials = full["search"]["trials"]
    assert len(trials) == 2 and all(t["apps"] == ["etl_columnar", "etl_columnar"] for t in trials), trials
    kept = full["variants"]["best_static"]["config"]["io_manager"]
    first, second = trials
    assert kept == (second if second["store_s"] < (1 - SEARCH_MIN_GAIN) * first["store_s"] else first)["client"]
    assert all(0 < t["store_s"] < t["e2e_s"] * 2 for t in trials), trials  # two runs at once
    # one node, one copy: the replicas lever has nothing to give and is not probed
    assert all("replicas" not in t["client"] for t in trials) and trials[1]["client"]["codec"] == "lz4"
    assert {d["client"]["codec"] for d in full["days"] if d["variant"] == "loop"} == {"auto"}
    # the loop's edges on the multiprocess executor (every step on this host): the customers table,
    # read by each partition's join, is kept beside the ring for them (at scale 0.1, 2.5 MB; at 0.05,
    # 1.3 MB, it is stored inline in its manifest, which one read brings); each partition, read once,
    # gets a copy only where the store's reads measured in the day make one read pay for it
    for d in (d for d in full["days"] if d["variant"] == "loop"):
        for r in d["runs"]:
            customers = r["edges"]["generate.customers"]
            if r["scale"] == 0.1:
                assert customers["placement"] == {"producer-local": 1}, customers
                assert any("the multiprocess executor runs" in x for x in customers["reasons"]), customers
            else:
                assert customers["placement"] == {"ring": 1}, customers
                assert any("stored inline" in x for x in customers["reasons"]), customers
            partitions = r["edges"]["filter_orders.result"]
            # what the edge cost: its 3 or 2 partitions' bytes and puts, and the joins' loads of them
            assert partitions["bytes"] > 0 and partitions["write_s"] > 0 and partitions["read_s"] > 0, partitions
            for reason in (x for x in partitions["reasons"] if x.startswith("placement")):
                assert ("a copy costs the put about what" in reason or "through a copy pay for it" in reason), reason
    # each edge's seconds by Cassandra variant, over the day's runs, and the table prints them
    costs = full["edge_costs"]["etl_columnar:filter_orders.result"]
    assert set(costs) == {"default", "best_static", "loop"}, costs  # the peer's outputs carry no metadata
    assert costs["default"]["codec"] == "none" and all(c["write_s"] > 0 and c["read_s"] > 0 for c in costs.values())
    assert "etl_columnar:filter_orders.result" in (out / "day.txt").read_text()
    # the peer's objects went after each of its runs, as the purge takes ours (dagster-aws's never deletes)
    from asgard.resources.stores.s3 import LOCAL_ENDPOINT, resolve_credentials, s3_client
    from asgard_dagster.s3.io_manager import STOCK_BUCKET, STOCK_PREFIX

    s3 = s3_client(LOCAL_ENDPOINT, "us-east-1", *resolve_credentials(LOCAL_ENDPOINT, None, None), None, 10, 10, 60)
    peer_runs = [r for d in full["days"] if d["variant"] == "peer" for r in d["runs"]]
    assert len(peer_runs) == 4 and all(r["bytes_written"] > 0 for r in peer_runs), peer_runs
    for r in peer_runs:
        left = s3.list_objects_v2(Bucket=STOCK_BUCKET, Prefix=f"{STOCK_PREFIX}/storage/{r['run_id']}/")
        assert left.get("KeyCount", 0) == 0, left.get("Contents")
    # the warm-up ran on the loop's fields, so the throughput record the loop's first round chooses from
    # has the day's own puts (its edges chose a codec; on the default's fields they would not)
    assert [(w["app"], w["client"]["codec"]) for w in full["warm_up"]] == [("etl_columnar", "auto")]
    warm_codecs = [x for edge in full["warm_up"][0]["edges"].values() for x in edge["reasons"] if x.startswith("codec")]
    assert any("MB/s write/read" in x for x in warm_codecs), warm_codecs
    # the loop: the sensor asks for a retune before the first round, not before the second (same mix)
    assert [d["sensor"] for d in full["decisions"]] == ["retune", "skip"]
    # the node is as it was found: its yaml overrides and the retune job's state file
    assert cassandra_node.overrides() == overrides_before
    assert (applied_config_file().read_text() if applied_config_file().exists() else None) == state_before
