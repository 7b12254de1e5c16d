"""NUMA verified (issue 12, item 5): the planner on fake sysfs trees of 1, 2 and 4 nodes with
uneven CPU lists, the binding check of the launch path (a mismatch stops the server and is an
error), a real 2-instance Cassandra ring pinned to one CPU each (127.0.0.14/15) verified from
/proc, and ``asgard bench scaling --json`` at a tiny size.

Heap sizes below are worked by hand from cassandra-env.sh's rule,
max(min(mem/2, 1024), min(mem/4, 8192)) in whole MiB, mem being the instance's share of its
node's MemTotal; memtable space is heap/4.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from asgard.resources.numa import (
    Binding,
    NumaBindingError,
    NumaPlanError,
    ObservedBinding,
    format_cpulist,
    numa_nodes,
    observe_binding,
    parse_cpulist,
    plan_instances,
)
from asgard.resources.process import ManagedServer

GiB_KB = 1024 * 1024


def fake_sysfs(root: Path, nodes: dict[int, tuple[str, int | None]]) -> Path:
    """``nodes``: id -> (cpulist, MemTotal kB or None for no meminfo file)."""
    for node_id, (cpulist, mem_kb) in nodes.items():
        d = root / f"node{node_id}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpulist + "\n")
        if mem_kb is not None:
            (d / "meminfo").write_text(f"Node {node_id} MemTotal:       {mem_kb} kB\n"
                                       f"Node {node_id} MemFree:        {mem_kb // 2} kB\n")
    (root / "possible").write_text("0-63\n")  # sysfs has files beside the node directories
    return root


def summary(plans):
    return [(p.node, format_cpulist(p.cpus), format_cpulist(p.mems), p.memory_mib, p.heap_mib, p.memtable_mib)
            for p in plans]


def test_cpulist_syntax():
    assert parse_cpulist("0-3,8-9\n") == (0, 1, 2, 3, 8, 9)
    assert parse_cpulist("5") == (5,) and parse_cpulist("") == ()
    assert format_cpulist([9, 8, 0, 1, 2, 3, 12]) == "0-3,8-9,12"
    with pytest.raises(ValueError, match="not a CPU/node list"):
        parse_cpulist("0-x")
    with pytest.raises(ValueError, match="not a CPU/node list"):
        parse_cpulist("7-3")


def test_one_node_with_an_uneven_cpu_list(tmp_path):
    root = fake_sysfs(tmp_path, {0: ("0-3,8-9", 16 * GiB_KB)})
    [plan] = plan_instances(root=root)
    # 16384 MiB: max(min(8192, 1024), min(4096, 8192)) = 4096; memtable 1024
    assert summary([plan]) == [(0, "0-3,8-9", "0", 16384, 4096, 1024)]
    assert plan.heap_source == "rule" and plan.heap == "4096M"
    assert plan.binding == Binding((0, 1, 2, 3, 8, 9), (0,), node=0)
    assert plan.binding.numactl_args()[1:] == ["--physcpubind=0-3,8-9", "--membind=0"]

    # two instances pinned to one CPU each: each gets half the node, 8192 MiB -> heap 2048
    two = plan_instances(2, root=root, cpus_per_instance=1)
    assert summary(two) == [(0, "0", "0", 8192, 2048, 512), (0, "1", "0", 8192, 2048, 512)]
    assert two[1].binding.numactl_args()[1:] == ["--physcpubind=1", "--membind=0"]
    # three CPUs each over the uneven list: 0-2, then 3 and 8-9
    assert [format_cpulist(p.cpus) for p in plan_instances(2, root=root, cpus_per_instance=3)] == ["0-2", "3,8-9"]
    # explicit CPUs
    assert [format_cpulist(p.cpus) for p in plan_instances(root=root, cpu_sets=["8", [9, 3]])] == ["8", "3,9"]
    # an explicit heap replaces the rule, memtable follows it; the rule stays on record
    [set_heap] = plan_instances(root=root, heap="1G")
    assert (set_heap.heap_mib, set_heap.memtable_mib, set_heap.heap_rule_mib, set_heap.heap_source) == \
        (1024, 256, 4096, "set")
    # one over the instance's memory share is the operator's call: planned, and flagged
    [big] = plan_instances(root=root, heap="20G")
    assert big.over_share and "OVER its memory share of 16384 MiB" in big.describe()
    # unpinned: no binding, every CPU
    [free] = plan_instances(root=root, pin=False)
    assert free.binding is None and free.cpus == (0, 1, 2, 3, 8, 9)


def test_two_nodes_uneven(tmp_path):
    root = fake_sysfs(tmp_path, {0: ("0-5", 64 * GiB_KB), 1: ("6-7,12-15", 3 * GiB_KB)})
    # node 0: 65536 MiB -> max(1024, min(16384, 8192)) = 8192 (the 8 GiB cap), memtable 2048
    # node 1:  3072 MiB -> max(min(1536, 1024), 768) = 1024 (the 1 GiB floor wins), memtable 256
    assert summary(plan_instances(root=root)) == [
        (0, "0-5", "0", 65536, 8192, 2048),
        (1, "6-7,12-15", "1", 3072, 1024, 256),
    ]
    # four instances round-robin: two per node, each half its node's memory
    # node 0: 32768 -> 8192; node 1: 1536 -> max(min(768, 1024), 384) = 768, memtable 192
    assert summary(plan_instances(4, root=root)) == [
        (0, "0-5", "0", 32768, 8192, 2048), (1, "6-7,12-15", "1", 1536, 768, 192),
        (0, "0-5", "0", 32768, 8192, 2048), (1, "6-7,12-15", "1", 1536, 768, 192),
    ]
    # two CPUs each: the second instance on node 1 takes 12-13 (after 6-7)
    assert [format_cpulist(p.cpus) for p in plan_instances(4, root=root, cpus_per_instance=2)] == \
        ["0-1", "6-7", "2-3", "12-13"]
    # a cpuset that leaves the launcher CPUs 1-2 and 7 narrows each node's binding
    assert [format_cpulist(p.cpus) for p in plan_instances(root=root, allowed_cpus={1, 2, 7})] == ["1-2", "7"]


def test_four_nodes_with_a_memory_only_node(tmp_path):
    root = fake_sysfs(tmp_path, {
        0: ("0-3,16-19", 16315124),   # a real-looking MemTotal: 15932 MiB
        1: ("4-7,20-23", 8 * GiB_KB),
        2: ("8-11", 2 * GiB_KB),
        3: ("12-15,24-31", 1 * GiB_KB),
        4: ("", 32 * GiB_KB),          # memory only (CXL, HBM): holds no instance
    })
    assert [n.node_id for n in numa_nodes(root)] == [0, 1, 2, 3, 4]
    assert summary(plan_instances(root=root)) == [
        (0, "0-3,16-19", "0", 15932, 3983, 995),    # 15932//2//2 = 3983 (integer MB, as expr does)
        (1, "4-7,20-23", "1", 8192, 2048, 512),
        (2, "8-11", "2", 2048, 1024, 256),          # half of 2048 = 1024 (its cap)
        (3, "12-15,24-31", "3", 1024, 512, 128),    # half of 1024 = 512
    ]
    # unpinned: all nodes' memory (the memory-only one too) split over the instances
    free = plan_instances(2, root=root, pin=False)
    assert [p.memory_mib for p in free] == [(15932 + 8192 + 2048 + 1024 + 32768) // 2] * 2
    assert free[0].mems == (0, 1, 2, 3, 4) and free[0].heap_mib == 7495  # 29982//2//2


def test_impossible_plans_are_typed_errors(tmp_path):
    one = fake_sysfs(tmp_path / "one", {0: ("0-3,8-9", 16 * GiB_KB)})
    with pytest.raises(NumaPlanError, match="more instances than CPUs"):
        plan_instances(7, root=one)
    with pytest.raises(NumaPlanError, match="3 instances x 2 CPU"):
        plan_instances(3, root=one, cpus_per_instance=2, allowed_cpus={0, 1, 2, 3})
    with pytest.raises(NumaPlanError, match="already pin instance 0"):
        plan_instances(root=one, cpu_sets=["0-1", "1"])
    with pytest.raises(NumaPlanError, match="do not exist"):
        plan_instances(root=one, cpu_sets=["0", "5"])
    with pytest.raises(NumaPlanError, match="empty CPU set"):
        plan_instances(root=one, cpu_sets=["0", ""])
    with pytest.raises(NumaPlanError, match="outside the allowed"):
        plan_instances(root=one, cpu_sets=["8"], allowed_cpus={0, 1})
    with pytest.raises(NumaPlanError, match="not a heap size"):
        plan_instances(root=one, heap="lots")
    with pytest.raises(NumaPlanError, match="at least 1"):
        plan_instances(0, root=one)
    two = fake_sysfs(tmp_path / "two", {0: ("0-1", GiB_KB), 1: ("2-3", GiB_KB)})
    with pytest.raises(NumaPlanError, match="span nodes"):
        plan_instances(root=two, cpu_sets=["1-2"])
    empty = fake_sysfs(tmp_path / "nomem", {0: ("0-1", None)})
    with pytest.raises(NumaPlanError, match="no MemTotal"):
        plan_instances(root=empty)
    cpuless = fake_sysfs(tmp_path / "cpuless", {0: ("", GiB_KB)})
    with pytest.raises(NumaPlanError, match="has a CPU"):
        plan_instances(root=cpuless)
    (tmp_path / "none").mkdir()
    with pytest.raises(NumaPlanError, match="no NUMA node directories"):
        plan_instances(root=tmp_path / "none")


def test_binding_compares_cpus_memory_policy_and_cpuset():
    plan = Binding((0,), (0,))

    def seen(**kw):
        base = dict(pid=1, exe="/usr/bin/java", cpus=(0,), mems_allowed=(0,), policy="bind", policy_nodes=(0,),
                    threads=3)
        return ObservedBinding(**{**base, **kw})

    assert plan.problems(seen()) == []
    # membind does not change Mems_allowed_list (the cpuset's): a wider cpuset is fine
    assert plan.problems(seen(mems_allowed=(0, 1))) == []
    assert plan.problems(seen(cpus=(0, 1))) == ["Cpus_allowed_list is 0-1, the plan says 0"]
    assert plan.problems(seen(policy="default", policy_nodes=())) == \
        ["memory policy is default, the plan says bind:0"]
    assert "does not allow the planned nodes 0" in plan.problems(seen(mems_allowed=(1,)))[0]
    assert plan.problems(seen(stray_threads={42: (1,)})) == ["thread 42 is allowed CPUs 1"]


# --- the launch path ----------------------------------------------------------------------------
class _PinnedSleeper(ManagedServer):
    """A stand-in server bound to ``cpus`` through the one launch path."""

    def __init__(self, workdir: Path, cpus: tuple[int, ...]):
        super().__init__("pinned-sleeper", workdir)
        self.cpus = cpus

    def binding(self):
        return Binding(self.cpus, (0,))

    def command(self):
        return ["sleep", "300"]

    def is_ready(self):
        return self.is_running()


_ESCAPE = """
import os, sys, time
os.sched_setaffinity(0, {0, 1})  # the server widens its own affinity, as a wrapper script might
open(sys.argv[1], "w").close()
time.sleep(300)
"""


class _EscapingServer(_PinnedSleeper):
    """Started bound to CPU 0, then allows itself CPUs 0-1: the plan says 0, /proc says 0-1."""

    @property
    def ready_file(self) -> Path:
        return self.workdir / "ready"

    def command(self):
        return [sys.executable, "-c", _ESCAPE, str(self.ready_file)]

    def is_ready(self):
        return self.ready_file.exists()


def test_a_launch_is_verified_from_proc(tmp_path):
    server = _PinnedSleeper(tmp_path, (1,))
    try:
        server.start(timeout=20)
        pid = server.pid()
        seen = observe_binding(pid)
        assert (seen.cpus, seen.policy, seen.policy_nodes) == ((1,), "bind", (0,))
        assert os.path.basename(seen.exe) == "sleep"  # env and numactl exec'd in place: the pid is the server
        assert "binding verified in /proc" in server.log_file.read_text()
        status = server.status()["binding"]
        assert status["ok"] and status["planned"] == {"cpus": "1", "mems": "0", "node": None}
    finally:
        server.stop(timeout=10)


def test_a_binding_mismatch_stops_the_server_and_is_an_error(tmp_path):
    server = _EscapingServer(tmp_path, (0,))
    with pytest.raises(NumaBindingError) as caught:
        server.start(timeout=30)
    message = str(caught.value)
    assert "Planned: cpus 0, mems 0 (CPUs of a node)" in message
    assert "Cpus_allowed_list is 0-1, the plan says 0" in message
    assert "it was stopped" in message
    assert server.pid() is None  # stopped, not left running unpinned
    pid_line = [line for line in server.log_file.read_text().splitlines() if line.startswith("=== start")]
    assert "--physcpubind=0" in pid_line[-1]


# --- a real ring: 2 Cassandra instances pinned to one CPU each ------------------------------------
def test_two_cassandra_instances_pinned_one_cpu_each_are_verified(tmp_path, capsys):
    from asgard.cli import _print_status
    from asgard.resources.cassandra import CassandraCluster
    from asgard.resources.cassandra.nodetool import ring_status

    ring = CassandraCluster(nodes=2, first_index=14, heap="1G", cpus_per_instance=1, workdir=tmp_path)
    assert [p.binding.numactl_args()[1:] for p in ring.plan] == [
        ["--physcpubind=0", "--membind=0"], ["--physcpubind=1", "--membind=0"]]
    try:
        ring.start()
        assert ring_status(ring.nodes[0].nodetool("status")) == {"127.0.0.14": "UN", "127.0.0.15": "UN"}
        for node, cpu in zip(ring.nodes, (0, 1)):
            pid = node.pid()
            seen = observe_binding(pid)
            assert os.path.basename(seen.exe) == "java"
            assert seen.cpus == (cpu,) and not seen.stray_threads and seen.threads > 20  # every JVM thread
            assert (seen.policy, seen.policy_nodes) == ("bind", (0,))
            assert psutil.Process(pid).cpu_affinity() == [cpu]
            # the planned memtable space is in effect
            assert node.settings(["memtable_heap_space"]) == {"memtable_heap_space": "256MiB"}
        rows = ring.status()
        assert all(r["binding"]["ok"] for r in rows)
        assert rows[1]["placement"]["cpus"] == "1" and rows[1]["placement"]["heap_mib"] == 1024
        _print_status(rows, False)  # what `asgard cassandra status` prints for these rows
        text = capsys.readouterr().out
        assert "launched with: cpus 1, mems 0 (CPUs of a node); heap 1024 MiB (set; the rule gives" in text
        assert f"/proc/{ring.nodes[1].pid()}: cpus 1, mems_allowed 0, policy bind:0" in text
        assert "(as planned)" in text
    finally:
        ring.stop()
    assert not any(n.is_running() for n in ring.nodes)


def test_bench_scaling_json_tiny():
    from asgard.cli import main

    args = ["bench", "scaling", "--json", "--seconds", "0.5", "--clients", "2", "--heap", "512"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [r["config"] for r in report["rows"]] == ["1 pinned", "2 pinned", "unpinned"]
    assert [r["total_heap_mib"] for r in report["rows"]] == [512, 1024, 1024]
    assert all(r["put_mb_s"] > 0 and r["get_mb_s"] > 0 for r in report["rows"])
    assert all(r["binding_ok"] for r in report["rows"])
    if report["machine"]["numa_nodes"] == 1:
        assert "ONE NUMA node" in report["note"] and report["rows"][0]["pinning"] == "1 cpu(s) each"
    assert report["efficiency"]["put"]["scaling_efficiency"] > 0
    assert report["seed_002"] == {"in_socket_efficiency": 0.98, "system_efficiency": 0.90}


def test_bench_scaling_load_when_clients_complete_nothing(tmp_path):
    """CI once failed with ZeroDivisionError: a client thread that started after its put window
    (a starved CPU) wrote nothing, and its get phase read from an empty list. A window of 0 s
    makes every client write nothing, through the bench's own load loop on a real (local) store:
    each then reads the object it pre-wrote, and the rates are 0, not a crash."""
    from asgard.resources.stores.local import LocalObjectStore
    from asgard_bench.scaling import _load, _phase, _prewrite

    store = LocalObjectStore(tmp_path / "store")
    payload = os.urandom(4096)
    assert _load(store, 3, 0.0, payload, "starved") == (0.0, 0.0)

    written = _prewrite(store, 3, payload, "starved2")
    puts, _ = _phase(store, "put", 3, 0.0, payload, "starved2", written)
    assert puts == [0, 0, 0] and [len(w) for w in written] == [1, 1, 1]
    gets, elapsed = _phase(store, "get", 3, 0.2, payload, "starved2", written)
    assert all(g > 0 for g in gets) and elapsed >= 0.2
