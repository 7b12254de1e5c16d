"""best_static's coordinate search (asgard_bench/day_plan.py): each lever in turn at the best so far,
within its probe budget, a failed probe never the pick, and no probe spent on a value the store takes
anyway (a chunk size of 1 MiB was a probe of the store's own default: a wasted probe whose "win" was noise)."""
from __future__ import annotations

import pytest

from asgard_bench.day_plan import STATIC_LEVERS, search_static, static_levers

pytestmark = pytest.mark.fast  # no server


def _day(store_s: float, e2e_s: float = 40.0) -> dict:
    return {"runs": [{"app": "etl_columnar", "write_s_total": store_s / 2, "read_s_total": store_s / 2}],
            "e2e_s": e2e_s, "failed_runs": 0}


def test_each_lever_is_tried_at_the_best_so_far_and_a_failed_probe_never_wins():
    levers = {"codec": ("none", "lz4", "blosc-lz4"), "placement": ("ring", "producer-local")}
    costs = {"none": 30.0, "lz4": 25.0, "blosc-lz4": 20.0}
    probed = []

    def probe(client: dict) -> dict:
        probed.append(dict(client))
        if client["placement"] == "producer-local":
            return {**_day(1.0), "failed_runs": 1}  # fastest, but a run failed
        return _day(costs[client["codec"]])

    best, trials = search_static(probe, probes=8, say=lambda _: None, levers=levers)
    assert best == {"codec": "blosc-lz4", "placement": "ring"}
    assert probed[-1] == {"codec": "blosc-lz4", "placement": "producer-local"}  # tried at the best codec
    assert [t["store_s"] for t in trials] == [30.0, 25.0, 20.0, float("inf")]
    assert [t["e2e_s"] for t in trials] == [40.0, 40.0, 40.0, float("inf")]
    _, few = search_static(probe, probes=2, say=lambda _: None, levers=levers)
    assert len(few) == 2


def test_a_probe_is_judged_by_its_store_seconds_not_by_its_day_of_compute_noise():
    # lz4's day ended sooner by the luck of its compute; blosc-lz4's puts and loads took less
    days = {"none": _day(20.0, 21.0), "lz4": _day(13.4, 18.3), "blosc-lz4": _day(11.0, 18.6)}
    best, trials = search_static(lambda c: days[c["codec"]], probes=8, say=lambda _: None,
                                 levers={"codec": ("none", "lz4", "blosc-lz4")})
    assert best == {"codec": "blosc-lz4"}
    assert [(t["store_s"], t["e2e_s"]) for t in trials] == [(20.0, 21.0), (13.4, 18.3), (11.0, 18.6)]


def test_a_value_within_the_noise_of_the_best_does_not_replace_it():
    from asgard_bench.day_plan import SEARCH_MIN_GAIN

    just_under = 10.8 * (1 - SEARCH_MIN_GAIN / 2)  # 4 MiB chunks on the cloud day: 10.6 store s against 10.8
    days = {0: _day(10.8), 4 << 20: _day(just_under), 8 << 20: _day(10.8 * (1 - 2 * SEARCH_MIN_GAIN))}
    best, trials = search_static(lambda c: days[c["chunk_size_bytes"]], probes=8, say=lambda _: None,
                                 levers={"chunk_size_bytes": (0, 4 << 20, 8 << 20)})
    assert best == {"chunk_size_bytes": 8 << 20} and len(trials) == 3
    best, _ = search_static(lambda c: days[c["chunk_size_bytes"]], probes=2, say=lambda _: None,
                            levers={"chunk_size_bytes": (0, 4 << 20, 8 << 20)})
    assert best == {"chunk_size_bytes": 0}  # the store's own, its one rival within the noise


def test_no_alternative_of_a_lever_is_what_the_store_does_by_default():
    from asgard.resources.stores.cql.statements import DEFAULT_CHUNK_SIZE
    from asgard.resources.stores.settings import STORAGE

    chunk_sizes, concurrencies = STATIC_LEVERS["chunk_size_bytes"], STATIC_LEVERS["concurrency"]
    assert chunk_sizes[0] == 0 and DEFAULT_CHUNK_SIZE not in chunk_sizes[1:], chunk_sizes  # 0: the store's own
    assert concurrencies[0] == STORAGE["concurrency"].default and len(set(concurrencies)) == len(concurrencies)
    assert all(len(set(values)) == len(values) for values in STATIC_LEVERS.values())
    assert "replicas" not in static_levers(1) and "replicas" in static_levers(3)
