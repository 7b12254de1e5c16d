"""Surrogate performance models: one interface, several models (like optuna's one sampler
interface with many samplers).

* :class:`MLPEnsemble` -- Rafiki, Middleware'17, §3.6/§4.3 exactly: feed-forward nets with hidden layers
  [14, 4], 20 nets from different initialisations trained to convergence with an L2 penalty
  (the stand-in for MATLAB's Bayesian regularisation), the 30% with the highest training error
  dropped, the other 14 averaged. The 20 nets train at once as one batched network.
* :class:`LightGBMSurrogate` -- gradient-boosted trees.

Both learn the log of the paired ratio from standardized features (LightGBM also from the knob x
workload columns of :meth:`FeatureSpace.interactions`) and predict the ratio; prediction is numpy
only (no torch at predict time), so a surrogate call costs microseconds per configuration.
:func:`pick_best` fits the candidates and keeps the one with the lower held-out error.

A fitted surrogate is saved in its library's own format, never as a pickle
(:meth:`Surrogate.save`, :meth:`Surrogate.load`): a JSON file (``model.json``: the kind, the
features and knob space, the standardization, the held-out error, the format and library
versions) and beside it the weights, LightGBM's model file (``model.lgb.txt``) or the nets'
arrays (``model.npz``, read with ``allow_pickle=False``). Loading one runs no code.
"""
from __future__ import annotations

import abc
import json
import os
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .dataset import FeatureSpace, mape
from .knobs import KNOBS

#: ``format`` of a saved surrogate's JSON file
MODEL_FORMAT = "asgard-tuner-surrogate"
#: the newest ``format_version`` this code reads and the one it writes. 2: a LightGBM model may
#: compute knob x workload columns from the features (its hyperparameter ``interactions``, the
#: names under ``derived_features``); a version 1 file has none, and reads as it always did
MODEL_FORMAT_VERSION = 2
#: how to make a model in the current format (the shipped dataset; --data for one's own runs)
REFIT = "asgard tune fit --out {out}"


class ModelFileError(Exception):
    """A saved surrogate that cannot be loaded. Base of the model file errors.

    Attributes:
        path: the file that was read (a :class:`pathlib.Path`).
    """

    def __init__(self, message: str, path: Path | str):
        self.path = Path(path)
        super().__init__(message)


class PickledModelError(ModelFileError):
    """A model pickled by an earlier version (a ``.pkl`` path, or a file that starts with
    pickle's magic byte 0x80): never unpickled. The message says how to refit it.

    Attributes:
        path: the pickle (a :class:`pathlib.Path`).
        refit: the command that fits a model and saves it in the current format beside it.
    """

    def __init__(self, path: Path | str):
        path = Path(path)
        self.refit = REFIT.format(out=path.with_suffix(".json"))
        super().__init__(
            f"{path} is a pickled surrogate from an earlier version of asgard: models are no longer loaded "
            f"with pickle (unpickling runs code, and the pickle names module paths that have moved). Refit it "
            f"and save it as LightGBM's or numpy's files with a JSON beside them: `{self.refit}` (add "
            f"`--data <calibration.jsonl>` to fit your own calibration runs), or use the shipped model.", path)


class ModelFormatError(ModelFileError):
    """A model file that is not a surrogate this version reads: not JSON, another format or a
    newer format version, an unknown kind, a missing weights file, or features that no longer
    match the knob space (the model predates a change to the knobs: refit it).

    Attributes:
        path: the model's JSON file (a :class:`pathlib.Path`).
    """


