"""Stores behind network profiles (resources/network): real servers in namespaces of their own,
reached over veth pairs and Toxiproxy, measured against the loopback servers in the same test."""
from __future__ import annotations

import json
import statistics
import subprocess
import time
import uuid

import numpy as np
import pytest
from click.testing import CliRunner

from asgard.resources.network import Deployment, Link, NetworkProfile, NetworkProfileError, leftovers, load_profile
from asgard.resources.stores import ObjectKey
from asgard.resources.stores.registry import open_store

SMALL = 10 * 1024


def _median_get_ms(store, key, reads: int = 15) -> float:
    times = []
    for _ in range(reads):
        t0 = time.perf_counter()
        store.get(key)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _ours(deployment: Deployment, backend: str) -> dict:
    """What of the project's namespaces and interfaces belong to ``backend`` under ``deployment``."""
    ns = deployment.namespace(backend)
    left = leftovers()
    return {"namespaces": [n for n in left["namespaces"] if n == ns.name],
            "interfaces": [i for i in left["interfaces"] if i == ns.host_if]}


def test_profiles_name_a_source_for_every_figure():
    cloud = load_profile("cloud")
    assert set(cloud.links) == {"cassandra", "redis", "s3"}
    for backend, link in cloud.links.items():
        for figure in ("rtt_ms", "jitter_ms", "rate_mbit", "conn_up_mbit", "conn_down_mbit"):
            assert link.sources.get(figure), f"{backend}.{figure} has no source"
    assert cloud.link("s3").rtt_ms > 20 * cloud.link("cassandra").rtt_ms  # S3 is the far one
    assert not load_profile("loopback").emulated
    with pytest.raises(NetworkProfileError, match="known: loopback, cloud"):
        load_profile("mars")
    with pytest.raises(NetworkProfileError, match="jitter_ms"):
        Link(rtt_ms=2, jitter_ms=5)
    with pytest.raises(NetworkProfileError, match="no store named"):
        NetworkProfile("x", links={"postgres": Link(rtt_ms=1)}, slot_base=200)


def test_a_20_ms_link_delays_a_small_get_by_about_its_round_trip(redis_server):
    """The same 10 KiB get through the real Redis store: over a 20 ms link against loopback."""
    deployment = Deployment(NetworkProfile("rtt20", links={"redis": Link(rtt_ms=20)}, slot_base=200))
    try:
        deployment.up(("redis",))
        far, near = open_store("redis", **deployment.store_kwargs("redis")), open_store("redis")
        key = ObjectKey.for_run(f"net-{uuid.uuid4().hex[:8]}", "step", "small")
        payload = np.random.default_rng(1).bytes(SMALL)
        for store in (far, near):
            store.put(key, payload)
            assert store.get(key)[0] == payload
        far_ms, near_ms = _median_get_ms(far, key), _median_get_ms(near, key)
        # a get is one round trip here: the link adds about 20 ms (generous bounds: a shared machine)
        assert 15 <= far_ms - near_ms <= 60, (far_ms, near_ms)
        assert far_ms / near_ms > 5
        far.purge_scope(key.scope)
        near.purge_scope(key.scope)
    finally:
        deployment.down(("redis",))
    assert _ours(deployment, "redis") == {"namespaces": [], "interfaces": []}


def test_tear_down_leaves_no_namespace_link_or_qdisc(redis_server):
    link = Link(rtt_ms=2, rate_mbit=400, conn_up_mbit=200, conn_down_mbit=300)  # limits that bind here
    deployment = Deployment(NetworkProfile("shaped", links={"redis": link}, slot_base=204))
    ns = deployment.namespace("redis")
    try:
        deployment.up(("redis",))
        assert ns.name in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert "htb" in ns.qdiscs()  # the host's rate on both ends of the pair
        toxics = {t["type"] for t in deployment.proxy("redis").proxies()["redis"]["toxics"]}
        assert toxics == {"latency", "bandwidth"}
        assert deployment.server("redis").is_running() and deployment.proxy("redis").is_running()
    finally:
        deployment.down(("redis",))
    assert _ours(deployment, "redis") == {"namespaces": [], "interfaces": []}
    assert ns.name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    shown = subprocess.run(["tc", "qdisc", "show", "dev", ns.host_if], capture_output=True, text=True)
    assert shown.returncode != 0 and not shown.stdout  # the device is gone, and its qdiscs with it
    assert not deployment.server("redis").is_running() and not deployment.proxy("redis").is_running()


