"""SOPHIA's cost-benefit analysis as Asgard uses it (Asgard, Front. HPC'23, §3).

Benefit: throughput gained over the look-ahead window T_L by running the new configuration,
    B = sum_{k in [0, T_L]} (H(W(k), C_new) - H(W(k), C_old))   [operations]
Cost: throughput lost while the node is offline (T_r, the measured restart seconds) or
slowed by a live change,
    C = H(W, C_old) * T_r                                     [operations]
(restarts also eat into the window: the new configuration serves T_L - T_r seconds).
Reconfigure iff B > C (optionally by a margin).

A surrogate's prediction is only as good as its held-out error: :func:`decide` discounts the
new configuration's predicted throughput by that error (``uncertainty``), so a gain the model
cannot tell from its own error never pays for a restart.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .knobs import RESTART, KNOBS, Configuration

# the fraction of throughput a live change (nodetool, ALTER) costs while it is applied, where none
# was measured yet (the retune job measures it: live_changes.jsonl): an assumption, not a measurement
ASSUMED_LIVE_SLOWDOWN = 0.1


@dataclass
class Decision:
    reconfigure: bool
    benefit_ops: float
    cost_ops: float
    current_ops_per_s: float
    new_ops_per_s: float
    lookahead_s: float
    downtime_s: float
    needs_restart: bool
    reason: str
    #: the new configuration's throughput as predicted, before the discount by the model's error
    predicted_ops_per_s: float = float("nan")

    @property
    def predicted_gain_pct(self) -> float:
        """Predicted gain of the new configuration over the current one (undiscounted), in %."""
        return (self.predicted_ops_per_s / self.current_ops_per_s - 1) * 100 if self.current_ops_per_s else 0.0

    @property
    def net_ops(self) -> float:
        return self.benefit_ops - self.cost_ops

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["net_ops"] = self.net_ops
        d["predicted_gain_pct"] = self.predicted_gain_pct
        return d


def should_reconfigure(current_ops_per_s: float, new_ops_per_s: float, lookahead_s: float,
                       restart_seconds: float, needs_restart: bool = True, live_seconds: float = 0.0,
                       live_slowdown: float = ASSUMED_LIVE_SLOWDOWN, margin: float = 0.0, uncertainty: float = 0.0,
                       unit: str = "ops") -> Decision:
    """Decide with the throughputs (measured or predicted) of the old and new configuration.

    ``restart_seconds``: measured stop-to-ready time of this node; ``live_seconds``: how long
    live (nodetool / ALTER TABLE) changes take, during which throughput drops by
    ``live_slowdown``. ``margin``: required net gain as a fraction of the cost. ``uncertainty``:
    relative error of ``new_ops_per_s`` (a surrogate's held-out error, 0..1); the benefit is
    counted from ``new_ops_per_s * (1 - uncertainty)``.
    """
    if lookahead_s < 0 or restart_seconds < 0 or current_ops_per_s < 0 or new_ops_per_s < 0:
        raise ValueError("throughputs and durations must be non-negative")
    if not 0.0 <= uncertainty < 1.0:
        raise ValueError(f"uncertainty is a fraction in [0, 1), got {uncertainty}")
    predicted_ops_per_s = new_ops_per_s
    new_ops_per_s = new_ops_per_s * (1.0 - uncertainty)
    downtime = restart_seconds if needs_restart else 0.0
    serving = max(0.0, lookahead_s - downtime)
    benefit = (new_ops_per_s - current_ops_per_s) * serving
    cost = current_ops_per_s * downtime + current_ops_per_s * live_slowdown * live_seconds
    go = benefit > cost * (1.0 + margin) and new_ops_per_s > current_ops_per_s
    if predicted_ops_per_s <= current_ops_per_s:
        reason = "the new configuration is not faster"
    elif new_ops_per_s <= current_ops_per_s:
        reason = (f"the predicted gain of {(predicted_ops_per_s / max(current_ops_per_s, 1e-9) - 1) * 100:+.1f}% "
                  f"is within the surrogate's error of {uncertainty * 100:.1f}%")
    elif go:
        reason = f"gain {benefit:.3g} {unit} over {lookahead_s:.0f}s exceeds the {cost:.3g} {unit} lost to reconfiguring"
    else:
        reason = (f"gain {benefit:.3g} {unit} over {lookahead_s:.0f}s does not pay for the {cost:.3g} {unit} lost "
                  "to reconfiguring")
    return Decision(go, benefit, cost, current_ops_per_s, new_ops_per_s, lookahead_s, downtime, needs_restart, reason,
                    predicted_ops_per_s)


def needs_restart(old: Configuration, new: Configuration) -> bool:
    return any(KNOBS[k].apply == RESTART for k in new.diff(old))


def decide(model: Any, workload: Any, current: Configuration, new: Configuration, lookahead_s: float,
           restart_seconds: float, **kw: Any) -> Decision:
    """:func:`should_reconfigure` with throughputs predicted by a surrogate, discounted by its
    held-out error (``model.heldout_error_pct``, set by :func:`asgard.tuner.surrogates.pick_best`)."""
    cur, nxt = model.predict(model.space.matrix(workload, [current, new]))
    kw.setdefault("uncertainty", min(float(getattr(model, "heldout_error_pct", 0.0) or 0.0) / 100.0, 0.99))
    # the surrogate predicts throughput relative to the stock default: benefit and cost come
    # out in seconds of the default's throughput
    kw.setdefault("unit", "s of default throughput")
    decision = should_reconfigure(float(cur), float(nxt), lookahead_s, restart_seconds,
                                  needs_restart=needs_restart(current, new), **kw)
    if not new.diff(current):
        decision.reason = "the recommended configuration is already in force"
    return decision
