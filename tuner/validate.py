"""Recommended vs default, measured on the real node (seed 004 §4.8, Figure 4).

For each workload: search the surrogate (NSGA-II over the key knobs, and exhaustive grid
search), then measure on the tuner's node in the order default, tuned, exhaustive-best (if different),
default (the default on both sides, so drift cancels), ``repeats`` x ``duration`` seconds each.

With ``real_grid`` it also measures a small grid on the real node: every combination of the
grid values (minimum, default, maximum) of the ``real_grid`` top key knobs, the real-world
counterpart of Rafiki's exhaustive comparison; the tuned configuration is then reported
against the best configuration that grid measured.
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
             measure_exhaustive: bool = False, real_grid: int = 0, node: Any = None) -> dict[str, Any]:
    """Measure on ``node`` (default: the tuner's node 127.0.0.``index``, started if down)."""
    from resources.stores.cassandra import CassandraObjectStore

    from .anova import key_knobs
    from .knobs import grid
    from .node import TunerNode

    model = Surrogate.load(model_path)
    keys = key_knobs(model)
    knobs = list(knobs or keys)
    grid_knobs = keys[:real_grid] if real_grid else []
    real_grid_configs = list(dict.fromkeys(grid(grid_knobs))) if grid_knobs else []
    node = node or TunerNode(index=index)
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
            ex = search(model, w, keys, "exhaustive")
            plan = [("default", Configuration()), ("tuned", ga.config)]
            if measure_exhaustive and ex.config != ga.config:
                plan.append(("exhaustive", ex.config))
            # the grid in restart order (configurations sharing restart-only knobs back to back)
            grid_plan = sorted((c for c in real_grid_configs if c not in (Configuration(), ga.config)),
                               key=lambda c: repr(c.restart_part()))
            plan += [(f"grid:{json_key(c)}", c) for c in grid_plan]
            plan.append(("default", Configuration()))
            measured: dict[str, list[float]] = {"default": [], "tuned": [], "exhaustive": []}
            measured.update({label: [] for label, _ in plan})
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
            grid_rows = {}
            if grid_knobs:
                grid_rows = {label[5:]: float(np.mean(v)) for label, v in measured.items() if label.startswith("grid:") and v}
                grid_rows[json_key(Configuration())] = d
                if ga.config in real_grid_configs:  # measured as "tuned", not again as a grid point
                    grid_rows[json_key(ga.config)] = t
            best_grid = max(grid_rows, key=grid_rows.get) if grid_rows else None
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
                **({"real_grid": {"knobs": grid_knobs, "configs": len(grid_rows),
                                  "ops_per_s": {k: round(v, 1) for k, v in grid_rows.items()},
                                  "best": best_grid, "best_ops_per_s": round(grid_rows[best_grid], 1),
                                  "best_gain_pct": round((grid_rows[best_grid] / d - 1) * 100, 2),
                                  "tuned_vs_best_pct": round((t / grid_rows[best_grid] - 1) * 100, 2)}}
                   if best_grid else {}),
            })
        # leave the node at its default configuration
        apply(node, store, Configuration(), previous)
    finally:
        if stop_after:
            node.stop()
    return {"workloads": out, "knobs": knobs, "duration_s": duration_s, "repeats": repeats,
            "real_grid_knobs": grid_knobs, "seconds": round(time.perf_counter() - t_all, 1)}


def json_key(config: Configuration) -> str:
    """A short stable label of a configuration's non-default knobs (``default`` for none)."""
    nd = config.non_default()
    return ",".join(f"{k}={v}" for k, v in sorted(nd.items())) or "default"
