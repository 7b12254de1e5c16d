"""The calibration dataset as arrays: features = workload (the DAG's shape) + configuration,
target = the paired throughput ratio of the configuration over the stock default."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .calibrate import CALIBRATED, read_rows
from .knobs import KNOBS, Configuration
from .workload import PATTERNS, Workload

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_DATASET = DATA_DIR / "calibration.jsonl"
#: a second, independent calibration run of the same plan (same seed): pooled with the first,
#: each label has twice the pairs; set against it, the two say how far one measurement of a
#: configuration lands from another (the error no model can get under)
REPLICATE_DATASET = DATA_DIR / "calibration-replicate.jsonl"
#: the shipped surrogate: its JSON file (features, standardization, versions); the weights beside it
DEFAULT_MODEL = DATA_DIR / "model.json"
DEFAULT_RANKING = DATA_DIR / "ranking.json"
WORKLOAD_FEATURES = Workload.FEATURES
#: knob x workload features (:meth:`FeatureSpace.interactions`), then each of SIZE_SCALED times log2 of the object size
INTERACTIONS = ("log2_object_over_client_chunk", "log2_object_over_chunk_length", "log2_chunks_in_flight",
                "client_codec_on*compressibility", "compression_on*compressibility",
                "durable_writes_off*log2_kib_written_a_round")
#: the numeric knobs whose effect may scale with the object's size (the no-restart ones a random design varies)
SIZE_SCALED = ("chunk_length_kib", "client_chunk_kib", "client_in_flight", "concurrent_writes", "concurrent_reads",
               "concurrent_compactors", "compaction_throughput_mib", "key_cache_size_mib")


def workload_of(row: dict[str, Any]) -> Workload:
    return Workload(**row["workload"])


@dataclass
class FeatureSpace:
    """Which knobs are features, and how a (workload, configuration) becomes a vector."""

    knobs: tuple = CALIBRATED

    @property
    def names(self) -> list[str]:
        out = list(WORKLOAD_FEATURES)
        for k in self.knobs:
            out.extend(KNOBS[k].feature_names())
        return out

    def vector(self, workload: Workload, config: Configuration) -> list[float]:
        return workload.features() + config.features(self.knobs)

    def matrix(self, workload: Workload, configs: Sequence[Configuration]) -> np.ndarray:
        wf = workload.features()
        return np.array([wf + c.features(self.knobs) for c in configs], dtype=np.float64)

    # ---- knob x workload interactions (issue 37: the surrogate on unseen workloads) ----
    # A tree learns an effect that depends on the ratio of two features (an object's size over a
    # chunk size) only as a staircase over the workloads it has seen; given the ratio itself it
    # carries to a workload it has not. Computed from the vector above (so a saved model's
    # "features" stay the knob space's), by the LightGBM surrogate (LightGBMSurrogate(interactions=True)).

    @property
    def interaction_names(self) -> list[str]:
        return [*INTERACTIONS, *(f"{k}*log2_object_kib" for k in SIZE_SCALED if k in self.knobs)]

    def interactions(self, X: np.ndarray) -> np.ndarray:
        """The :attr:`interaction_names` columns of the rows ``X`` (vectors of :attr:`names`). A
        knob that is not a feature is at its default."""
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        col = {n: i for i, n in enumerate(self.names)}
        if X.shape[1] != len(col):
            raise ValueError(f"{X.shape[1]} features, the space has {len(col)}")

        def numeric(knob: str) -> np.ndarray:  # the value, undoing Knob.encode
            kb = KNOBS[knob]
            if knob not in self.knobs:
                return np.full(len(X), float(kb.default))
            x = X[:, col[knob]]
            return np.expm1(x) if kb.log or kb.low == 0 else x

        def is_(knob: str, value: Any) -> np.ndarray:
            if knob not in self.knobs:
                return np.full(len(X), float(KNOBS[knob].default == value))
            return X[:, col[f"{knob}={value}"]]

        log2_kib = X[:, col["log2_object_kib"]]
        kib = np.exp2(log2_kib)
        fanout = np.exp2(X[:, col["log2_fanout"]])
        pattern = {p: X[:, col[f"pattern={p}"]] for p in PATTERNS}
        # objects a round writes (Workload's plan: shuffle's mappers are not a feature, so its default)
        writes = (pattern["scatter"] * fanout + pattern["broadcast"] + pattern["fanin"] * fanout
                  + pattern["shuffle"] * Workload.mappers * fanout
                  + pattern["mixed"] * 2 * fanout * (1 - X[:, col["read_ratio"]]))
        chunks = np.maximum(kib / numeric("client_chunk_kib"), 1.0)
        compressibility = X[:, col["compressibility"]]
        out = [
            log2_kib - np.log2(numeric("client_chunk_kib")),  # the store's chunks per object
            log2_kib - np.log2(numeric("chunk_length_kib")),  # the table's compression chunks per object
            np.log2(np.minimum(chunks, numeric("client_in_flight"))),  # chunks one object has in flight
            (1 - is_("client_codec", "none")) * compressibility,
            (1 - is_("compression", "none")) * compressibility,
            is_("durable_writes", False) * np.log2(kib * np.maximum(writes, 1.0)),  # no commit log x bytes written
        ]
        out += [X[:, col[k]] * log2_kib for k in SIZE_SCALED if k in self.knobs]
        return np.column_stack(out)


def default_datasets() -> list[Path]:
    """The shipped calibration runs: the dataset, and its replicate where there is one."""
    return [p for p in (DEFAULT_DATASET, REPLICATE_DATASET) if p == DEFAULT_DATASET or p.exists()]


def pool_replicates(runs: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per planned measurement (``run_slot``, workload) over several calibration runs:
    its pairs pooled (``ratios`` of every run; ``ratio`` their geometric mean, with a new
    interval), ``replicate_ratios`` each run's own ratio, in run order. A measurement in one run
    only stays as it is."""
    from .measure import geomean, ratio_interval

    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for run in runs:
        for r in run:
            key = (r["run_slot"], r["workload"]["name"])
            if key not in merged:
                merged[key] = {**r, "ratios": list(r.get("ratios") or [r["ratio"]]),
                               "replicate_ratios": [r["ratio"]], "_cpu": [r.get("cpu_ratio")]}
                continue
            m = merged[key]
            if m["knobs"] != r["knobs"]:
                raise ValueError(f"{key}: two calibration runs measured different configurations under one "
                                 "slot; a replicate must use the first run's plan (same knobs, --random and --seed)")
            m["ratios"] += list(r.get("ratios") or [r["ratio"]])
            m["replicate_ratios"].append(r["ratio"])
            m["_cpu"].append(r.get("cpu_ratio"))
    out = []
    for m in merged.values():
        cpu = [c for c in m.pop("_cpu") if c]
        if len(m["replicate_ratios"]) > 1:
            low, high = ratio_interval(m["ratios"])
            m.update(ratio=round(geomean(m["ratios"]), 4), ci_low=round(low, 4), ci_high=round(high, 4),
                     cpu_ratio=round(geomean(cpu), 4) if cpu else None)
        out.append(m)
    return out