def _write_atomically(path: Path, write) -> None:
    """``write(tmp)`` then rename over ``path``: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _looks_pickled(path: Path) -> bool:
    if path.suffix.lower() in (".pkl", ".pickle"):
        return True
    try:
        with path.open("rb") as f:
            return f.read(1) == b"\x80"  # pickle protocol 2 and later start with PROTO
    except OSError:
        return False  # missing or unreadable: reading the JSON says so


class Surrogate(abc.ABC):
    name: str = "surrogate"
    #: the ``kind`` a saved model records; :meth:`load` builds the class registered under it
    kind: str = ""
    #: the weights file's suffix, beside the JSON (``model.json`` -> ``model<suffix>``)
    weights_suffix: str = ""

    def __init__(self):
        self.space: FeatureSpace | None = None
        self.calls = 0  # predict invocations
        self.rows_predicted = 0
        self.fit_seconds = 0.0
        self.heldout_error_pct: float | None = None  # % error on held-out configurations

    @abc.abstractmethod
    def _fit(self, X: np.ndarray, y_log: np.ndarray) -> None: ...

    @abc.abstractmethod
    def _predict(self, X: np.ndarray) -> np.ndarray: ...

    def fit(self, X: np.ndarray, y: np.ndarray, space: FeatureSpace | None = None) -> "Surrogate":
        t0 = time.perf_counter()
        X = np.asarray(X, dtype=np.float64)
        self.mu, self.sigma = X.mean(0), X.std(0)
        self.sigma[self.sigma == 0] = 1.0
        y_log = np.log(np.asarray(y, dtype=np.float64))
        self.y_mu, self.y_sigma = float(y_log.mean()), float(y_log.std() or 1.0)
        self.space = space or self.space
        self._fit(self._inputs(X), (y_log - self.y_mu) / self.y_sigma)
        self.fit_seconds = time.perf_counter() - t0
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        self.calls += 1
        self.rows_predicted += len(X)
        z = self._predict(self._inputs(X))
        return np.exp(z * self.y_sigma + self.y_mu)

    @property
    def derived_features(self) -> list[str]:
        """Columns the model computes from the features and appends to them (none by default)."""
        return []

    def _derive(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _inputs(self, X: np.ndarray) -> np.ndarray:
        """What the model sees of the rows ``X``: the standardized features, then the
        :attr:`derived_features` of the raw ones."""
        Z = (X - self.mu) / self.sigma
        return np.hstack([Z, self._derive(X)]) if self.derived_features else Z

    def save(self, path: Path | str) -> Path:
        """Save as ``path`` (a ``.json`` file) and the weights beside it in the library's own
        format (``<stem><weights_suffix>``); returns ``path``. The JSON is written last, so it
        never names weights that are not there yet."""
        path = Path(path)
        if path.suffix.lower() != ".json":
            raise ValueError(f"{path}: a surrogate is saved as a .json file (its weights beside it), e.g. model.json")
        if self.space is None or not hasattr(self, "mu"):
            raise ValueError("fit the surrogate before saving it")
        path.parent.mkdir(parents=True, exist_ok=True)
        weights = path.with_suffix(self.weights_suffix)
        _write_atomically(weights, self._save_weights)
        library, version = self._library()
        doc = {
            "format": MODEL_FORMAT, "format_version": MODEL_FORMAT_VERSION,
            "kind": self.kind, "name": self.name,
            "library": library, "library_version": version, "asgard_version": _asgard_version(),
            "weights": weights.name,
            "features": self.space.names,
            "derived_features": self.derived_features,
            "knobs": list(self.space.knobs),
            "knob_space": {k: _knob_doc(KNOBS[k]) for k in self.space.knobs},
            "standardization": {"mu": [float(v) for v in self.mu], "sigma": [float(v) for v in self.sigma],
                                "y_mu": float(self.y_mu), "y_sigma": float(self.y_sigma)},
            "heldout_error_pct": None if self.heldout_error_pct is None else float(self.heldout_error_pct),
            "fit_seconds": float(self.fit_seconds),
            "hyperparameters": self._hyperparameters(),
        }
        _write_atomically(path, lambda tmp: tmp.write_text(json.dumps(doc, indent=1) + "\n"))
        return path

    @staticmethod
    def load(path: Path | str) -> "Surrogate":
        """The surrogate saved at ``path`` (its JSON file) by :meth:`save`; nothing is unpickled.

        Raises :class:`PickledModelError` for a model pickled by an earlier version and
        :class:`ModelFormatError` for anything else that is not a model this version reads."""
        path = Path(path)
        if _looks_pickled(path):
            raise PickledModelError(path)
        try:
            doc = json.loads(path.read_text())
        except (UnicodeDecodeError, ValueError) as exc:
            raise ModelFormatError(f"{path} is not a surrogate's JSON file ({exc}); "
                                   f"fit one with `{REFIT.format(out=path)}`", path) from None
        if not isinstance(doc, dict) or doc.get("format") != MODEL_FORMAT:
            raise ModelFormatError(f"{path} is not a surrogate saved by asgard (no \"format\": \"{MODEL_FORMAT}\")", path)
        version = doc.get("format_version")
        if not isinstance(version, int) or version > MODEL_FORMAT_VERSION:
            raise ModelFormatError(f"{path} has format version {version!r}; this version of asgard reads up to "
                                   f"{MODEL_FORMAT_VERSION}: upgrade asgard, or refit with "
                                   f"`{REFIT.format(out=path)}`", path)
        cls = _KINDS.get(doc.get("kind"))
        if cls is None:
            raise ModelFormatError(f"{path}: unknown surrogate kind {doc.get('kind')!r}; known: {sorted(_KINDS)}", path)
        try:
            space = FeatureSpace(tuple(doc["knobs"]))
            unknown = [k for k in space.knobs if k not in KNOBS]
            if unknown or space.names != list(doc["features"]):
                what = f"unknown knobs {', '.join(unknown)}" if unknown else "a knob's choices changed"
                raise ModelFormatError(f"{path} was fitted on features this version's knob space does not have "
                                       f"({what}): refit it with `{REFIT.format(out=path)}`", path)
            st = doc["standardization"]
            mu, sigma = np.array(st["mu"], dtype=np.float64), np.array(st["sigma"], dtype=np.float64)
            if mu.shape != (len(space.names),) or sigma.shape != mu.shape:
                raise ModelFormatError(f"{path}: the standardization has {mu.size} values for "
                                       f"{len(space.names)} features", path)
            weights = doc["weights"]
            if not isinstance(weights, str) or Path(weights).name != weights or weights in ("", ".", ".."):
                raise ModelFormatError(f"{path}: 'weights' must name a file beside it, got {weights!r}", path)
            model = cls(**cls._saved_hyperparameters(doc.get("hyperparameters") or {}, version))
            model.space, model.mu, model.sigma = space, mu, sigma
            model.y_mu, model.y_sigma = float(st["y_mu"]), float(st["y_sigma"])
            model.name = doc.get("name") or model.name
            model.heldout_error_pct = None if doc.get("heldout_error_pct") is None else float(doc["heldout_error_pct"])
            model.fit_seconds = float(doc.get("fit_seconds") or 0.0)
            if list(doc.get("derived_features") or []) != model.derived_features:
                raise ModelFormatError(f"{path} computes columns from the features that this version computes "
                                       f"otherwise ({doc.get('derived_features')} != {model.derived_features}): "
                                       f"refit it with `{REFIT.format(out=path)}`", path)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFormatError(f"{path} is not a complete surrogate file: {type(exc).__name__}: {exc}", path) from None
        weights_path = path.parent / weights
        if not weights_path.is_file():
            raise ModelFormatError(f"{path}: its weights file {weights_path} is missing", path)
        try:
            model._load_weights(weights_path, path)
        except ModelFileError:
            raise
        except Exception as exc:  # the libraries raise their own types on a damaged file
            raise ModelFormatError(f"{path}: cannot read its weights {weights_path}: {type(exc).__name__}: {exc}",
                                   path) from None
        return model

    @abc.abstractmethod
    def _save_weights(self, path: Path) -> None: ...

    @abc.abstractmethod
    def _load_weights(self, path: Path, source: Path) -> None:
        """Read the weights file ``path`` named by the JSON file ``source``."""

    @abc.abstractmethod
    def _library(self) -> tuple[str, str]:
        """(library whose format the weights file is in, its version)."""

    @abc.abstractmethod
    def _hyperparameters(self) -> dict[str, Any]:
        """The constructor's arguments, as JSON (``cls(**them)`` on load)."""

    @classmethod
    def _saved_hyperparameters(cls, saved: dict[str, Any], format_version: int) -> dict[str, Any]:
        """The constructor's arguments for a file of ``format_version`` that saved ``saved``."""
        return saved

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


