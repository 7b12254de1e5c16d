"""Surrogate performance models: one interface, several models (like optuna's one sampler
interface with many samplers).

* :class:`MLPEnsemble` -- seed 004 §3.6/§4.3 exactly: feed-forward nets with hidden layers
  [14, 4], 20 nets from different initialisations trained to convergence with an L2 penalty
  (the stand-in for MATLAB's Bayesian regularisation), the 30% with the highest training error
  dropped, the other 14 averaged. The 20 nets train at once as one batched network.
* :class:`LightGBMSurrogate` -- gradient-boosted trees.

Both learn log(ops/s) from standardized features and predict ops/s; prediction is numpy only
(no torch at predict time), so a surrogate call costs microseconds per configuration.
:func:`pick_best` fits the candidates and keeps the one with the lower held-out error.
"""
from __future__ import annotations

import abc
import pickle
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .dataset import FeatureSpace, mape


class Surrogate(abc.ABC):
    name: str = "surrogate"

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
        self._fit((X - self.mu) / self.sigma, (y_log - self.y_mu) / self.y_sigma)
        self.space = space or self.space
        self.fit_seconds = time.perf_counter() - t0
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        self.calls += 1
        self.rows_predicted += len(X)
        z = self._predict((X - self.mu) / self.sigma)
        return np.exp(z * self.y_sigma + self.y_mu)

    def save(self, path: Path | str) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            pickle.dump(self, f)
        return path

    @staticmethod
    def load(path: Path | str) -> "Surrogate":
        with Path(path).open("rb") as f:
            return pickle.load(f)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


class MLPEnsemble(Surrogate):
    name = "mlp-ensemble"

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

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "hidden": list(self.hidden), "nets": self.n_nets,
                "kept": len(self.kept), "prune": self.prune, "weight_decay": self.weight_decay}


class LightGBMSurrogate(Surrogate):
    name = "lightgbm"

    def __init__(self, n_estimators: int = 300, learning_rate: float = 0.05, num_leaves: int = 15,
                 min_child_samples: int = 5, seed: int = 0):
        super().__init__()
        self.params = dict(n_estimators=n_estimators, learning_rate=learning_rate, num_leaves=num_leaves,
                           min_child_samples=min_child_samples, random_state=seed, verbose=-1,
                           subsample=0.8, subsample_freq=1, colsample_bytree=0.8, n_jobs=1)

    def _fit(self, X: np.ndarray, y: np.ndarray) -> None:
        import lightgbm as lgb

        self.model = lgb.LGBMRegressor(**self.params)
        self.model.fit(X, y)

    def _predict(self, X: np.ndarray) -> np.ndarray:
        return self.model.predict(X)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **{k: v for k, v in self.params.items() if k != "verbose"}}


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
