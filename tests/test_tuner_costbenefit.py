"""SOPHIA/Asgard cost-benefit analysis: the decision goes both ways."""
from __future__ import annotations

import pytest

from tuner.costbenefit import needs_restart, should_reconfigure
from tuner.knobs import Configuration


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
