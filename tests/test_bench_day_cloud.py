"""``asgard bench day`` under the cloud profile, in miniature: the profile's own node and MinIO in their
namespaces (never the suite's node), so the file runs in the own-nodes pass beside test_network.py, the
other user of the cloud deployment, and never at the same time as it."""
from __future__ import annotations

import json

from click.testing import CliRunner

from asgard.cli import main


def test_under_a_profile_the_loops_retune_reaches_the_profiles_node_from_outside(tmp_path):
    """The loop's server knobs under the cloud profile: the retune job reaches the profile's own node
    as a user's cluster (keyspace and table options by CQL), as best_static gets the surrogate's
    server configuration; before, the loop ran the node on Cassandra's defaults there. Every Cassandra
    variant runs on the table as the store creates it, not on Cassandra's stock table options."""
    from asgard.resources.network import Deployment

    out = tmp_path / "day"
    try:
        res = CliRunner().invoke(main, ["bench", "day", "--settings", "cloud", "--rounds", "1", "--search-probes", "1",
                                        "--mix", "etl_columnar:fanout=2;scale=0.05", "--out", str(out), "--json"])
        assert res.exit_code == 0, res.output
        cloud = json.loads((out / "day.json").read_text())["settings"]["cloud"]
        assert cloud["failed_runs"] == 0
        (decision,) = cloud["decisions"]
        assert decision["sensor"] == "retune" and decision["reconfigured"], decision
        assert "applies keyspace and table options by CQL" in decision["reason"], decision["reason"]
        # what the node runs after the change, read back from it: the table as the store creates it (every
        # Cassandra variant's base: compression off, gc_grace 0 at RF 1) and the search's choice of what CQL can set
        in_force = dict(decision["in_force"])
        assert (in_force.pop("compression"), in_force.pop("gc_grace_seconds")) == ("none", 0), decision
        assert in_force and set(in_force) <= set(decision["config"]), decision
        loop_day = next(d for d in cloud["days"] if d["variant"] == "loop")
        assert loop_day["reconfiguration_s"] == decision["seconds"] > 0  # counted in the loop's E2E
        assert cloud["variants"]["loop"]["config"]["server"] == "retune job per round"
        # the day started the profile's node and MinIO, and stopped them after it (as it does the hosts)
        assert [Deployment("cloud").server(k).pid() for k in ("cassandra", "s3")] == [None, None]
    finally:
        Deployment("cloud").down()
