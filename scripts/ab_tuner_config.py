"""Hand-picked configurations against the default on the tuner's node, paired ABBA with the
tuner's own Interleaver (what `asgard tune validate` does for the model's pick), with the
default-against-default noise floor: is a knob a lever on this workload at all?

    PYTHONPATH=. python scripts/ab_tuner_config.py --workload broadcast:8:1024:0 \
        --config '{"client_chunk_kib": 2048}' --config '{"durable_writes": false}' --pairs 8
"""
from __future__ import annotations

import argparse
import json

from asgard.resources.stores.cql import CassandraObjectStore
from asgard.tuner.knobs import Configuration
from asgard.tuner.measure import Interleaver
from asgard.tuner.node import TunerNode
from asgard.tuner.workload import Workload


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", action="append", required=True, help="pattern:fanout:KiB:compressibility")
    ap.add_argument("--config", action="append", required=True, help="JSON of non-default knobs")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--duration", type=float, default=1.5)
    ap.add_argument("--index", type=int, default=5)
    args = ap.parse_args()
    node = TunerNode(index=args.index)
    if not node.is_running():
        node.start()
    store = CassandraObjectStore(**node.client_options(), keyspace="asgard_tuner")
    store.ping()
    bench = Interleaver(node, store, duration_s=args.duration)
    default = Configuration()
    for spec in args.workload:
        pattern, fanout, kib, comp = spec.split(":")
        w = Workload.from_dag(pattern, int(fanout), int(kib), compressibility=float(comp))
        for name, cfg in [("default (A/A)", default)] + [(c, Configuration(json.loads(c))) for c in args.config]:
            (comp_,) = bench.compare(default, cfg, [w], args.pairs)
            s = comp_.summary()
            print(f"{w.name:20} {name:45} gain {s['gain_pct']:+6.1f}% [{(s['ci_low'] - 1) * 100:+.1f}, "
                  f"{(s['ci_high'] - 1) * 100:+.1f}]  cpu/GB x{s['cpu_ratio']}", flush=True)
    bench.switch(default)


if __name__ == "__main__":
    main()
