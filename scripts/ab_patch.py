"""Cassandra with the project's patches (resources/cassandra/patches) against the release alone,
side by side: two own instances (127.0.0.24 patched, 127.0.0.25 release, same heap and config),
the same objects read from each in alternating order, round after round. Reports per instance
the median over rounds of the JVM's CPU seconds per GB read (from /proc) and of read MB/s, and
the per-round ratio patched / release (drift hits both alike, so the ratio is the figure).

    PYTHONPATH=. python scripts/ab_patch.py --sizes-mib 1,64 --rounds 12

With ``--property NAME=VALUE`` both instances run the patches, and "patched" is the one started
with that system property (a patch that a property turns on, e.g. asgard.sep_stop_check_ns=50000);
``--baseline-property`` starts the other one with another value.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

import numpy as np

from asgard_bench.io import open_peer
from asgard.resources.cassandra import CassandraNode
from asgard.resources.paths import run_dir
from asgard.resources.process import context_switches, process_cpu_seconds
from asgard.resources.stores import ObjectKey

MiB = 1024 * 1024


def release_only(node: CassandraNode) -> None:
    """This instance starts with the release's jars alone (the patches jar leads the classpath)."""
    command = node.command

    def unpatched() -> list[str]:
        cmd = command()
        i = cmd.index("-cp")
        cmd[i + 1] = cmd[i + 1].split(os.pathsep)[-1]
        return cmd

    node.command = unpatched


def print_ratios(label: str, rows: dict, cpu_unit: str, rate_unit: str) -> None:
    """Medians (and ranges) of the per-round ratios patched / release of ``(cpu, rate, ...)`` rows."""
    cpu = [a[0] / b[0] for a, b in zip(rows["patched"], rows["release"])]
    rate = [a[1] / b[1] for a, b in zip(rows["patched"], rows["release"])]
    print(f"{label}: server CPU per {cpu_unit} median {statistics.median(cpu):.3f} "
          f"(rounds {min(cpu):.2f}-{max(cpu):.2f}), {rate_unit} median {statistics.median(rate):.3f} "
          f"(rounds {min(rate):.2f}-{max(rate):.2f})")


def small_ops(nodes: dict, stores: dict, count: int, rounds: int) -> None:
    """10 KiB put then get, ``count`` of each per round: server CPU ms per op and ops/s."""
    payload = np.random.default_rng(0).bytes(10 * 1024)
    rows = {n: [] for n in nodes}
    for r in range(rounds + 2):  # the first two rounds warm up
        for name in (list(nodes) if r % 2 == 0 else list(nodes)[::-1]):
            scope = f"ab-{uuid.uuid4().hex[:8]}"
            keys = [ObjectKey.for_run(scope, "small", str(i)) for i in range(count)]
            pid = nodes[name].pid()
            w0, c0, t0 = context_switches(pid), process_cpu_seconds(pid), time.perf_counter()
            for key in keys:
                stores[name].put(key, payload)
            for key in keys:
                stores[name].get(key)
            dt, c1, w1 = time.perf_counter() - t0, process_cpu_seconds(pid), context_switches(pid)
            stores[name].purge_scope(f"run/{scope}")
            if r >= 2:
                rows[name].append(((c1 - c0) * 1000 / (2 * count), 2 * count / dt, (w1 - w0) / (2 * count)))
    for name, got in rows.items():
        print(f"  10KiB {name:>9} srv CPU ms/op {statistics.median(g[0] for g in got):.3f} "
              f"ops/s {statistics.median(g[1] for g in got):.1f} "
              f"ctx switches/op {statistics.median(g[2] for g in got):.1f}  " + " ".join(f"{g[0]:.2f}" for g in got))
    print_ratios("  10KiB patched/release", rows, "op", "ops/s")


