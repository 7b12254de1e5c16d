"""The emulated hosts' link rate as a user gives it (``asgard hosts up --link-mbit``, ``asgard bench day
--host-link-mbit``): what is refused, and how the rate tc reports is read back. The links themselves
are shaped and measured on the running hosts in tests/test_celery_hosts.py."""
from __future__ import annotations

import subprocess
import sys

import pytest

from asgard.resources.network.hosts import EmulatedHosts, HostLinkError, _mbit

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("rate", [-1, 1.5, "750", True])
def test_a_rate_that_is_not_a_whole_number_of_mbit_is_refused_before_any_link_is_touched(rate):
    with pytest.raises(HostLinkError) as caught:
        EmulatedHosts(3).shape_links(rate)  # no host is up: a refused rate never reaches tc
    assert caught.value.rate_mbit == rate and "whole number of Mbit/s" in str(caught.value)


def test_the_rate_tc_shows_is_read_in_mbit():
    assert _mbit("class htb 1:10 root prio 0 rate 750Mbit ceil 750Mbit burst 1500b cburst 1500b") == 750
    assert _mbit("class htb 1:10 root prio 0 rate 10Gbit ceil 10Gbit burst 0b cburst 0b") == 10000
    assert _mbit("") is None


@pytest.mark.parametrize("args, message", [
    (["hosts", "up", "--link-mbit", "-5"], "--link-mbit"),
    (["bench", "day", "--settings", "hosts3", "--host-link-mbit", "-1"], "--host-link-mbit"),
])
def test_the_commands_refuse_a_link_rate_out_of_range(args, message):
    out = subprocess.run([sys.executable, "-m", "asgard.cli", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_bench_day_runs_hosts3_under_an_i3_large_link_unless_told_otherwise():
    from click.testing import CliRunner

    from asgard_bench.cli import bench
    from asgard.resources.network.hosts import I3_LARGE_BASELINE_MBIT

    opt = next(p for p in bench.commands["day"].params if p.name == "host_link_mbit")
    assert opt.default == I3_LARGE_BASELINE_MBIT == 750
    help_text = " ".join(CliRunner().invoke(bench, ["day", "--help"]).output.split())
    assert "0: unshaped" in help_text and "[default: 750; x>=0]" in help_text
