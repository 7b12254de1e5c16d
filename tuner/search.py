"""Configuration search over the surrogate (Rafiki, Middleware'17, §3.7): C_opt = argmax_C f(W, C), where f is
the predicted throughput ratio of C over the stock default on workload W.

* ``nsga2``  -- optuna's NSGA-II sampler (the genetic algorithm; single objective here).
* ``tpe``    -- optuna's TPE sampler.
* ``exhaustive`` -- every combination of the knobs' grid values, predicted in one batch.

Trials are asked for a generation at a time and predicted in one batched surrogate call, then
told back. Knobs outside the searched set stay at their defaults.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import yaml

from .knobs import KNOBS, Configuration, KnobConstraintError, grid
from .surrogates import Surrogate
from .workload import Workload


@dataclass
class SearchResult:
    method: str
    config: Configuration
    predicted_ratio: float
    default_predicted_ratio: float
    seconds: float
    surrogate_calls: int  # batched predict invocations
    evaluations: int  # configurations predicted
    knobs: list[str] = field(default_factory=list)
    #: knobs the search changed and :func:`simplify` returned to their defaults
    dropped: list[str] = field(default_factory=list)

    @property
    def predicted_gain_pct(self) -> float:
        return (self.predicted_ratio / self.default_predicted_ratio - 1) * 100

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "config": self.config.non_default(),
                "predicted_ratio": round(self.predicted_ratio, 4),
                "default_predicted_ratio": round(self.default_predicted_ratio, 4),
                "predicted_gain_pct": round(self.predicted_gain_pct, 2), "seconds": round(self.seconds, 3),
                "surrogate_calls": self.surrogate_calls, "evaluations": self.evaluations, "knobs": self.knobs,
                "dropped": self.dropped}


def _predict(model: Surrogate, workload: Workload, configs: Sequence[Configuration]) -> np.ndarray:
    return model.predict(model.space.matrix(workload, configs))


def _suggest(trial, name: str):
    kb = KNOBS[name]
    if kb.kind == "choice" or kb.discrete:
        return trial.suggest_categorical(name, list(kb.values_for_grid()))
    return trial.suggest_int(name, kb.low, kb.high, log=kb.log and kb.low > 0)


def optuna_search(model: Surrogate, workload: Workload, knobs: Sequence[str], method: str = "nsga2",
                  evaluations: int = 3500, batch: int = 50, seed: int = 0) -> SearchResult:
    import optuna

    optuna.logging.set_verbosity(logging.WARNING)
    if method == "nsga2":
        sampler = optuna.samplers.NSGAIISampler(population_size=batch, seed=seed)
    elif method == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=batch, multivariate=True)
    else:
        raise ValueError(f"unknown search method {method!r}")
    calls0 = model.calls
    t0 = time.perf_counter()
    study = optuna.create_study(direction="maximize", sampler=sampler)
    default = Configuration()
    done = 0
    while done < evaluations:
        n = min(batch, evaluations - done)
        trials = [study.ask() for _ in range(n)]
        configs, ok = [], []
        for tr in trials:
            values = {k: _suggest(tr, k) for k in knobs}
            try:
                configs.append(Configuration(values))
                ok.append(True)
            except KnobConstraintError:
                configs.append(default)
                ok.append(False)
        preds = _predict(model, workload, configs)
        for tr, p, good in zip(trials, preds, ok):
            study.tell(tr, float(p) if good else 0.0)
        done += n
    best = Configuration({k: v for k, v in study.best_params.items()})
    seconds = time.perf_counter() - t0
    d = float(_predict(model, workload, [default])[0])
    return SearchResult(method, best, float(study.best_value), d, seconds, model.calls - calls0 - 1, done, list(knobs))


def exhaustive_search(model: Surrogate, workload: Workload, knobs: Sequence[str],
                      max_configs: int = 2_000_000) -> SearchResult:
    calls0 = model.calls
    t0 = time.perf_counter()
    best_v, best_c, n = -1.0, Configuration(), 0
    batch: list[Configuration] = []

    def flush():
        nonlocal best_v, best_c
        preds = _predict(model, workload, batch)
        i = int(np.argmax(preds))
        if preds[i] > best_v:
            best_v, best_c = float(preds[i]), batch[i]
        batch.clear()

    for c in grid(knobs):
        batch.append(c)
        n += 1
        if len(batch) >= 20000:
            flush()
        if n >= max_configs:
            break
    if batch:
        flush()
    seconds = time.perf_counter() - t0
    d = float(_predict(model, workload, [Configuration()])[0])
    return SearchResult("exhaustive", best_c, best_v, d, seconds, model.calls - calls0 - 1, n, list(knobs))


def search(model: Surrogate, workload: Workload, knobs: Sequence[str] | None = None, method: str = "nsga2",
           evaluations: int = 3500, seed: int = 0, simplified: bool = True) -> SearchResult:
    """The configuration of highest predicted ratio over the stock default; ``simplified`` (the
    default) then returns to their defaults the knobs the model cannot tell apart (:func:`simplify`)."""
    knobs = list(knobs or model.space.knobs)
    if method == "exhaustive":
        result = exhaustive_search(model, workload, knobs)
    else:
        result = optuna_search(model, workload, knobs, method, evaluations, seed=seed)
    return simplify(model, workload, result) if simplified else result


def simplify(model: Surrogate, workload: Workload, result: SearchResult,
             tolerance_pct: float | None = None) -> SearchResult:
    """The searched configuration with the fewest changed knobs whose predicted ratio stays within
    ``tolerance_pct`` (default: the model's held-out error) of the searched one: greedily, the
    knob whose return to its default costs least goes back, while the total cost stays within.
    A search over a noisy surrogate also moves knobs whose effect is below the model's error
    (measured here: commitlog_segment_size_mib 32 -> 31, a restart for nothing); such a change
    is no gain anyone can measure, and a restart-only one costs a restart."""
    tolerance = float(getattr(model, "heldout_error_pct", 0.0) or 0.0) if tolerance_pct is None else tolerance_pct
    floor = result.predicted_ratio * (1 - tolerance / 100)
    config, ratio, calls, dropped = result.config, result.predicted_ratio, 0, []
    while True:
        changed = config.non_default()
        candidates = []
        for name in changed:
            try:
                candidates.append((name, Configuration({k: v for k, v in changed.items() if k != name})))
            except KnobConstraintError:  # another changed knob needs this one as it is
                continue
        if not candidates:
            break
        preds = _predict(model, workload, [c for _, c in candidates])
        calls += 1
        i = int(np.argmax(preds))
        if preds[i] < floor:
            break
        dropped.append(candidates[i][0])
        config, ratio = candidates[i][1], float(preds[i])
    return replace(result, config=config, predicted_ratio=ratio, surrogate_calls=result.surrogate_calls + calls,
                   dropped=dropped)


def compare(model: Surrogate, workload: Workload, knobs: Sequence[str] | None = None,
            evaluations: int = 3500, seed: int = 0, tpe_evaluations: int = 500) -> dict[str, Any]:
    """NSGA-II and TPE against exhaustive grid search, all on the surrogate. TPE's cost grows
    quadratically with its history (3,500 trials take minutes), so it gets fewer evaluations."""
    ex = search(model, workload, knobs, "exhaustive", simplified=False)
    out = {"workload": workload.name, "exhaustive": ex.as_dict()}
    for m in ("nsga2", "tpe"):
        n = evaluations if m == "nsga2" else min(evaluations, tpe_evaluations)
        r = search(model, workload, knobs, m, n, seed, simplified=False)
        d = r.as_dict()
        d["vs_exhaustive_pct"] = round((r.predicted_ratio / ex.predicted_ratio - 1) * 100, 2)
        out[m] = d
    return out


# --- config files ---------------------------------------------------------------------------
def write_config_file(path: Path | str, result: SearchResult, workload: Workload) -> Path:
    doc = {
        "workload": workload.as_dict(),
        "search": result.as_dict(),
        **result.config.to_file_dict(),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def load_config_file(path: Path | str) -> Configuration:
    """The :class:`Configuration` of a file written by :func:`write_config_file` (or a plain
    ``{knob: value}`` mapping)."""
    doc = yaml.safe_load(Path(path).read_text()) or {}
    return Configuration(doc.get("knobs", doc))
