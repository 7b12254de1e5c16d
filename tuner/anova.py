"""Key-knob ranking by ANOVA with replication (Rafiki, Middleware'17, §3.4, §4.5, on paired ratios).

The observations are the log throughput ratios over the default of every *pair* (not the
rows' means): the ``oat:<knob>`` rows give the knob's other levels, the ``aa`` rows (the
default measured against itself) its default level. For each knob, a two-way ANOVA
``log ratio ~ C(level) * C(workload)`` (statsmodels, type II) asks whether the level matters,
on its own or for some workloads only (a knob may speed writes and slow reads). With every
cell replicated, one drifted pair cannot rank a knob: it is one observation among the cell's.

Pairs of knobs calibrated over the grid of both (``cross:<a>*<b>`` rows, with the ``aa`` and
``oat`` rows of either knob as the corners) get ``log ratio ~ C(a) * C(b) * C(workload)``
tested against the model without the terms holding both: an effect that needs both knobs moved
shows as their interaction, which one-knob ANOVA cannot see. Both knobs of a significant
interaction are key knobs too.

A knob's score is Rafiki's var(S1, S2, S3), per workload: the spread (standard deviation, in %
of the default) of its levels' mean ratios, averaged over the workloads as a root mean
square. The key knobs are the significant ones, highest score first, cut at the knee (the
largest relative drop between consecutive scores).
"""
from __future__ import annotations

import math
import warnings
from collections import defaultdict
from typing import Any, Sequence

import numpy as np

from .knobs import KNOBS


def _level(value: Any) -> str:
    return str(value)


def observations(rows: Sequence[dict[str, Any]]) -> tuple[list[tuple[str, str, float]], dict[str, list]]:
    """``(default pairs, {knob: [(level, workload, log ratio)]})``."""
    default: list[tuple[str, str, float]] = []
    by_knob: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    for r in rows:
        ratios = r.get("ratios") or [r["ratio"]]
        w = r["workload"]["name"]
        if r["tag"] == "aa":
            default += [("", w, math.log(x)) for x in ratios if x > 0]
        elif r["tag"].startswith("oat:"):
            name = r["tag"][4:]
            by_knob[name] += [(_level(r["knobs"][name]), w, math.log(x)) for x in ratios if x > 0]
    return default, by_knob


def _two_way(obs: list[tuple[str, str, float]]) -> tuple[float, float]:
    """F and p of the level (main effect or interaction with workload, whichever is stronger)."""
    import pandas as pd
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    df = pd.DataFrame(obs, columns=["level", "workload", "y"])
    if df["level"].nunique() < 2:
        return float("nan"), float("nan")
    formula = "y ~ C(level) * C(workload)" if df["workload"].nunique() > 1 else "y ~ C(level)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = anova_lm(smf.ols(formula, df).fit(), typ=2)
    best_f, best_p = float("nan"), float("nan")
    for term in ("C(level)", "C(level):C(workload)"):
        if term in table.index:
            f, p = float(table.loc[term, "F"]), float(table.loc[term, "PR(>F)"])
            if p == p and (best_p != best_p or p < best_p):
                best_f, best_p = f, p
    return best_f, best_p


def interaction(rows: Sequence[dict[str, Any]], a: str, b: str, alpha: float = 0.05) -> dict[str, Any] | None:
    """Whether knobs ``a`` and ``b`` act together, over the pairs where only they moved: the
    three-way model against the one without their interaction; None when either has one level."""
    import pandas as pd
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    defaults = (_level(KNOBS[a].default), _level(KNOBS[b].default))
    tags = {f"oat:{a}", f"oat:{b}", f"cross:{a}*{b}"}
    obs = []
    for r in rows:
        if r["tag"] == "aa":
            la, lb = defaults
        elif r["tag"] in tags:
            la, lb = _level(r["knobs"][a]), _level(r["knobs"][b])
        else:
            continue
        obs += [(la, lb, r["workload"]["name"], math.log(x)) for x in (r.get("ratios") or [r["ratio"]]) if x > 0]
    df = pd.DataFrame(obs, columns=["a", "b", "workload", "y"])
    if df.empty or df["a"].nunique() < 2 or df["b"].nunique() < 2:
        return None
    # one F test of every term with both knobs in it (a:b and a:b:workload) at once: the full
    # model against the one where each knob acts alone (per workload)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        alone = smf.ols("y ~ C(a) * C(workload) + C(b) * C(workload)", df).fit()
        together = smf.ols("y ~ C(a) * C(b) * C(workload)", df).fit()
        table = anova_lm(alone, together)
    f, p = float(table["F"].iloc[1]), float(table["Pr(>F)"].iloc[1])
    cells = df.groupby(["workload", "a", "b"])["y"].mean()
    per_workload: dict[str, dict[str, float]] = defaultdict(dict)
    for (w, la, lb), m in cells.items():
        per_workload[w][f"{a}={la}, {b}={lb}"] = round((math.exp(m) - 1) * 100, 2)
    return {"knobs": [a, b], "F": round(f, 3), "p_value": p, "significant": bool(p < alpha) if p == p else False,
            "per_workload_pct": dict(sorted(per_workload.items()))}


