"""``asgard bench apps``: the cost arithmetic against hand-computed numbers from prices.yaml, the
tuned-configuration file format, the run order, and a tiny bench end to end on the real servers
(Cassandra and Redis) through the click command."""
from __future__ import annotations

import csv
import json
import math

import pytest
import yaml
from click.testing import CliRunner

from asgard_bench import cost
from asgard_bench.apps import BenchConfig, CassandraConfigFile, parse_per_app, table_clauses
from asgard_bench.apps_cli import apps as apps_command

# prices.yaml (AWS us-east-1, Nov 2022), written out by hand
LAMBDA_GB_S = 0.0000166667
LAMBDA_REQ = 0.20 / 1_000_000
MEMORY_GB = 1769 / 1024
S3_PUT, S3_GET = 0.005 / 1000, 0.0004 / 1000
I3, C5, M5, R5 = 0.156, 0.085, 0.096, 0.216


def test_prices_table_has_the_nov_2022_prices_and_sources():
    p = cost.Prices.load()
    assert p.gb_second == LAMBDA_GB_S and p.request == pytest.approx(LAMBDA_REQ)
    assert p.memory_gb == pytest.approx(1.7275390625)
    assert (p.s3_put_per_1000, p.s3_get_per_1000) == (0.005, 0.0004)
    assert p.instances == {"i3.large": I3, "c5.large": C5, "m5.large": M5, "cache.r5.large": R5}
    assert p.storage_kind("cassandra") == ("instance", "i3.large")
    assert p.storage_kind("redis") == ("instance", "cache.r5.large")
    assert p.storage_kind("s3") == ("s3_requests", None) and p.storage_kind("local") == ("none", None)
    for section in ("function", "s3"):
        assert "aws.amazon.com" in p.raw[section]["source"] and "Nov 2022" in p.raw[section]["source"]
    for name, spec in p.raw["instances"].items():
        assert "aws.amazon.com" in spec["source"], name


def test_cost_of_a_cassandra_run_by_hand():
    p = cost.Prices.load()
    # 30 s end to end, 6 steps that ran 20 s in all
    c = cost.run_cost("cassandra", 30.0, 20.0, 6, 0, 0, p)
    assert c.function_gb_s == pytest.approx(34.55078125)                      # 20 s x 1769/1024 GB
    assert c.function_usd == pytest.approx(34.55078125 * 0.0000166667 + 6 * 0.0000002)
    assert c.storage_usd == pytest.approx(0.156 * 30 / 3600)                  # i3.large x 30 s = $0.0013
    assert c.total == pytest.approx(0.000575847 + 0.0000012 + 0.0013, rel=1e-6)
    assert cost.perf_per_dollar(30.0, c.total) == pytest.approx(1 / (30 * 0.001877047), rel=1e-6)
    # the what-if on c5.large: only the instance price changes
    w = cost.run_cost("cassandra", 30.0, 20.0, 6, 0, 0, p, instance="c5.large")
    assert w.storage_usd == pytest.approx(0.085 * 30 / 3600)
    assert w.function_usd == c.function_usd
    # Redis on cache.r5.large for 12.5 s
    r = cost.run_cost("redis", 12.5, 10.0, 4, 0, 0, p)
    assert r.storage_usd == pytest.approx(0.216 * 12.5 / 3600) == pytest.approx(0.00075)


def test_cost_of_s3_runs_counts_requests():
    p = cost.Prices.load()
    before = {"putobject": 10, "getobject": 4, "listobjectsv1": 1}
    after = {"putobject": 13, "getobject": 9, "headobject": 2, "listobjectsv1": 3, "deletemultipleobjects": 5,
             "newmultipartupload": 1, "putobjectpart": 2, "completemultipartupload": 1}
    # PUT class: 3 PUT + 2 LIST + multipart (1 + 2 parts + 1); GET class: 5 GET + 2 HEAD; deletes free
    assert cost.s3_requests(before, after) == (3 + 2 + 4, 5 + 2)
    c = cost.run_cost("s3", 10.0, 8.0, 3, 5, 10, p)
    assert c.storage_usd == pytest.approx(5 * 0.000005 + 10 * 0.0000004) == pytest.approx(0.000029)
    assert c.storage_basis == "5 PUT + 10 GET"
    local = cost.run_cost("local", 10.0, 8.0, 3, 0, 0, p)
    assert local.storage_usd == 0.0
    assert local.total == pytest.approx(8 * MEMORY_GB * LAMBDA_GB_S + 3 * LAMBDA_REQ)
    assert math.isnan(cost.perf_per_dollar(0.0, 1.0))