def retest_error_pct(rows: Sequence[dict[str, Any]]) -> float | None:
    """How far one run's measurement of a (configuration, workload) lands from another run's,
    mean absolute % (each run's ratio against the other's, both ways): what predicting a
    measurement by a repeat of it errs."""
    errs = []
    for r in rows:
        reps = r.get("replicate_ratios") or []
        errs += [abs(b - a) / a for i, a in enumerate(reps) for j, b in enumerate(reps) if i != j and a > 0]
    return round(float(np.mean(errs)) * 100, 2) if errs else None


@dataclass
class Dataset:
    rows: list[dict[str, Any]]
    space: FeatureSpace = field(default_factory=FeatureSpace)

    @classmethod
    def load(cls, path: Path | str | Sequence[Path | str] | None = None,
             knobs: Sequence[str] = CALIBRATED) -> "Dataset":
        """The rows of one calibration run, or of several runs of one plan pooled
        (:func:`pool_replicates`); by default the shipped runs (:func:`default_datasets`)."""
        paths = default_datasets() if path is None else [path] if isinstance(path, (str, Path)) else list(path)
        runs = [[r for r in read_rows(p) if r.get("ratio", 0) > 0 and not r.get("errors")] for p in paths]
        if not all(runs):
            empty = [str(p) for p, run in zip(paths, runs) if not run]
            raise FileNotFoundError(
                f"no usable calibration rows in {', '.join(empty)} (rows need a paired 'ratio'; a dataset of the "
                "earlier unpaired format must be recollected with `asgard tune calibrate`)")
        rows = runs[0] if len(runs) == 1 else pool_replicates(runs)
        return cls(rows, FeatureSpace(tuple(knobs)))

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def X(self) -> np.ndarray:
        return np.array([self.space.vector(workload_of(r), Configuration(r["knobs"])) for r in self.rows])

    @property
    def y(self) -> np.ndarray:
        """Throughput ratio over the default, geometric mean of the row's pairs."""
        return np.array([r["ratio"] for r in self.rows], dtype=np.float64)

    @property
    def cpu_ratio(self) -> np.ndarray:
        return np.array([r.get("cpu_ratio") or np.nan for r in self.rows], dtype=np.float64)

    def noise_rows(self) -> list[dict[str, Any]]:
        """The default measured against itself."""
        return [r for r in self.rows if r["tag"] == "aa"]

    @property
    def config_ids(self) -> np.ndarray:
        return np.array([r["config_id"] for r in self.rows])

    @property
    def workload_names(self) -> np.ndarray:
        return np.array([r["workload"]["name"] for r in self.rows])

    def workloads(self) -> list[Workload]:
        seen: dict[str, Workload] = {}
        for r in self.rows:
            seen.setdefault(r["workload"]["name"], workload_of(r))
        return list(seen.values())

    def restart_seconds(self) -> list[float]:
        """Measured restarts of the node (stop to CQL-ready), one per restart (a configuration's
        rows share them)."""
        seen: dict[str, list[float]] = {}
        for r in self.rows:
            seen.setdefault(r["run_slot"], r.get("applied", {}).get("restarts", []))
        return [v for restarts in seen.values() for v in restarts if v > 0]

    def median_restart_seconds(self, fallback: float = 12.0) -> float:
        vals = sorted(set(self.restart_seconds()))
        return float(np.median(vals)) if vals else fallback


def mape(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(np.abs(y_pred - y_true) / np.abs(y_true)) * 100.0)


def rmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(math.sqrt(np.mean((y_pred - y_true) ** 2)))


def r2(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    ss_res = float(np.sum((y_true - y_pred) ** 2))
    ss_tot = float(np.sum((y_true - np.mean(y_true)) ** 2))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
