"""Interleaved A/B of one producer's put at replication factor 1, 2 and 3 on the ring of the emulated
hosts (``asgard hosts up``), the evidence for a replication lever per edge (issue 37, part 3).

    python scripts/ab_replication.py --sizes 64,256 --rounds 5

The puts run in the first host's namespace, as a step on that host stores its output: each factor
is a keyspace of its own on the same ring (``asgard_ab_rf<N>``, LOCAL_QUORUM at every factor: 1, 2
and 2 replicas acknowledge), the output random float64 (no codec), 1 MiB chunks. Each round puts it
once per factor, in an order rotating across rounds, and once more at RF 3 (RF 3'): RF3/RF3' is the
noise floor. ``RF3r1`` is the RF 3 store's put with ``replicas=1`` (its chunks in the keyspace's
single-replica sibling, its head at RF 3): the lever as users reach it. Each stored output is read
back whole and compared before it counts.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

import numpy as np

MiB = 1024 * 1024
FACTORS = (1, 2, 3)


def measure(args) -> None:
    from asgard.resources.stores import ObjectKey
    from asgard.resources.stores.cql import CassandraObjectStore

    options = json.loads(args.ring_options)
    options["password"] = os.environ["ASGARD_AB_PASSWORD"]
    stores = {f"RF{n}": CassandraObjectStore(**{**options, "keyspace": f"asgard_ab_rf{n}", "replication_factor": n})
              for n in FACTORS}
    stores["RF3'"] = stores["RF3"]
    stores["RF3r1"] = stores["RF3"]
    replicas = {"RF3r1": 1}  # the others at their store's factor
    scope = f"run/ab-replication-{uuid.uuid4().hex[:8]}"
    print(f"ring {stores['RF3'].identity()}; puts from this host's namespace; {args.rounds} rounds per size, "
          f"order rotating over {list(stores)}")
    try:
        for mib in (int(s) for s in args.sizes.split(",")):
            value = np.random.default_rng(mib).random(mib * MiB // 8)
            for name, store in stores.items():  # warm-up: schema, sessions, prepared statements
                store.put(ObjectKey(scope, f"warm-{mib}-{name}"), value[: 3 * MiB // 8], replicas=replicas.get(name))
            times: dict[str, list[float]] = {name: [] for name in stores}
            names = list(stores)
            for r in range(args.rounds):
                for name in names[r % len(names):] + names[: r % len(names)]:
                    key = ObjectKey(scope, f"out-{mib}-{r}-{name}")
                    t0 = time.perf_counter()
                    stores[name].put(key, value, replicas=replicas.get(name))
                    times[name].append(time.perf_counter() - t0)
                    back, _ = stores[name].get(key)
                    assert np.array_equal(back, value), (name, mib, r)
                    del back
            print(f"\n{mib} MiB, a put each")
            for name in names:
                med = statistics.median(times[name])
                print(f"  {name:<5} median {med:.3f} s ({mib / med:6.0f} MiB/s)  rounds {[round(t, 3) for t in times[name]]}")
            for slow, fast in (("RF3", "RF1"), ("RF3", "RF2"), ("RF3", "RF3r1"), ("RF3", "RF3'")):
                ratio = [a / b for a, b in zip(times[slow], times[fast])]
                print(f"  {slow}/{fast} per round {[round(x, 2) for x in ratio]}: median {statistics.median(ratio):.2f}x, "
                      f"range {min(ratio):.2f}..{max(ratio):.2f}")
            del value
    finally:
        for n in FACTORS:
            stores[f"RF{n}"].purge_scope(scope)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="64,256", help="output sizes in MiB, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ring-options", help=argparse.SUPPRESS)  # JSON client options (the child on a host)
    args = ap.parse_args()
    if args.ring_options:
        return measure(args)
    from asgard.resources.workers.deployment import EmulatedDeployment

    deployment = EmulatedDeployment()
    if not deployment.hosts_up():
        sys.exit("the emulated hosts are not up: `asgard hosts up` first")
    options = deployment.ring().client_options()
    env = {**os.environ, "ASGARD_AB_PASSWORD": options.pop("password").strip()}
    host = deployment.hosts.hosts[0]
    print(f"hosts {[h.name for h in deployment.hosts.hosts]}; puts on {host.name}")
    subprocess.run([*host.exec_prefix(), sys.executable, __file__, "--sizes", args.sizes, "--rounds", str(args.rounds),
                    "--ring-options", json.dumps(options)], env=env, check=True)


if __name__ == "__main__":
    main()