class MLPEnsemble(Surrogate):
    name = "mlp-ensemble"
    kind = "mlp-ensemble"
    weights_suffix = ".npz"

    def __init__(self, hidden: Sequence[int] = (14, 4), n_nets: int = 20, prune: float = 0.3,
                 epochs: int = 600, lr: float = 0.02, weight_decay: float = 1.0, seed: int = 0):
        super().__init__()
        self.hidden, self.n_nets, self.prune = tuple(hidden), n_nets, prune
        self.epochs, self.lr, self.weight_decay, self.seed = epochs, lr, weight_decay, seed
        self.kept: list[int] = []
        self.train_errors: list[float] = []
        if n_nets == 1:
            self.name = "mlp-single"

    def _fit(self, X: np.ndarray, y: np.ndarray) -> None:
        import torch

        torch.manual_seed(self.seed)
        n, d = X.shape
        sizes = [d, *self.hidden, 1]
        E = self.n_nets
        params = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            bound = 1.0 / np.sqrt(a)  # PyTorch Linear's initialisation, one draw per net
            W = (torch.rand(E, a, b, dtype=torch.float64) * 2 - 1) * bound
            B = (torch.rand(E, 1, b, dtype=torch.float64) * 2 - 1) * bound
            params += [W.requires_grad_(), B.requires_grad_()]
        Xt = torch.as_tensor(X).unsqueeze(0).expand(E, n, d)
        yt = torch.as_tensor(y).view(1, n, 1).expand(E, n, 1)
        opt = torch.optim.Adam(params, lr=self.lr)

        def forward(x):
            h = x
            for i in range(0, len(params), 2):
                h = torch.baddbmm(params[i + 1], h, params[i])
                if i + 2 < len(params):
                    h = torch.tanh(h)
            return h

        prev = float("inf")
        for epoch in range(self.epochs):
            opt.zero_grad()
            mse = ((forward(Xt) - yt) ** 2).mean(dim=(1, 2))  # per net
            l2 = sum((p ** 2).sum(dim=tuple(range(1, p.dim()))) for p in params[0::2])
            loss = (mse + self.weight_decay * l2 / n).sum()
            loss.backward()
            opt.step()
            if epoch % 100 == 99:  # convergence: relative change below 1e-5
                cur = float(loss.detach())
                if abs(prev - cur) < 1e-5 * abs(prev):
                    break
                prev = cur
        with torch.no_grad():
            errs = ((forward(Xt) - yt) ** 2).mean(dim=(1, 2)).numpy()
        n_keep = max(1, int(round(E * (1 - self.prune)))) if E > 1 else 1
        self.kept = [int(i) for i in np.argsort(errs)[:n_keep]]
        self.train_errors = [float(e) for e in errs]
        self.weights = [p.detach().numpy()[self.kept].copy() for p in params]

    def _predict(self, X: np.ndarray) -> np.ndarray:
        h = np.broadcast_to(X, (len(self.kept),) + X.shape)
        for i in range(0, len(self.weights), 2):
            h = np.matmul(h, self.weights[i]) + self.weights[i + 1]
            if i + 2 < len(self.weights):
                h = np.tanh(h)
        return h[..., 0].mean(axis=0)

    def _save_weights(self, path: Path) -> None:
        # W0, B0, W1, B1, ...: each (kept nets, in, out) / (kept nets, 1, out), float64
        with path.open("wb") as f:
            np.savez(f, **{f"{'WB'[i % 2]}{i // 2}": w for i, w in enumerate(self.weights)},
                     kept=np.asarray(self.kept, dtype=np.int64), train_errors=np.asarray(self.train_errors))

    def _load_weights(self, path: Path, source: Path) -> None:
        with np.load(path, allow_pickle=False) as z:
            layers = len(self.hidden) + 1
            self.weights = [np.array(z[f"{'WB'[i % 2]}{i // 2}"], dtype=np.float64) for i in range(2 * layers)]
            self.kept = [int(i) for i in z["kept"]]
            self.train_errors = [float(e) for e in z["train_errors"]]
        if self.weights[0].shape[1] != len(self.space.names) or len(self.kept) != len(self.weights[0]):
            raise ModelFormatError(f"{source}: weights {path.name} of shape {self.weights[0].shape} for "
                                   f"{len(self.space.names)} features and {len(self.kept)} nets", source)

    def _library(self) -> tuple[str, str]:
        return "numpy", np.__version__

    def _hyperparameters(self) -> dict[str, Any]:
        return {"hidden": list(self.hidden), "n_nets": self.n_nets, "prune": self.prune, "epochs": self.epochs,
                "lr": self.lr, "weight_decay": self.weight_decay, "seed": self.seed}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "hidden": list(self.hidden), "nets": self.n_nets,
                "kept": len(self.kept), "prune": self.prune, "weight_decay": self.weight_decay}