def write_block(nodes: dict, stores: dict, data, size: int, rounds: int) -> None:
    """Puts of ``size`` MiB objects, 128 MiB per instance per round (the flushes they cause land
    in the rounds of both alike, the order alternating): server CPU per GB and write MB/s."""
    writes = max(2, 128 // size)
    rows = {n: [] for n in nodes}
    for r in range(rounds):
        for name in (list(nodes) if r % 2 == 0 else list(nodes)[::-1]):
            scope = f"ab-{uuid.uuid4().hex[:8]}"
            pid = nodes[name].pid()
            c0, t0 = process_cpu_seconds(pid), time.perf_counter()
            for i in range(writes):
                stores[name].put(ObjectKey.for_run(scope, "io", f"w{i}"), data)
            dt, c1 = time.perf_counter() - t0, process_cpu_seconds(pid)
            rows[name].append(((c1 - c0) / (writes * size / 1024), writes * size / dt))
            stores[name].purge_scope(f"run/{scope}")
    for name, got in rows.items():
        print(f"{size:>4}MiB {name:>9} write: srv CPU s/GB {statistics.median(g[0] for g in got):.3f} "
              f"MB/s {statistics.median(g[1] for g in got):.1f}")
    print_ratios(f"{size:>4}MiB patched/release write", rows, "GB", "MB/s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mib", default="1,64")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--warmup-gib", type=float, default=2.0, help="read per instance before measuring (JIT)")
    ap.add_argument("--heap", default="2G")
    ap.add_argument("--small-ops", type=int, default=300, help="10 KiB puts and gets per round (0: none)")
    ap.add_argument("--keep", action="store_true", help="leave both instances running")
    ap.add_argument("--writes", action="store_true", help="also time puts of each size, 128 MiB per round")
    ap.add_argument("--property", default=None,
                    help="NAME=VALUE[,NAME=VALUE...]: both run the patches, only 'patched' with these -D properties")
    ap.add_argument("--baseline-property", default=None,
                    help="NAME=VALUE[,...]: with --property, the other instance ('release') runs with these")
    args = ap.parse_args()
    # both instances with upstream's idle-worker spin unless --property sets it on "patched"
    # (the launcher's small-host default would otherwise apply to both)
    os.environ["ASGARD_CASSANDRA_SEP_STOP_CHECK_NS"] = ""
    nodes = {}
    for name, index in (("patched", 24), ("release", 25)):
        chosen = args.property if name == "patched" else args.baseline_property if args.property else None
        props = dict(item.split("=", 1) for item in chosen.split(",")) if chosen else None
        node = CassandraNode(index=index, heap=args.heap, workdir=run_dir("cassandra", f"ab-patch{index}"),
                             system_properties=props)
        if name == "release" and not args.property:
            release_only(node)
        if node.is_running():
            node.stop()
        node.start()
        nodes[name] = node
    argv = {n: open(f"/proc/{node.pid()}/cmdline", "rb").read().split(b"\0") for n, node in nodes.items()}
    cps = {n: a[a.index(b"-cp") + 1].decode() for n, a in argv.items()}
    assert "patches.jar" in cps["patched"] and ("patches.jar" in cps["release"]) == bool(args.property), cps
    stores = {n: open_peer("cassandra", **node.client_options()) for n, node in nodes.items()}
    if args.small_ops:
        small_ops(nodes, stores, args.small_ops, args.rounds)
    print(f"{'object':>7} {'instance':>9} {'srv CPU s/GB':>13} {'read MB/s':>10} {'ctx sw/MiB':>10}  per-round srv CPU s/GB")
    for size in [int(s) for s in args.sizes_mib.split(",")]:
        data = np.random.default_rng(size).integers(0, 255, size * MiB, dtype=np.uint8)
        reads = max(6, 128 // size)
        keys = {}
        for name, store in stores.items():
            keys[name] = ObjectKey.for_run(f"ab-{uuid.uuid4().hex[:8]}", "io", f"{size}mib")
            store.put(keys[name], data)
            for _ in range(max(1, int(args.warmup_gib * 1024 / size))):
                store.get(keys[name])
        rows = {n: [] for n in nodes}
        for r in range(args.rounds):
            for name in (list(nodes) if r % 2 == 0 else list(nodes)[::-1]):
                pid = nodes[name].pid()
                w0, c0, t0 = context_switches(pid), process_cpu_seconds(pid), time.perf_counter()
                for _ in range(reads):
                    stores[name].get(keys[name])
                dt, c1, w1 = time.perf_counter() - t0, process_cpu_seconds(pid), context_switches(pid)
                rows[name].append(((c1 - c0) / (reads * size / 1024), reads * size / dt, (w1 - w0) / (reads * size)))
        for name, got in rows.items():
            print(f"{size:>4}MiB {name:>9} {statistics.median(g[0] for g in got):>13.3f} "
                  f"{statistics.median(g[1] for g in got):>10.1f} {statistics.median(g[2] for g in got):>10.1f}  "
                  + " ".join(f"{g[0]:.2f}" for g in got))
        print_ratios(f"{size:>4}MiB patched/release", rows, "GB", "read MB/s")
        for name, store in stores.items():
            store.purge_scope(keys[name].scope)
        if args.writes:
            write_block(nodes, stores, data, size, args.rounds)
    if not args.keep:
        for node in nodes.values():
            node.stop()
            node.wipe()


if __name__ == "__main__":
    main()
