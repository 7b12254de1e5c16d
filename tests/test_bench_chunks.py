"""``asgard bench chunks`` on the local node, through the click command: the day's data put and got
in each cell (chunk size x requests in flight), the store's own cell twice (the A/A noise floor),
each kind with the codec ``auto`` chose for it."""
from __future__ import annotations

import json

from click.testing import CliRunner

from asgard.cli import main


def test_each_cell_puts_in_its_chunk_size_and_the_default_cell_runs_twice(cassandra_node):
    res = CliRunner().invoke(main, ["bench", "chunks", "--network", "loopback", "--rounds", "2",
                                    "--data", "etl orders,log file", "--scale", "0.02", "--fanout", "1",
                                    "--chunk-kib", "1024,4096", "--in-flight", "8,16", "--warmup-seconds", "0",
                                    "--json"])
    assert res.exit_code == 0, res.output
    result = json.loads(res.stdout)
    assert result["network"] == "loopback" and result["rounds"] == 2
    # the codec auto chose for each kind, on its own bytes (about 20 MiB each at scale 0.02), and why
    assert set(result["data"]) == {"etl orders", "log file"}
    for kind, d in result["data"].items():
        assert 15 < d["mib"] < 25 and d["codec"] in ("none", "lz4", "zstd", "blosc-lz4"), d
        assert "MB/s write/read" in d["reason"], d  # the store's throughput, weighed against the trial
    for kind in result["data"]:
        rows = {r["cell"]: r for r in result["cells"] if r["data"] == kind}
        assert list(rows) == ["1024 KiB x 8 (A)", "1024 KiB x 8 (A')", "1024 KiB x 16", "4096 KiB x 8",
                              "4096 KiB x 16"], list(rows)
        for r in rows.values():
            assert r["put_s"] > 0 and r["get_s"] > 0 and r["server_cpu_s_per_gb"] >= 0, r
        # each cell's puts were cut in its own chunk size: a quarter as many 4 MiB chunks, or near it
        small, large = rows["1024 KiB x 8 (A)"]["chunks"], rows["4096 KiB x 8"]["chunks"]
        assert small > 1 and -(-small // 4) <= large <= -(-small // 4) + 1, (small, large)
        assert rows["1024 KiB x 16"]["chunks"] == small
        # the ratios are against the first copy of the default cell; the second copy's is the noise floor
        a, a2 = rows["1024 KiB x 8 (A)"], rows["1024 KiB x 8 (A')"]
        assert a["ratio"] == 1.0
        assert {r["noise_pct"] for r in rows.values()} == {
            round(100 * abs(a["put_get_s"] - a2["put_get_s"]) / a["put_get_s"], 1)}


def test_an_unknown_data_kind_is_refused_with_the_kinds_there_are():
    res = CliRunner().invoke(main, ["bench", "chunks", "--data", "etl orders,videos"])
    assert res.exit_code == 2
    assert "'etl orders,videos'" in res.output and "log table" in res.output