def crossed_pairs(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The pairs of knobs the dataset calibrated over the grid of both (``cross:<a>*<b>`` tags)."""
    pairs = {tuple(r["tag"][6:].split("*", 1)) for r in rows if r["tag"].startswith("cross:")}
    return sorted(p for p in pairs if len(p) == 2 and all(k in KNOBS for k in p))


def rank(rows: Sequence[dict[str, Any]], min_k: int = 2, max_k: int = 8, alpha: float = 0.05) -> dict[str, Any]:
    default, by_knob = observations(rows)
    if not default:
        raise ValueError("no 'aa' rows (the default against itself): ANOVA needs the default as a level")
    noise = np.array([y for _, _, y in default])
    table = []
    for name, obs in by_knob.items():
        level_default = _level(KNOBS[name].default)
        # the default level: the aa pairs of the workloads this knob was measured on
        workloads = {w for _, w, _ in obs}
        full = obs + [(level_default, w, y) for _, w, y in default if w in workloads]
        f, p = _two_way(full)
        cell: dict[tuple[str, str], list[float]] = defaultdict(list)
        for lv, w, y in full:
            cell[(lv, w)].append(y)
        cell_mean = {key: float(np.mean(v)) for key, v in cell.items()}  # mean log ratio
        spreads, level_means = [], defaultdict(list)
        for w in workloads:
            means = [(lv, m) for (lv, ww), m in cell_mean.items() if ww == w]
            for lv, m in means:
                level_means[lv].append(m)
            if len(means) > 1:
                spreads.append(float(np.var(np.exp([m for _, m in means]), ddof=1)))
        score = math.sqrt(float(np.mean(spreads))) if spreads else 0.0

        def pct(log_ratio: float) -> float:
            return round((math.exp(log_ratio) - 1) * 100, 2)

        levels = {lv: pct(float(np.mean(v))) for lv, v in level_means.items()}
        per_workload = {w: {lv: pct(m) for (lv, ww), m in cell_mean.items() if ww == w} for w in sorted(workloads)}
        table.append({
            "knob": name, "std_pct": round(score * 100, 3), "F": round(f, 3), "p_value": p,
            "significant": bool(p < alpha) if p == p else False,
            "levels": levels, "per_workload_pct": per_workload,
            "best_level": max(levels, key=levels.get), "rafiki": KNOBS[name].rafiki,
            "apply": KNOBS[name].apply,
        })
    table.sort(key=lambda t: (t["significant"], t["std_pct"]), reverse=True)
    significant = [t for t in table if t["significant"]]
    k = knee([t["std_pct"] for t in significant], min_k, max_k) if significant else 0
    key = [t["knob"] for t in significant[:k]]
    interactions = [i for i in (interaction(rows, a, b, alpha) for a, b in crossed_pairs(rows)) if i]
    for i in interactions:
        if i["significant"]:
            key += [n for n in i["knobs"] if n not in key]
    return {"metric": "log throughput ratio over the default (paired)", "ranking": table, "k": k,
            "key_knobs": key, "interactions": interactions,
            "noise_std_pct": round(float(np.std(np.exp(noise), ddof=1)) * 100, 3) if len(noise) > 1 else float("nan"),
            "noise_pairs": int(len(noise)), "workloads": sorted({w for _, w, _ in default})}


def knee(scores: Sequence[float], min_k: int = 2, max_k: int = 8) -> int:
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
