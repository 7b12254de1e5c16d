"""The surrogate's labels' retest noise by measurement window (issue 37, item 4, its first step).

A label is a configuration's throughput over the default's on one workload, the geometric mean of
``pairs`` ABBA pairs of ``duration`` seconds each (asgard.tuner.calibrate). This script measures
the same (configuration, workload) labels twice, in two passes, under several (duration, pairs)
settings, interleaved: pass 1 runs every setting, then pass 2 does (so the machine's drift hits
every setting alike). Its figure, per setting, is calibrate's: how far one pass's label lands from
the other's, mean absolute % both ways (asgard.tuner.dataset.retest_error_pct).

    .venv/bin/python scripts/label_noise.py --settings 1x2,3x2,1x6 --random 2 [--orders grouped,per-workload]
        [--table stock|store] [--passes N] [--json]

``--orders``: how a label's pairs are ordered over the workloads (asgard.tuner.measure.ORDERS),
each crossed with every setting: ``grouped`` (every workload on one side, then the other: a pair's
two samples a pass over the workloads apart), ``per-workload`` (one workload's pairs back to back).

``--passes``: how many passes (2 or more). With 4 or more, beside the pass-to-pass figure, the
labels' retest between halves: each label's geometric mean (and median) over the odd passes against
that over the even ones, i.e. what a calibration that measured every label in N/2 passes spread over
its run, and repeated that, would see.

``--table``: the objects table every configuration starts from: ``stock`` (the knob space's default,
Cassandra's: LZ4, tombstones kept 10 days) or ``store`` (as the store creates it: compression off,
gc_grace 0 at one replica), the A/A pairs' and every label's baseline; a random configuration
draws its table knobs as every other.

It starts the tuner's own node (127.0.0.5, as ``asgard tune calibrate``) and stops it after.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time


def parse_settings(text: str, orders: str = "grouped") -> list[tuple[float, int, str]]:
    """``"1x2,3x2"`` -> [(1.0, 2, order), (3.0, 2, order)] for each order: seconds per side x ABBA
    pairs, and how the pairs are ordered over the workloads."""
    from asgard.tuner.measure import ORDERS

    out = []
    for order in (o.strip() for o in orders.split(",")):
        if order not in ORDERS:
            raise SystemExit(f"--orders: {order!r} is not one of {ORDERS}")
        for part in text.split(","):
            seconds, pairs = part.lower().split("x")
            out.append((float(seconds), int(pairs), order))
    return out


def halves(ratios: list[float], how: str) -> list[float]:
    """A label's passes folded into two: the odd passes' and the even passes' geometric mean or median."""
    fold = (lambda xs: math.exp(statistics.fmean(math.log(x) for x in xs))) if how == "geomean" else statistics.median
    return [fold(ratios[0::2]), fold(ratios[1::2])]


def setting_name(seconds: float, pairs: int, order: str) -> str:
    return f"{seconds:g}x{pairs}" + ("" if order == "grouped" else f"/{order}")


def main() -> None:
    from asgard.resources.stores.cql import CassandraObjectStore
    from asgard.tuner.calibrate import CALIBRATED
    from asgard.tuner.dataset import retest_error_pct
    from asgard.tuner.knobs import KNOBS, NO_RESTART, Configuration, random_configuration
    from asgard.tuner.measure import Interleaver
    from asgard.tuner.node import TunerNode
    from asgard.tuner.workload import dag_workloads

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", default="1x2,3x2,1x6", help="seconds x pairs, comma-separated")
    ap.add_argument("--random", type=int, default=2, help="random no-restart configurations beside the A/A one")
    ap.add_argument("--orders", default="grouped", help="grouped, per-workload or both, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--index", type=int, default=5)
    ap.add_argument("--table", choices=("stock", "store"), default="stock")
    ap.add_argument("--passes", type=int, default=2, help="passes over every setting (2 or more)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.passes < 2:
        raise SystemExit("--passes: 2 or more (the figure compares passes)")
    by_halves = args.passes >= 4  # two passes a half at least, for a label's fold over them

    settings = parse_settings(args.settings, args.orders)
    rng = random.Random(args.seed)
    live = [k for k in CALIBRATED if KNOBS[k].apply in NO_RESTART]
    default = Configuration()
    if args.table == "store":
        from asgard.resources.stores.cql.statements import table_gc_grace_seconds

        default = default.replace(compression="none", gc_grace_seconds=table_gc_grace_seconds(1))
    configs = [("aa", default)] + [(f"random{i + 1}", random_configuration(live, rng)) for i in range(args.random)]
    workloads = dag_workloads()
    node = TunerNode(index=args.index, heap="2G")
    if not node.is_running():
        node.start()
    store = CassandraObjectStore(**node.client_options(), keyspace="asgard_label_noise")
    labels: dict[tuple[float, int, str], dict[tuple[str, str], list[float]]] = {s: {} for s in settings}
    t0 = time.time()
    try:
        store.ping()
        for passes in range(1, args.passes + 1):
            for setting in settings:
                seconds, pairs, order = setting
                bench = Interleaver(node, store, duration_s=seconds)
                for name, config in configs:
                    for comp in bench.compare(default, config, workloads, pairs=pairs, order=order):
                        labels[setting].setdefault((name, comp.workload.name), []).append(comp.ratio())
                bench.switch(default, workloads)  # the next setting starts from the default
                print(f"pass {passes} {setting_name(*setting)} done at {time.time() - t0:.0f}s: "
                      + json.dumps({f"{n}/{w}": r for (n, w), r in labels[setting].items()}), flush=True)
    finally:
        node.stop()
    result = {}
    for (seconds, pairs, order), rows in labels.items():
        as_rows = [{"replicate_ratios": ratios} for ratios in rows.values()]
        aa = [{"replicate_ratios": r} for (name, _), r in rows.items() if name == "aa"]
        result[setting_name(seconds, pairs, order)] = {
            "seconds_per_side": seconds, "pairs": pairs, "order": order, "labels": len(rows),
            "measured_seconds_per_label": round(seconds * pairs * 2, 1),
            "retest_error_pct": retest_error_pct(as_rows), "retest_error_pct_aa": retest_error_pct(aa),
            **({f"halves_{how}_retest_error_pct": retest_error_pct(
                [{"replicate_ratios": halves(r, how)} for r in rows.values()]) for how in ("geomean", "median")}
               if by_halves else {}),
            "labels_by_pass": {f"{n}/{w}": [round(x, 4) for x in r] for (n, w), r in sorted(rows.items())}}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{len(configs)} configurations ({', '.join(n for n, _ in configs)}) x {len(workloads)} DAG workloads, "
          f"{args.passes} passes, settings interleaved; {time.time() - t0:.0f} s")
    print(f"{'setting':<20} {'s/label':>8} {'retest %':>9} {'A/A retest %':>13}"
          + (f" {'halves, geomean %':>18} {'halves, median %':>17}" if by_halves else ""))
    for key, r in result.items():
        print(f"{key:<20} {r['measured_seconds_per_label']:>8} {r['retest_error_pct']:>9} {r['retest_error_pct_aa']:>13}"
              + (f" {r['halves_geomean_retest_error_pct']:>18} {r['halves_median_retest_error_pct']:>17}"
                 if by_halves else ""))


if __name__ == "__main__":
    main()