def test_tuned_config_file_forms(tmp_path):
    f = tmp_path / "tuned.yaml"
    f.write_text("yaml:\n  concurrent_writes: 64\n  memtable_heap_space: 512MiB\n"
                 "table:\n  compression: {class: LZ4Compressor, chunk_length_in_kb: 16}\n")
    c = CassandraConfigFile.load(f)
    assert c.yaml == {"concurrent_writes": 64, "memtable_heap_space": "512MiB"}
    assert c.table == ["compression = {'class': 'LZ4Compressor', 'chunk_length_in_kb': '16'}"]
    # the tuner's `recommend` file (yaml_overrides / table_options) is read too
    f.write_text(json.dumps({"yaml_overrides": {"concurrent_reads": 16},
                             "table_options": {"compaction": {"class": "LeveledCompactionStrategy"}}}))
    c = CassandraConfigFile.load(f)
    assert c.yaml == {"concurrent_reads": 16}
    assert c.table == ["compaction = {'class': 'LeveledCompactionStrategy'}"]
    assert table_clauses("ALTER TABLE asgard.objects WITH gc_grace_seconds = 0") == ["gc_grace_seconds = 0"]
    f.write_text("table: {}\n")
    with pytest.raises(ValueError, match="yaml"):
        CassandraConfigFile.load(f)
    # a whole recommend file: the keyspace's durable_writes and the IO manager's client options too
    from asgard.tuner.knobs import Configuration

    f.write_text(yaml.safe_dump(Configuration({"durable_writes": False, "client_chunk_kib": 256}).to_file_dict()))
    c = CassandraConfigFile.load(f)
    assert c.keyspace == {"durable_writes": False}
    assert c.io_manager == {"chunk_size_bytes": 262144, "concurrency": 8, "codec": "none"}
    assert None not in c.yaml.values()  # recommend's nulls are "the default": no override
    f.write_text("yaml: {}\nio_manager: {chunk_size_bytes: 65536, keyspace: other}\n")
    with pytest.raises(ValueError, match=r"\['keyspace'\] are not the Cassandra IO manager's client options"):
        CassandraConfigFile.load(f)
    f.write_text("yaml: {}\nio_manager: {cassandra: {keyspace: other}}\n")
    with pytest.raises(ValueError, match=r"'io_manager: cassandra:' takes durable_writes only"):
        CassandraConfigFile.load(f)
    # a file written before the connection was nested: durable_writes flat in io_manager
    f.write_text("yaml: {}\nio_manager: {chunk_size_bytes: 65536, durable_writes: false}\n")
    c = CassandraConfigFile.load(f)
    assert c.keyspace == {"durable_writes": False} and c.io_manager == {"chunk_size_bytes": 65536}
    f.write_text("yaml: {}\nkeyspace: {replication: 3}\n")
    with pytest.raises(ValueError, match="durable_writes"):
        CassandraConfigFile.load(f)
    assert parse_per_app("4", int) == 4
    assert parse_per_app("video_analytics=4,lightgbm_forest=3", int) == {"video_analytics": 4, "lightgbm_forest": 3}


def test_plan_interleaves_and_groups_the_tuned_cassandra():
    cfg = BenchConfig(apps=["video_analytics", "lightgbm_forest"], backends=["cassandra", "cassandra_tuned", "redis", "s3"],
                      repetitions=2, cassandra_config="tuned.yaml")
    plan = cfg.plan()
    assert len(plan) == 2 * 2 * 4
    rep0 = [p for p in plan if p[0] == 0]
    # the tuned cells come after every default cell of the repetition (one restart each way)
    assert [p[3] for p in rep0[-2:]] == ["cassandra_tuned", "cassandra_tuned"]
    assert all(p[3] != "cassandra_tuned" for p in rep0[:-2])
    # backends are rotated between repetitions
    assert [p[3] for p in plan if p[0] == 0][:3] != [p[3] for p in plan if p[0] == 1][:3]
    # without a config file the tuned backend is skipped
    assert all(p[3] != "cassandra_tuned" for p in BenchConfig(backends=["cassandra", "cassandra_tuned"]).plan())


