"""Key-knob ranking by ANOVA (seed 004 §3.4, §4.5).

One knob is varied at a time with the others at their defaults (the ``oat:<knob>`` rows of the
calibration, plus the ``default`` rows as that knob's default level). Throughput is taken
relative to the default configuration's mean on the same workload, so workloads of very
different absolute ops/s weigh alike. A knob is scored by the variance (reported as standard
deviation, in % of the default) of its levels' mean throughput -- Rafiki's var(S1, S2, S3) --
and a one-way ANOVA F test across its levels says whether that is above the noise. The *knee*
is the largest relative drop between consecutive scores: the knobs before it are the key knobs.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

import numpy as np
from scipy import stats

from .knobs import KNOBS


def _level(value: Any) -> str:
    return str(value)


def rank(rows: Sequence[dict[str, Any]], metric: str = "ops_per_s", min_k: int = 2, max_k: int = 6,
         alpha: float = 0.05) -> dict[str, Any]:
    by_wl_default: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r["tag"] == "default":
            by_wl_default[r["workload"]["name"]].append(r[metric])
    if not by_wl_default:
        raise ValueError("no default-configuration rows: ANOVA needs the default as the reference level")
    ref = {w: float(np.mean(v)) for w, v in by_wl_default.items()}

    # noise: spread of the repeated default measurements, relative
    noise = [np.std(np.array(v) / ref[w], ddof=1) for w, v in by_wl_default.items() if len(v) > 1]
    noise_std_pct = float(np.mean(noise) * 100) if noise else float("nan")

    levels: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if not r["tag"].startswith("oat:"):
            continue
        name = r["tag"][4:]
        w = r["workload"]["name"]
        if w in ref:
            levels[name][_level(r["knobs"][name])].append(r[metric] / ref[w])
    for name in levels:
        default_level = _level(KNOBS[name].default)
        for w, v in by_wl_default.items():
            levels[name][default_level].extend(x / ref[w] for x in v)

    table = []
    for name, groups in levels.items():
        means = {lv: float(np.mean(v)) for lv, v in groups.items()}
        variance = float(np.var(list(means.values()), ddof=1)) if len(means) > 1 else 0.0
        samples = [np.array(v) for v in groups.values() if len(v) > 1]
        if len(samples) > 1:
            f, p = stats.f_oneway(*samples)
            f, p = float(f), float(p)
        else:
            f, p = float("nan"), float("nan")
        best = max(means, key=means.get)
        table.append({
            "knob": name, "std_pct": round(float(np.sqrt(variance)) * 100, 3), "variance": variance,
            "F": round(f, 3), "p_value": p, "significant": bool(p < alpha) if p == p else False,
            "levels": {lv: round(m * 100 - 100, 2) for lv, m in means.items()},  # % vs default
            "best_level": best, "rafiki": KNOBS[name].rafiki,
        })
    table.sort(key=lambda t: t["variance"], reverse=True)
    k = knee([t["variance"] for t in table], min_k, max_k)
    return {"metric": metric, "ranking": table, "k": k, "key_knobs": [t["knob"] for t in table[:k]],
            "noise_std_pct": round(noise_std_pct, 3), "workloads": sorted(ref)}


def knee(scores: Sequence[float], min_k: int = 2, max_k: int = 6) -> int:
    """k with the largest relative drop from score k-1 to score k (1-based k = knobs kept)."""
    s = [max(x, 1e-12) for x in scores]
    if len(s) <= min_k:
        return len(s)
    best_k, best_ratio = min_k, -1.0
    for k in range(min_k, min(max_k, len(s) - 1) + 1):
        ratio = s[k - 1] / s[k]
        if ratio > best_ratio:
            best_k, best_ratio = k, ratio
    return best_k


def key_knobs(model: Any = None, ranking_path: Any = None) -> list[str]:
    """The key knobs of the shipped (or given) ANOVA ranking that ``model`` knows; every knob of
    the model when no ranking is there. Searching only these keeps the search where the
    calibration varied each knob, instead of in corners no measurement reached."""
    import json
    from pathlib import Path

    from .dataset import DEFAULT_RANKING

    known = list(model.space.knobs) if model is not None else None
    try:
        ranking = json.loads(Path(ranking_path or DEFAULT_RANKING).read_text())
        keys = [k for k in ranking["key_knobs"] if known is None or k in known]
        if keys:
            return keys
    except (OSError, ValueError, KeyError):
        pass
    return known or []
