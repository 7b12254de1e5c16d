"""`asgard bench drivers`: the store on cassandra-driver and on scylla-driver, against the local node."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from asgard.cli import main


def test_bench_drivers_runs_the_store_on_both_drivers_with_a_noise_floor(cassandra_node):
    from asgard_bench.drivers import ALTERNATIVE_DRIVERS, driver_dir
    from asgard.resources.stores.cql import CassandraObjectStore

    args = ["bench", "drivers", "--json", "--rounds", "2", "--sizes-mib", "1", "--small-ops", "20",
            "--block-mib", "3"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["rounds"] == 2 and out["block_mib"] == 3
    # each worker imported the driver it names: the fork from its own directory, at its pin
    versions = {v["variant"]: (v["driver"], v["version"]) for v in out["variants"]}
    assert versions["scylla-driver"] == ("scylla-driver", ALTERNATIVE_DRIVERS["scylla-driver"])
    import cassandra

    assert versions["cassandra-driver"] == versions["cassandra-driver (A/A)"] == ("cassandra-driver", cassandra.__version__)
    assert (driver_dir("scylla-driver") / "cassandra" / "__init__.py").exists()
    rows = out["rows"]
    measures = {(r["measure"], r["object_bytes"]) for r in rows}
    assert measures == {("write", 1 << 20), ("read", 1 << 20), ("small", 10 * 1024), ("first_put", 10 * 1024)}
    for measure in measures:
        got = {r["variant"]: r for r in rows if (r["measure"], r["object_bytes"]) == measure}
        assert set(got) == set(versions)
        assert all(r["speed_median"] > 0 for r in got.values())
        base = got["cassandra-driver"]
        assert "speed_vs_base" not in base
        for name in ("cassandra-driver (A/A)", "scylla-driver"):
            r = got[name]
            assert 0 <= r["ci_low"] <= r["speed_vs_base"] <= r["ci_high"], r  # two rounds: wide
        if measure[0] != "first_put":  # the node's CPU for every block, the client's too
            assert all(r["server_cpu_median"] > 0 and r["client_cpu_median"] > 0 for r in got.values())
    # the workers and the first-put probes purged what they wrote
    session = CassandraObjectStore().session
    store = CassandraObjectStore()
    scopes = {row.scope for row in session.execute(f"SELECT DISTINCT scope FROM {store.qualified_index}")}
    assert not [s for s in scopes if s.startswith("run/bench-drivers")], scopes


def test_bench_drivers_refuses_an_unknown_driver_and_a_repeated_one():
    for drivers, says in (("cassandra-driver,pycassa", "unknown driver 'pycassa'"),
                          ("cassandra-driver,cassandra-driver", "listed twice")):
        result = CliRunner().invoke(main, ["bench", "drivers", "--drivers", drivers])
        assert result.exit_code != 0 and says in result.output, result.output


def test_a_driver_not_installed_says_how_to_install_it(tmp_path, monkeypatch):
    from asgard_bench.drivers import DriverNotInstalledError, _worker_env

    monkeypatch.setenv("ASGARD_HOME", str(tmp_path))
    with pytest.raises(DriverNotInstalledError, match="scripts/setup.sh"):
        _worker_env("scylla-driver", {})
