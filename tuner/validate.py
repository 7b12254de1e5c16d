"""Tuned against default, measured on the real node for each DAG pattern (Rafiki, Middleware'17, §4.8, Fig. 4).

For each workload: search the surrogate over the key knobs (NSGA-II) for the configuration of
highest predicted ratio over the stock default, keeping the default when the predicted gain is
within the surrogate's held-out error (a pick the model cannot tell from noise is no pick).
Then measure tuned against default as ``pairs`` ABBA pairs (:mod:`asgard.tuner.measure`): the gain is
the geometric mean ratio, with its confidence interval. ``noise=True`` also measures the
default against itself the same way: the noise floor beside each gain.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

from .knobs import Configuration
from .measure import Interleaver
from .search import SearchResult, search
from .surrogates import Surrogate
from .workload import Workload

#: the bench's sizes per pattern: scatter and broadcast move frames and models (64 KiB, 1 MiB),
#: shuffle moves many small partitions (16 KiB, 256 KiB); incompressible (video, arrays,
#: pickles) except the small text-like ones
VALIDATION_WORKLOADS = (
    ("scatter", 8, 1024, 0.0), ("scatter", 8, 64, 0.5),
    ("broadcast", 8, 1024, 0.0), ("broadcast", 8, 64, 0.5),
    ("shuffle", 4, 256, 0.0), ("shuffle", 4, 16, 0.5),
)


def recommend(model: Surrogate, workload: Workload, knobs: Sequence[str], evaluations: int = 3500,
              method: str = "nsga2") -> tuple[Configuration, SearchResult]:
    """The searched configuration, or the default when its predicted gain is within the model's error."""
    result = search(model, workload, knobs, method, evaluations)
    error_pct = float(getattr(model, "heldout_error_pct", 0.0) or 0.0)
    if result.predicted_gain_pct <= error_pct:
        return Configuration(), result
    return result.config, result


def validate(workloads: Sequence[Workload], model_path: str, node: Any, store: Any, pairs: int = 4,
             duration_s: float = 1.5, knobs: Sequence[str] | None = None, noise: bool = False,
             progress: bool = True, level: float = 0.95) -> dict[str, Any]:
    from .anova import key_knobs

    model = Surrogate.load(model_path)
    knobs = list(knobs or key_knobs(model))
    bench = Interleaver(node, store, duration_s=duration_s)
    default = Configuration()
    rows = []
    t0 = time.perf_counter()
    for w in workloads:
        tuned, found = recommend(model, w, knobs)
        bench.restarts.clear()
        (comp,) = bench.compare(default, tuned, [w], pairs)
        s = comp.summary(level)
        row = {
            "pattern": w.pattern, "object_kib": w.object_kib, "fanout": w.fanout,
            "compressibility": w.compressibility, "workload": w.name,
            "predicted_gain_pct": round(found.predicted_gain_pct if tuned != default else 0.0, 2),
            "searched_gain_pct": round(found.predicted_gain_pct, 2),
            "measured_gain_pct": s["gain_pct"],
            "ci_low_pct": round((s["ci_low"] - 1) * 100, 2), "ci_high_pct": round((s["ci_high"] - 1) * 100, 2),
            "significant": s["ci_low"] > 1 or s["ci_high"] < 1,
            "cpu_ratio": s["cpu_ratio"], "tuned_config": tuned.non_default(), "pairs": s["pairs"],
            "ratios": s["ratios"], "default_ops_per_s": s["baseline_ops_per_s"],
            "tuned_ops_per_s": s["candidate_ops_per_s"], "restarts": list(bench.restarts),
        }
        if noise:
            (aa,) = bench.compare(default, default, [w], pairs)
            a = aa.summary(level)
            row["noise_ci_pct"] = [round((a["ci_low"] - 1) * 100, 2), round((a["ci_high"] - 1) * 100, 2)]
            row["noise_gain_pct"] = a["gain_pct"]
        rows.append(row)
        if progress:
            print(format_row(row), flush=True)
    bench.switch(default)  # leave the node as found
    return {"rows": rows, "knobs": knobs, "pairs": pairs, "duration_s": duration_s, "level": level,
            "model_heldout_error_pct": getattr(model, "heldout_error_pct", None),
            "seconds": round(time.perf_counter() - t0, 1)}


def format_row(r: dict[str, Any]) -> str:
    line = (f"{r['workload']:<22} tuned {r['measured_gain_pct']:+6.1f}% "
            f"[{r['ci_low_pct']:+.1f}, {r['ci_high_pct']:+.1f}]  predicted {r['predicted_gain_pct']:+6.1f}%"
            f"  cpu/GB x{r['cpu_ratio'] or float('nan'):.2f}")
    if "noise_ci_pct" in r:
        line += f"  noise {r['noise_gain_pct']:+.1f}% [{r['noise_ci_pct'][0]:+.1f}, {r['noise_ci_pct'][1]:+.1f}]"
    return line + ("  " + ",".join(f"{k}={v}" for k, v in r["tuned_config"].items()) if r["tuned_config"] else "  (default kept)")