class LightGBMSurrogate(Surrogate):
    """Gradient-boosted trees on the features and, with ``interactions``, the knob x workload
    columns of :meth:`FeatureSpace.interactions` (issue 37: on workloads it has not seen, 7.2% error
    against 8.2% without them, docs/results/issue37-surrogate-workload-features.txt). Four leaves a
    tree: what an inner cross-validation over the training workloads chose."""

    name = "lightgbm"
    kind = "lightgbm"
    weights_suffix = ".lgb.txt"

    def __init__(self, n_estimators: int = 300, learning_rate: float = 0.05, num_leaves: int = 4,
                 min_child_samples: int = 5, seed: int = 0, interactions: bool = True):
        super().__init__()
        self.interactions = bool(interactions)
        self.params = dict(n_estimators=n_estimators, learning_rate=learning_rate, num_leaves=num_leaves,
                           min_child_samples=min_child_samples, random_state=seed, verbose=-1,
                           subsample=0.8, subsample_freq=1, colsample_bytree=0.8, n_jobs=1)

    @property
    def derived_features(self) -> list[str]:
        return self.space.interaction_names if self.interactions and self.space is not None else []

    def _derive(self, X: np.ndarray) -> np.ndarray:
        return self.space.interactions(X)

    def _fit(self, X: np.ndarray, y: np.ndarray) -> None:
        import lightgbm as lgb

        self.model = lgb.LGBMRegressor(**self.params)
        self.model.fit(X, y)
        self.booster = self.model.booster_

    def _predict(self, X: np.ndarray) -> np.ndarray:
        # the booster's own predict, as LGBMRegressor.predict calls it (one thread: small batches)
        return self.booster.predict(X, num_threads=self.params.get("n_jobs") or 1)

    def _save_weights(self, path: Path) -> None:
        self.booster.save_model(str(path))  # LightGBM's text model file

    def _load_weights(self, path: Path, source: Path) -> None:
        import lightgbm as lgb

        self.booster = lgb.Booster(model_file=str(path))
        width = len(self.space.names) + len(self.derived_features)
        if self.booster.num_feature() != width:
            raise ModelFormatError(f"{source}: weights {path.name} of {self.booster.num_feature()} features for "
                                   f"{width}", source)

    def _library(self) -> tuple[str, str]:
        import lightgbm as lgb

        return "lightgbm", lgb.__version__

    def _hyperparameters(self) -> dict[str, Any]:
        p = self.params
        return {"n_estimators": p["n_estimators"], "learning_rate": p["learning_rate"], "num_leaves": p["num_leaves"],
                "min_child_samples": p["min_child_samples"], "seed": p["random_state"],
                "interactions": self.interactions}

    @classmethod
    def _saved_hyperparameters(cls, saved: dict[str, Any], format_version: int) -> dict[str, Any]:
        # a model saved before the interactions (format 1) has none
        return {"interactions": False, **saved} if format_version < 2 else saved

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **{k: v for k, v in self.params.items() if k != "verbose"},
                "interactions": self.interactions}


