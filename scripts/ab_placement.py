"""Interleaved A/B of a consumer's read of one output through its producer-local copy against the
ring (the local Cassandra node on loopback), as a step's ``load_input`` reads it (``store.get``:
the manifest from the ring, then the bytes, checked, and unpickled).

    python scripts/ab_placement.py --sizes 64,256 --rounds 7
    python scripts/ab_placement.py --hosts --sizes 64,256 --rounds 7   # across 3 emulated hosts

With ``--hosts`` the ring is 3 emulated hosts (RF 3, TLS, a login; :func:`emulated_host_ring`) and
the reads run in the first host's namespace: a ring read at LOCAL_QUORUM needs a second replica,
on another host, over the hosts' bridge and TLS.

Per size, the output (random float64: no codec) is stored once with a local copy. Each round reads
it three ways in an order rotating across rounds: through the copy, and twice from the ring (a store
with ``local_reads=False``, as a reader on another host). ring/local per round is the figure; the
two ring reads of a round, ring/ring', give the A/A noise floor. Then the producer's side: puts
of the same output with its copy and without, alternating, the copy's cost.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid

import numpy as np

from asgard.resources.stores import ObjectKey
from asgard.resources.stores.cql import CassandraObjectStore
from asgard.resources.stores.local_copy import PRODUCER_LOCAL, PlacementChoice

MiB = 1024 * 1024


def timed_get(store: CassandraObjectStore, key: ObjectKey, expect_source: str) -> float:
    t0 = time.perf_counter()
    value, result = store.get(key)
    seconds = time.perf_counter() - t0
    assert result.source == expect_source, (result.source, result.fallback)
    del value
    return seconds


def token_aware_only(get):
    """``get`` with no member counted as this host's: the query plan in token-aware order alone, as
    before the nearest-replica routing (a benchmark's switch; the policy reads the check per call)."""
    from asgard.resources.stores.cql import cluster as cql_cluster

    def timed() -> float:
        nearest = cql_cluster.is_local_address
        cql_cluster.is_local_address = lambda address: False
        try:
            return get()
        finally:
            cql_cluster.is_local_address = nearest
    return timed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="64,256", help="output sizes in MiB, comma-separated")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--keyspace", default="asgard_ab")
    ap.add_argument("--hosts", action="store_true", help="on a ring across 3 emulated hosts, read from the first")
    ap.add_argument("--one", action="store_true", help="also read the ring at consistency ONE")
    ap.add_argument("--ring-options", help=argparse.SUPPRESS)  # JSON client options (the --hosts child)
    args = ap.parse_args()
    if args.hosts:
        return across_hosts(args)
    os.environ.setdefault("ASGARD_HOME", tempfile.mkdtemp(prefix="asgard-ab-placement-"))
    options = json.loads(args.ring_options) if args.ring_options else {}
    if "ASGARD_AB_PASSWORD" in os.environ:  # the --hosts child's login: its environment, not its command line
        options["password"] = os.environ["ASGARD_AB_PASSWORD"]
    local = CassandraObjectStore(keyspace=args.keyspace, **options)
    ring = CassandraObjectStore(keyspace=args.keyspace, local_reads=False, **options)
    # --one: the chunks read at ONE from the nearest replica (chunk_reads="nearest-one")
    ring_one = CassandraObjectStore(keyspace=args.keyspace, local_reads=False,
                                    **{**options, "chunk_reads": "nearest-one"}) if args.one else None
    scope = f"run/ab-placement-{uuid.uuid4().hex[:8]}"
    print(f"ASGARD_HOME {os.environ['ASGARD_HOME']}; ring {local.identity()}; {args.rounds} rounds per size, "
          "order rotating (local, ring, ring'), each a store.get of the whole output")
    try:
        for mib in (int(s) for s in args.sizes.split(",")):
            key = ObjectKey(scope, f"out-{mib}")
            value = np.random.default_rng(mib).random(mib * MiB // 8)
            put = local.put(key, value, placement=PlacementChoice(PRODUCER_LOCAL, "benchmark"))
            assert put.placement == PRODUCER_LOCAL, put.placement_reason
            del value
            ways = {"local": lambda: timed_get(local, key, "local copy"), "ring": lambda: timed_get(ring, key, "ring"),
                    "ring'": lambda: timed_get(ring, key, "ring")}
            if ring_one is not None:
                ways["ring ONE"] = lambda: timed_get(ring_one, key, "ring")
                # the ring at the store's level, coordinated by any replica (the routing before it)
                ways["ring any"] = token_aware_only(lambda: timed_get(ring, key, "ring"))
            for way in ways.values():  # warm-up: sessions, the page cache, the memtable's first touch
                way()
            times: dict[str, list[float]] = {name: [] for name in ways}
            names = list(ways)
            for r in range(args.rounds):
                for name in names[r % len(names):] + names[: r % len(names)]:
                    times[name].append(ways[name]())
            ratio = [g / l for g, l in zip(times["ring"], times["local"])]
            aa = [a / b for a, b in zip(times["ring"], times["ring'"])]
            print(f"\n{mib} MiB (stored {put.manifest.stored_bytes / MiB:.0f} MiB in {put.manifest.chunks} chunks, "
                  f"put with its copy {put.seconds:.3f} s)")
            for name in names:
                med = statistics.median(times[name])
                print(f"  {name:<8} median {med:.4f} s ({mib / med:7.0f} MiB/s)  rounds "
                      f"{[round(t, 4) for t in times[name]]}")
            print(f"  ring/local per round {[round(x, 2) for x in ratio]}: median {statistics.median(ratio):.2f}x, "
                  f"range {min(ratio):.2f}..{max(ratio):.2f}")
            print(f"  A/A ring/ring' per round: median {statistics.median(aa):.3f}, range {min(aa):.3f}..{max(aa):.3f} "
                  "(the noise floor)")
            if ring_one is not None:
                for slow, fast in (("ring", "ring ONE"), ("ring any", "ring"), ("ring any", "ring ONE")):
                    r_ = [a / b for a, b in zip(times[slow], times[fast])]
                    print(f"  {slow}/{fast} per round {[round(x, 2) for x in r_]}: median {statistics.median(r_):.2f}x, "
                          f"range {min(r_):.2f}..{max(r_):.2f}")
                print(f"  chunks read again at the store's level (missing at ONE): {ring_one.chunk_read_fallbacks}")
            print(f"  local-copy counts {dict(local.local_copies.counts)}")
            value = np.random.default_rng(mib).random(mib * MiB // 8)
            puts: dict[str, list[float]] = {"with copy": [], "ring only": []}
            for r in range(args.rounds):
                for name in (("with copy", "ring only") if r % 2 == 0 else ("ring only", "with copy")):
                    placement = PlacementChoice(PRODUCER_LOCAL if name == "with copy" else "ring", "benchmark")
                    puts[name].append(local.put(ObjectKey(scope, f"put-{mib}-{name[0]}"), value,
                                                placement=placement).seconds)
            del value
            cost = [w / o for w, o in zip(puts["with copy"], puts["ring only"])]
            print(f"  put with copy / ring only per round {[round(x, 2) for x in cost]}: median "
                  f"{statistics.median(cost):.2f}x, range {min(cost):.2f}..{max(cost):.2f} (medians "
                  f"{statistics.median(puts['with copy']):.3f} / {statistics.median(puts['ring only']):.3f} s)")
    finally:
        local.purge_scope(scope)


def across_hosts(args) -> None:
    """Bring up 3 emulated hosts with their ring, run this script's reads in the first host's namespace."""
    import subprocess
    import sys

    from asgard.resources.cassandra.hosts import emulated_host_ring

    with emulated_host_ring(3, replication_factor=3, heap="768M", instances_per_host=1) as (hosts, ring):
        options = ring.client_options()
        env = {**os.environ, "ASGARD_AB_PASSWORD": options.pop("password").strip()}
        options["replication_factor"] = 3
        print(f"ring across {[h.name for h in hosts.hosts[:3]]} (RF 3, LOCAL_QUORUM, TLS); reads on {hosts.hosts[0].name}")
        subprocess.run([*hosts.hosts[0].exec_prefix(), sys.executable, __file__, "--sizes", args.sizes, "--rounds",
                        str(args.rounds), "--keyspace", args.keyspace, "--ring-options", json.dumps(options),
                        *(["--one"] if args.one else [])],
                       env=env, check=True)


if __name__ == "__main__":
    main()