def test_tiny_bench_through_the_cli(tmp_path, cassandra_node):
    out = tmp_path / "bench"
    result = CliRunner().invoke(apps_command, [
        "--apps", "video_analytics,lightgbm_forest", "--backends", "cassandra,redis",
        "--repetitions", "1", "--small", "--fanout", "2", "--scale", "video_analytics=0.05,lightgbm_forest=1",
        "--no-warmup", "--out", str(out),
    ], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "| app | backend |" in result.output

    rows = list(csv.DictReader(open(out / "runs.csv")))
    assert {(r["app"], r["backend"]) for r in rows} == {
        (a, b) for a in ("video_analytics", "lightgbm_forest") for b in ("cassandra", "redis")}
    prices = cost.Prices.load()
    for r in rows:
        assert r["success"] == "True", r
        e2e, steps = float(r["e2e_s"]), float(r["step_s_total"])
        assert 0 < e2e < 600 and float(r["wall_s"]) >= e2e * 0.9
        assert int(r["invocations"]) >= 5 and steps > 0
        assert 0 <= float(r["compute_s_total"]) <= steps
        assert int(r["bytes_written"]) > 0 and int(r["bytes_read"]) > 0 and r["io_timing"] == "metadata"
        assert float(r["server_cpu_s"]) > 0  # the Cassandra/Redis process did work for the run
        hourly = I3 if r["backend"] == "cassandra" else R5
        expect = steps * MEMORY_GB * LAMBDA_GB_S + int(r["invocations"]) * LAMBDA_REQ + hourly * e2e / 3600
        assert float(r["cost_usd"]) == pytest.approx(expect, rel=1e-9)
        assert float(r["perf_per_usd"]) == pytest.approx(1 / (e2e * expect), rel=1e-9)
        if r["backend"] == "cassandra":
            assert float(r["cost_usd@c5.large"]) == pytest.approx(expect - (I3 - C5) * e2e / 3600, rel=1e-9)
            assert r["cassandra_overrides"] == "{}"
        assert cost.run_cost(r["backend"], e2e, steps, int(r["invocations"]), 0, 0, prices).total == pytest.approx(expect)

    edges = list(csv.DictReader(open(out / "edges.csv")))
    lgbm_cass = [e for e in edges if e["app"] == "lightgbm_forest" and e["backend"] == "cassandra"]
    # the broadcast: pca_train written once, read by each of the 2 trainers
    assert sum(1 for e in lgbm_cass if e["kind"] == "write" and e["step"] == "pca" and e["name"] == "pca_train") == 1
    assert sum(1 for e in lgbm_cass if e["kind"] == "read" and e["upstream"] == "pca.pca_train") == 2
    assert all(int(e["bytes"]) > 0 and float(e["seconds"]) >= 0 for e in edges)
    steps_rows = list(csv.DictReader(open(out / "steps.csv")))
    assert {s["run_id"] for s in steps_rows} == {r["run_id"] for r in rows}
    # billed like an invocation: the step process's start and resource init, then the step itself
    assert all(float(s["seconds"]) >= float(s["init_seconds"]) > 0 for s in steps_rows)
    for r in rows:
        billed = sum(float(s["seconds"]) for s in steps_rows if s["run_id"] == r["run_id"])
        assert float(r["step_s_total"]) == pytest.approx(billed)

    md = (out / "summary.md").read_text()
    for cell in ("| video_analytics | cassandra |", "| video_analytics | redis |", "| lightgbm_forest | cassandra |",
                 "Instance what-if", "Cassandra (default) over S3, Perf/$: +189%"):
        assert cell in md
    summary = json.loads((out / "summary.json").read_text())
    cass = next(c for c in summary["cells"] if c["app"] == "lightgbm_forest" and c["backend"] == "cassandra")
    redis = next(c for c in summary["cells"] if c["app"] == "lightgbm_forest" and c["backend"] == "redis")
    assert cass["ratios"]["perf_vs_redis"] == pytest.approx(cass["perf_per_usd"]["median"] / redis["perf_per_usd"]["median"])
    assert set(cass["what_if"]) == {"i3.large", "c5.large", "m5.large"}
    for png in ("perf_per_dollar.png", "e2e_latency.png", "instance_what_if.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, png


def test_the_tuned_cells_run_with_the_files_keyspace_and_client_options(tmp_path, cassandra_node):
    """A file as ``asgard tune recommend --out`` writes it: the tuned cells run with its keyspace
    option and its client chunk size (the run's IO manager config), and the default cells and the
    node afterwards with neither."""
    from asgard.tuner.knobs import Configuration

    from asgard_bench.apps import CassandraConfigurator

    from asgard.pipelines.backends import io_manager_for

    store = io_manager_for("cassandra").store()
    store.ensure_schema()  # the keyspace, as the bench's runs make it
    configurator = CassandraConfigurator()
    before = configurator.keyspace_options()
    flipped = not before["durable_writes"]  # False where the IO manager created the keyspace
    tuned = tmp_path / "tuned.yaml"
    recommended = Configuration({"durable_writes": flipped, "client_chunk_kib": 256}).to_file_dict()
    # no cassandra.yaml change: the suite's shared node is not restarted under the other tests
    recommended["yaml_overrides"] = {}
    tuned.write_text(yaml.safe_dump(recommended))
    out = tmp_path / "bench"
    result = CliRunner().invoke(apps_command, [
        "--apps", "lightgbm_forest", "--backends", "cassandra,cassandra_tuned", "--repetitions", "1", "--small",
        "--fanout", "1", "--no-warmup", "--cassandra-config", str(tuned), "--out", str(out),
    ], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = {r["backend"]: r for r in csv.DictReader(open(out / "runs.csv"))}
    assert rows["cassandra"]["success"] == rows["cassandra_tuned"]["success"] == "True", rows
    assert json.loads(rows["cassandra_tuned"]["io_manager_config"])["chunk_size_bytes"] == 262144
    assert rows["cassandra"]["io_manager_config"] == ""
    writes = [e for e in csv.DictReader(open(out / "edges.csv")) if e["kind"] == "write"]
    # an output is chunked by the chunk size in force once it is over the store's inline limit
    # (two chunks): the training data and the boosters (0.7-1.4 MB) with 256 KiB chunks, inline with 1 MiB
    def expected_chunks(size: int, chunk: int) -> int:
        return 1 if size <= 2 * chunk else -(-size // chunk)

    sizes = [(e["backend"], int(e["bytes"]), int(e["chunks"])) for e in writes]
    assert sum(1 for b, size, chunks in sizes if b == "cassandra_tuned" and chunks > 1) >= 2, sizes
    for backend, size, chunks in sizes:
        chunk = 256 << 10 if backend == "cassandra_tuned" else store.chunk_size
        assert chunks == expected_chunks(size, chunk), (backend, size, chunks)
    # the keyspace option in force during each run, read back from the node
    assert json.loads(rows["cassandra_tuned"]["cassandra_keyspace"]) == {"durable_writes": flipped}
    assert json.loads(rows["cassandra"]["cassandra_keyspace"]) == before
    assert json.loads((out / "summary.json").read_text())["meta"]["cassandra_tuned"]["keyspace"] == {
        "durable_writes": flipped}
    # the keyspace is back as it was, and so is the node's configuration
    assert configurator.keyspace_options() == before
    assert configurator.node.overrides() == {}


def test_s3_requests_are_measured_at_the_server(tmp_path, minio_server):
    """Both S3 peers priced by the requests MinIO counted during each run: ours (a manifest
    record per write, chunks for large ones) and dagster-aws's stock manager (its start-up LIST included)."""
    out = tmp_path / "bench"
    result = CliRunner().invoke(apps_command, [
        "--apps", "word_count", "--backends", "s3,s3_stock,local", "--repetitions", "1", "--small",
        "--fanout", "1", "--no-warmup", "--out", str(out), "--json",
    ], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = {r["backend"]: r for r in csv.DictReader(open(out / "runs.csv"))}
    assert set(rows) == {"s3", "s3_stock", "local"} and all(r["success"] == "True" for r in rows.values())
    ours, stock, local = rows["s3"], rows["s3_stock"], rows["local"]
    writes, reads = int(ours["n_writes"]), int(ours["n_reads"])
    # ours: at least the manifest PUT per write (a small output is only that), a GET per read
    assert int(ours["s3_puts"]) >= writes and int(ours["s3_gets"]) >= reads
    # stock: a PUT per write, plus the LIST each step process's manager sends when it starts
    assert int(stock["s3_puts"]) > int(stock["n_writes"]) and int(stock["s3_gets"]) >= int(stock["n_reads"])
    prices = cost.Prices.load()
    for r in (ours, stock):
        storage = int(r["s3_puts"]) * S3_PUT + int(r["s3_gets"]) * S3_GET
        assert float(r["storage_usd"]) == pytest.approx(storage, rel=1e-9)
        assert r["storage_basis"] == f"{r['s3_puts']} PUT + {r['s3_gets']} GET"
    assert int(local["s3_puts"]) == int(local["s3_gets"]) == 0 and float(local["storage_usd"]) == 0.0
    md = (out / "summary.md").read_text()
    assert "| word_count | local * |" in md and "a floor, not a peer" in md


def test_a_purge_that_fails_after_a_run_is_recorded_in_its_row(tmp_path, monkeypatch):
    """The bench drops each run's outputs after it; a purge that fails (the store unreachable) leaves them
    on the store until their TTL, so the run's row names the error instead of passing over it."""
    import dagster as dg

    import asgard.pipelines.backends as backends
    from asgard_bench.apps_run import run_one

    real = backends.io_manager_for

    def with_failing_purge(backend, network="loopback"):
        manager = real(backend, network)

        def purge_run(run_id):
            raise ConnectionError(f"store unreachable purging {run_id}")

        object.__setattr__(manager, "purge_run", purge_run)  # the run itself never purges
        return manager

    monkeypatch.setattr(backends, "io_manager_for", with_failing_purge)
    with dg.DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        row, steps, _ = run_one(instance, 0, "default", "word_count", "local", {}, cost.Prices.load())
    assert row["success"] and steps, row
    assert row["purge_error"] == f"ConnectionError: store unreachable purging {row['run_id']}"
