"""``asgard bench dynamic`` in miniature, on the real node 1, through the click command: the
three variants interleaved, the upcoming-runs sensor and the retune job deciding before each
burst of Asgard's, and the node put back as found."""
from __future__ import annotations

import json

from click.testing import CliRunner

from asgard.cli import main


def _node_state(node):
    from asgard.resources.stores.cql import CassandraObjectStore

    session = CassandraObjectStore(contact_points=[node.address], keyspace="asgard").session
    ks = session.execute("SELECT durable_writes FROM system_schema.keyspaces WHERE keyspace_name = 'asgard'").one()
    t = session.execute("SELECT compression, gc_grace_seconds FROM system_schema.tables "
                        "WHERE keyspace_name = 'asgard' AND table_name = 'objects'").one()
    return ks.durable_writes if ks else None, dict(t.compression) if t else None, t.gc_grace_seconds if t else None


def test_dynamic_bench_runs_three_variants_and_the_sensor_decides_per_burst(cassandra_node, tmp_path):
    from asgard_dagster.retune import applied_config_file

    from asgard.resources.stores import ObjectKey
    from asgard.resources.stores.cql import CassandraObjectStore

    CassandraObjectStore(contact_points=[cassandra_node.address], keyspace="asgard").exists(ObjectKey("t", "p"))
    before = _node_state(cassandra_node)
    overrides_before = cassandra_node.overrides()
    state_before = applied_config_file().read_text() if applied_config_file().exists() else None
    out = tmp_path / "dyn"
    # the same app twice: the sensor asks for a retune before the first burst, and skips the
    # second (the queued mix did not change -- its cursor remembers it)
    res = CliRunner().invoke(main, ["bench", "dynamic", "--apps", "word_count", "--rounds", "2", "--burst", "1",
                                    "--static-app", "word_count", "--small", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)  # stderr carries the runs' logs
    assert set(summary) == {"default", "static_tuned", "asgard"}
    for name, v in summary.items():
        assert v["failed_runs"] == 0 and v["runs"] == 2, name
        assert v["e2e_s"] > 0 and v["perf_per_dollar"] > 0
    assert summary["default"]["perf_per_dollar_vs_default"] == 1.0
    full = json.loads((out / "dynamic.json").read_text())
    assert [d["sensor"] for d in full["decisions"]] == ["retune", "skip"]
    first = full["decisions"][0]
    assert first["reason"] and "retune_run_seconds" in first
    if first["reconfigured"]:  # the retune job changed the node: its time is charged to Asgard
        assert summary["asgard"]["reconfigurations"] and first["seconds"] > 0
    assert "unchanged" in full["decisions"][1]["reason"]
    # the variants ran interleaved, burst by burst, order rotated
    assert [r["phase"] for r in full["runs"]] == ["default", "static_tuned", "asgard",
                                                 "static_tuned", "asgard", "default"]
    assert (out / "dynamic.png").stat().st_size > 10_000
    # the node is as it was found: keyspace, table, yaml overrides, the retune job's state file
    assert _node_state(cassandra_node) == before
    assert cassandra_node.overrides() == overrides_before
    assert (applied_config_file().read_text() if applied_config_file().exists() else None) == state_before