@pytest.fixture(scope="module")
def cloud():
    deployment = Deployment("cloud", cassandra_heap="1G")
    deployment.up()
    yield deployment
    deployment.down()
    assert all(_ours(deployment, b) == {"namespaces": [], "interfaces": []} for b in ("cassandra", "redis", "s3"))


@pytest.mark.parametrize("backend", ["cassandra", "redis", "s3"])
def test_stores_behind_the_cloud_profile_round_trip(cloud, backend):
    store = open_store(backend, **cloud.store_kwargs(backend))
    assert cloud.host(backend).startswith("10.211.")
    scope = f"net-{uuid.uuid4().hex[:8]}"
    values = {"empty": b"", "small": np.random.default_rng(2).bytes(SMALL),
              "array": np.arange(700_000, dtype=np.float64)}  # 5.3 MiB: several chunks
    for name, value in values.items():
        store.put(ObjectKey.for_run(scope, "step", name), value)
    for name, value in values.items():
        back, _ = store.get(ObjectKey.for_run(scope, "step", name))
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(back, value)
        else:
            assert back == value
    assert store.list_paths(f"run/{scope}") == sorted(f"step/{n}" for n in values)
    store.purge_scope(f"run/{scope}")
    assert store.list_paths(f"run/{scope}") == []
    if backend != "s3":  # an s3:// URI names the bucket, not the endpoint
        assert cloud.host(backend) in store.uri(ObjectKey.for_run(scope, "step", "small"))


@pytest.mark.parametrize("backend", ["cassandra", "redis", "s3"])
def test_an_app_runs_on_the_multiprocess_executor_behind_the_cloud_profile(cloud, backend, dagster_instance):
    from asgard.pipelines.jobs import SMALL as APP_SIZES
    from asgard.pipelines.jobs import run_app

    run = run_app("word_count", backend, instance=dagster_instance, network="cloud", **APP_SIZES["word_count"])
    assert run.success
    local = run_app("word_count", "local", instance=dagster_instance, **APP_SIZES["word_count"])
    assert run.result == local.result  # the same answer through the far store
    # the step processes wrote to the profile's server, not to the loopback one
    far, near = open_store(backend, **cloud.store_kwargs(backend)), open_store(backend)
    written = far.list_paths(f"run/{run.run_id}")
    assert len(written) == len(run.writes) > 0
    assert near.list_paths(f"run/{run.run_id}") == []
    far.purge_scope(f"run/{run.run_id}")


def test_bench_io_under_the_cloud_profile_says_so_and_sees_the_far_s3(cloud):
    from asgard.cli import main

    result = CliRunner().invoke(main, [
        "bench", "io", "--network", "cloud", "--json", "--backends", "cassandra,s3", "--sizes-mib", "1",
        "--small-ops", "40", "--repeat", "1", "--memory-mib", "0", "--first-puts", "1", "--spread-outputs", "0",
        "--no-warmup", "--small-seconds", "8"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert {r["network"] for r in rows} == {"cloud"}
    ops = {r["backend"]: r["ops_s"] for r in rows if r["ops_s"]}
    # a put and a get each wait at least one 50 ms round trip to S3; Cassandra is 0.25 ms away
    assert ops["s3"] < 20
    assert ops["cassandra"] > 5 * ops["s3"]
