"""Recommended vs default, measured on the real node (seed 004 §4.8, Figure 4).

For each workload: search the surrogate (NSGA-II over the key knobs, and exhaustive grid
search), then measure on the tuner's node in the order default, tuned, exhaustive-best (if different),
default (the default on both sides, so drift cancels), ``repeats`` x ``duration`` seconds each.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from .knobs import Configuration, apply
from .search import search
from .surrogates import Surrogate
from .workload import Workload, run_workload


def validate(read_ratios: Sequence[float], object_kib: int, duration_s: float, repeats: int,
             model_path: str, index: int = 5, knobs: Sequence[str] | None = None,
             keyspace: str = "asgard_tuner", progress: bool = True, stop_after: bool = True,
             measure_exhaustive: bool = False) -> dict[str, Any]:
    from resources.stores.cassandra import CassandraObjectStore

    from .cli import _key_knobs
    from .node import TunerNode

    model = Surrogate.load(model_path)
    knobs = list(knobs or _key_knobs(model))
    node = TunerNode(index=index)
    if not node.is_running():
        node.start()
    store = CassandraObjectStore(contact_points=[node.address], port=node.native_port, keyspace=keyspace)
    store.ping()
    out = []
    previous: Configuration | None = None
    t_all = time.perf_counter()
    try:
        for i, rr in enumerate(read_ratios):
            w = Workload(read_ratio=rr, object_kib=object_kib)
            ga = search(model, w, knobs, "nsga2")
            # the exhaustive grid is over the key knobs (as Rafiki's 80-configuration grid);
            # it is measured only when it differs from the tuned configuration and measure_exhaustive
            ex = search(model, w, _key_knobs(model), "exhaustive")
            plan = [("default", Configuration()), ("tuned", ga.config)]
            if measure_exhaustive and ex.config != ga.config:
                plan.append(("exhaustive", ex.config))
            plan.append(("default", Configuration()))
            measured: dict[str, list[float]] = {"default": [], "tuned": [], "exhaustive": []}
            restarts = []
            for label, cfg in plan:
                res = apply(node, store, cfg, previous)
                previous = cfg
                if res.restarted:
                    restarts.append({"node": round(res.node_restart_seconds, 2), "client": round(res.restart_seconds, 2)})
                run_workload(store, Workload(0.5, 64), duration_s=2.0 if res.restarted else 1.0, warmup_s=0)
                for r in range(repeats):
                    m = run_workload(store, w, duration_s=duration_s, warmup_s=0.5, seed=100 * i + r)
                    measured[label].append(m.ops_per_s)
                if progress:
                    print(f"  {w.name} {label:<10} {np.mean(measured[label]):8.1f} op/s", flush=True)
            if not measured["exhaustive"]:
                measured["exhaustive"] = measured["tuned"] if ex.config == ga.config else []
            d, t = (float(np.mean(measured[k])) for k in ("default", "tuned"))
            e = float(np.mean(measured["exhaustive"])) if measured["exhaustive"] else None
            out.append({
                "workload": w.name, "read_ratio": rr, "object_kib": object_kib,
                "tuned_config": ga.config.non_default(), "exhaustive_config": ex.config.non_default(),
                "default_ops_per_s": round(d, 1), "tuned_ops_per_s": round(t, 1), "exhaustive_ops_per_s": round(e, 1) if e else None,
                "gain_pct": round((t / d - 1) * 100, 2),
                "exhaustive_gain_pct": round((e / d - 1) * 100, 2) if e else None,
                "tuned_vs_exhaustive_pct": round((t / e - 1) * 100, 2) if e else None,
                "predicted_tuned_vs_exhaustive_pct": round((ga.predicted_ops_per_s / ex.predicted_ops_per_s - 1) * 100, 2),
                "predicted_gain_pct": round(ga.predicted_gain_pct, 2),
                "predicted_exhaustive_gain_pct": round(ex.predicted_gain_pct, 2),
                "search_seconds": round(ga.seconds, 3), "surrogate_evaluations": ga.evaluations,
                "surrogate_calls": ga.surrogate_calls, "exhaustive_configs": ex.evaluations,
                "exhaustive_seconds": round(ex.seconds, 3),
                "samples": {k: [round(x, 1) for x in v] for k, v in measured.items()}, "restarts": restarts,
            })
        # leave the node at its default configuration
        apply(node, store, Configuration(), previous)
    finally:
        if stop_after:
            node.stop()
    return {"workloads": out, "knobs": knobs, "duration_s": duration_s, "repeats": repeats,
            "seconds": round(time.perf_counter() - t_all, 1)}
