"""What the copy on a routed edge is worth to one run on the 3 emulated hosts: the ETL on the hosts'
host-routed celery executor (asgard_dagster.step_routing), its outputs with the loop's fields
(codec and replicas auto), alternating placement "auto" (the routed edges keep a copy, read on
their producer's host) and "ring" (the same routing, no copy); one untimed run of each first.
Prints each run's E2E and the routed edges' store seconds (write + read), and the ratio of medians
with the A/A spread of the ring runs beside it.
Usage: .venv/bin/python scripts/ab_routed_copy.py [--scale 0.5] [--fanout 4] [--runs 6]   (asgard hosts up first)"""
from __future__ import annotations

import argparse
import statistics
import tempfile

ROUTED_EDGES = ("filter_orders.result", "join_customers.result")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--fanout", type=int, default=4)
    ap.add_argument("--runs", type=int, default=6)
    args = ap.parse_args()
    import dagster as dg

    from asgard.pipelines.jobs import run_app
    from asgard.resources.workers.deployment import EmulatedDeployment
    from asgard_bench.day import edge_decisions

    fields = {"codec": "auto", "replicas": "auto"}
    rows: dict[str, list[tuple[float, float]]] = {"auto": [], "ring": []}
    with EmulatedDeployment().client_environment_set(), tempfile.TemporaryDirectory() as tmp:
        with dg.DagsterInstance.local_temp(tempdir=tmp) as instance:
            for n in range(args.runs + 1):
                for placement in (("auto", "ring") if n % 2 else ("ring", "auto")):
                    run = run_app("etl_columnar", "cassandra", fanout=args.fanout, scale=args.scale, instance=instance,
                                  network="hosts3", io_manager_config={**fields, "placement": placement})
                    assert run.success, run.run_id
                    edges = edge_decisions(instance, run.run_id)
                    store_s = sum(edges[e]["write_s"] + edges[e]["read_s"] for e in ROUTED_EDGES)
                    places = {e: edges[e]["placement"] for e in ROUTED_EDGES}
                    print(f"{'warm-up' if n == 0 else f'run {n}':8} {placement:5} E2E {run.seconds:6.2f} s  "
                          f"routed edges' store {store_s:5.2f} s  {places}", flush=True)
                    if n:
                        rows[placement].append((run.seconds, store_s))
    med = {p: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for p, v in rows.items()}
    ring = [r[0] for r in rows["ring"]]
    spread = (max(ring) - min(ring)) / statistics.median(ring) * 100
    print(f"median E2E: auto {med['auto'][0]:.2f} s, ring {med['ring'][0]:.2f} s: ring/auto {med['ring'][0] / med['auto'][0]:.3f}x "
          f"(the ring runs' spread {spread:.1f}%)")
    print(f"median routed edges' store seconds: auto {med['auto'][1]:.2f}, ring {med['ring'][1]:.2f}: "
          f"ring/auto {med['ring'][1] / med['auto'][1]:.2f}x")


if __name__ == "__main__":
    main()
