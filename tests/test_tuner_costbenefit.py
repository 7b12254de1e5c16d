"""SOPHIA/Asgard cost-benefit analysis: the decision goes both ways."""
from __future__ import annotations

import pytest

from asgard.tuner.costbenefit import needs_restart, should_reconfigure
from asgard.tuner.knobs import Configuration


def test_long_lookahead_pays_for_a_restart():
    d = should_reconfigure(current_ops_per_s=1000, new_ops_per_s=1300, lookahead_s=600, restart_seconds=12)
    assert d.reconfigure
    assert d.benefit_ops == pytest.approx(300 * (600 - 12))
    assert d.cost_ops == pytest.approx(1000 * 12)
    assert d.net_ops > 0


def test_short_lookahead_does_not():
    d = should_reconfigure(current_ops_per_s=1000, new_ops_per_s=1300, lookahead_s=30, restart_seconds=12)
    assert not d.reconfigure
    assert d.benefit_ops < d.cost_ops
    assert "does not pay" in d.reason


def test_live_change_is_cheap_and_slower_config_never_wins():
    assert should_reconfigure(1000, 1050, 30, restart_seconds=12, needs_restart=False, live_seconds=2).reconfigure
    assert not should_reconfigure(1000, 900, 10_000, restart_seconds=0, needs_restart=False).reconfigure
    with pytest.raises(ValueError):
        should_reconfigure(-1, 1, 1, 1)


def test_restart_needed_only_for_restart_only_knobs():
    base = Configuration()
    assert not needs_restart(base, Configuration(concurrent_writes=64, compaction="LCS"))
    assert needs_restart(base, Configuration(memtable_flush_writers=4))


def test_a_gain_within_the_surrogates_error_does_not_pay():
    # +30% predicted, but the model is off by 25% on unseen configurations: 1300 x 0.75 < 1000
    d = should_reconfigure(1000, 1300, lookahead_s=10_000, restart_seconds=12, uncertainty=0.25)
    assert not d.reconfigure and "within the surrogate's error of 25.0%" in d.reason
    assert d.new_ops_per_s == pytest.approx(975)
    # +60% predicted with the same error still wins: 1600 x 0.75 = 1200 over the whole window
    d = should_reconfigure(1000, 1600, lookahead_s=10_000, restart_seconds=12, uncertainty=0.25)
    assert d.reconfigure and d.benefit_ops == pytest.approx(200 * (10_000 - 12))
    with pytest.raises(ValueError, match="uncertainty"):
        should_reconfigure(1000, 1600, 1, 1, uncertainty=1.5)


def test_decide_discounts_by_the_models_heldout_error():
    from asgard.tuner.costbenefit import decide
    from asgard.tuner.dataset import DEFAULT_MODEL
    from asgard.tuner.surrogates import Surrogate
    from asgard.tuner.workload import Workload

    model = Surrogate.load(DEFAULT_MODEL)
    workload = Workload(read_ratio=0.5, object_kib=16)
    current, new = Configuration(), Configuration(concurrent_writes=64)
    model.heldout_error_pct = 0.0
    trusting = decide(model, workload, current, new, lookahead_s=3600, restart_seconds=12)
    model.heldout_error_pct = 40.0
    doubting = decide(model, workload, current, new, lookahead_s=3600, restart_seconds=12)
    assert doubting.new_ops_per_s == pytest.approx(trusting.new_ops_per_s * 0.6)
    assert doubting.benefit_ops < trusting.benefit_ops