#: the class :meth:`Surrogate.load` builds for each saved ``kind``
_KINDS: dict[str, type[Surrogate]] = {"mlp-ensemble": MLPEnsemble, "lightgbm": LightGBMSurrogate}


def _knob_doc(knob) -> dict[str, Any]:
    """A knob's domain as a reader of the model's JSON needs it."""
    doc = {"kind": knob.kind, "default": knob.default, "apply": knob.apply}
    if knob.kind == "choice":
        doc["choices"] = list(knob.choices)
    else:
        doc.update(low=knob.low, high=knob.high)
    if knob.unit:
        doc["unit"] = knob.unit
    return doc


def _asgard_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("asgard-dagster")
    except PackageNotFoundError:
        return None


SURROGATES = {"mlp-ensemble": MLPEnsemble, "mlp-single": lambda **kw: MLPEnsemble(n_nets=1, **kw),
              "lightgbm": LightGBMSurrogate}


def make(name: str, **kw) -> Surrogate:
    try:
        return SURROGATES[name](**kw)
    except KeyError:
        raise ValueError(f"unknown surrogate {name!r}; choose from {sorted(SURROGATES)}") from None


def group_split(groups: np.ndarray, frac: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Boolean train/test masks holding out ``frac`` of the distinct ``groups`` (at least one)."""
    uniq = np.unique(groups)
    n_test = max(1, int(round(len(uniq) * frac)))
    test_groups = set(rng.choice(uniq, size=n_test, replace=False).tolist())
    test = np.array([g in test_groups for g in groups])
    return ~test, test


def pick_best(X: np.ndarray, y: np.ndarray, groups: np.ndarray, space: FeatureSpace,
              candidates: Sequence[str] = ("mlp-ensemble", "lightgbm"), holdout: float = 0.25,
              seed: int = 0) -> tuple[Surrogate, dict[str, float]]:
    """Held-out error (% MAPE, configurations held out by ``groups``) of each candidate; the
    best is refitted on everything and returned with the scores."""
    rng = np.random.default_rng(seed)
    train, test = group_split(groups, holdout, rng)
    scores = {}
    for name in candidates:
        m = make(name).fit(X[train], y[train], space)
        scores[name] = mape(y[test], m.predict(X[test]))
    best = min(scores, key=scores.get)
    model = make(best).fit(X, y, space)
    # how far a prediction for an unmeasured configuration may be off: the cost-benefit
    # analysis discounts predicted gains by it
    model.heldout_error_pct = float(scores[best])
    return model, scores
