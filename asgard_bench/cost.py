"""The cost model of ``asgard bench apps``: AWS prices of November 2022 (``prices.yaml``).

Cost of one run (all in USD)::

    function  = GB-seconds x price_per_GB_s + invocations x price_per_request
                GB-seconds = sum of step durations x configured function memory (MB / 1024)
    storage   = instance hourly price x E2E seconds / 3600          (Cassandra, Redis)
              | PUTs / 1000 x put price + GETs / 1000 x get price  (S3)
              | 0                                                  (local files: the function's own disk)
    cost      = function + storage

Perf/$ = 1 / (E2E latency x cost)  (Asgard paper, footnote 1: performance is the inverse of the
E2E latency; cost the raw $ of the services). Its unit is 1 / (s x USD).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

DEFAULT_PRICES = Path(__file__).with_name("prices.yaml")


@dataclass(frozen=True)
class Prices:
    gb_second: float
    request: float
    memory_mb: float
    s3_put_per_1000: float
    s3_get_per_1000: float
    instances: dict[str, float]
    storage: dict[str, Any]
    what_if_instances: tuple[str, ...] = ("i3.large", "c5.large", "m5.large")
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def memory_gb(self) -> float:
        """Lambda's billed GB (1 GB = 1024 MB)."""
        return self.memory_mb / 1024.0

    @classmethod
    def load(cls, path: str | Path | None = None) -> "Prices":
        raw = yaml.safe_load(Path(path or DEFAULT_PRICES).read_text())
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Prices":
        fn, s3 = raw["function"], raw["s3"]
        return cls(
            gb_second=float(fn["gb_second"]), request=float(fn["request"]), memory_mb=float(fn["memory_mb"]),
            s3_put_per_1000=float(s3["put_per_1000"]), s3_get_per_1000=float(s3["get_per_1000"]),
            instances={k: float(v["hourly"] if isinstance(v, Mapping) else v) for k, v in raw["instances"].items()},
            storage=dict(raw["storage"]), what_if_instances=tuple(raw.get("what_if_instances") or ()),
            raw=dict(raw),
        )

    def storage_kind(self, backend: str) -> tuple[str, str | None]:
        """("instance", name) | ("s3_requests", None) | ("none", None) for a bench backend."""
        spec = self.storage.get(backend)
        if spec is None:
            raise KeyError(f"prices have no storage entry for backend {backend!r}")
        if isinstance(spec, Mapping):
            name = spec["instance"]
            if name not in self.instances:
                raise KeyError(f"backend {backend!r} is priced on unknown instance {name!r}")
            return "instance", name
        if spec in ("s3_requests", "none"):
            return spec, None
        raise ValueError(f"storage pricing of {backend!r} must be {{instance: NAME}}, s3_requests or none; got {spec!r}")


@dataclass
class RunCost:
    function_gb_s: float
    function_usd: float      # GB-seconds + invocation requests
    storage_usd: float
    storage_basis: str       # e.g. "i3.large x 41.2 s", "12 PUT + 30 GET", "local disk (none)"

    @property
    def total(self) -> float:
        return self.function_usd + self.storage_usd


def function_cost(step_seconds_total: float, invocations: int, prices: Prices) -> tuple[float, float]:
    """(GB-seconds, USD) of the functions: every step is one invocation of ``memory_mb``."""
    gb_s = step_seconds_total * prices.memory_gb
    return gb_s, gb_s * prices.gb_second + invocations * prices.request


def instance_cost(hourly: float, seconds: float) -> float:
    return hourly * seconds / 3600.0


def s3_request_cost(puts: int, gets: int, prices: Prices) -> float:
    return puts / 1000.0 * prices.s3_put_per_1000 + gets / 1000.0 * prices.s3_get_per_1000


def run_cost(backend: str, e2e_seconds: float, step_seconds_total: float, invocations: int,
             puts: int, gets: int, prices: Prices, instance: str | None = None) -> RunCost:
    """The cost of one run on ``backend``; ``instance`` overrides its priced instance (what-if)."""
    gb_s, fn_usd = function_cost(step_seconds_total, invocations, prices)
    kind, name = prices.storage_kind(backend)
    if instance is not None:
        kind, name = "instance", instance
    if kind == "instance":
        storage = instance_cost(prices.instances[name], e2e_seconds)
        basis = f"{name} x {e2e_seconds:.1f} s"
    elif kind == "s3_requests":
        storage = s3_request_cost(puts, gets, prices)
        basis = f"{puts} PUT + {gets} GET"
    else:
        storage, basis = 0.0, "local disk (no service)"
    return RunCost(gb_s, fn_usd, storage, basis)


def perf_per_dollar(e2e_seconds: float, cost_usd: float) -> float:
    """1 / (E2E latency x cost), the Asgard paper's Perf/$ (per second per USD)."""
    if e2e_seconds <= 0 or cost_usd <= 0:
        return float("nan")
    return 1.0 / (e2e_seconds * cost_usd)


#: S3 APIs billed at the PUT, COPY, POST, LIST price; DELETE is free; everything else
#: (GET, HEAD, ...) is billed at the GET price (https://aws.amazon.com/s3/pricing/)
S3_PUT_CLASS = frozenset({
    "putobject", "copyobject", "postpolicybucket", "listobjectsv1", "listobjectsv2", "listobjectversions",
    "listbuckets", "listmultipartuploads", "listobjectparts", "newmultipartupload", "putobjectpart",
    "copyobjectpart", "completemultipartupload", "putbucket", "putbucketpolicy", "putbucketlifecycle",
    "putobjecttagging", "putbuckettagging",
})
S3_FREE = frozenset({"deleteobject", "deletemultipleobjects", "abortmultipartupload", "deletebucket"})


def s3_requests(before: dict[str, int], after: dict[str, int]) -> tuple[int, int]:
    """(PUT-class, GET-class) requests between two snapshots of the S3 server's per-API counters
    (:meth:`asgard.resources.minio.MinioServer.request_counts`): what a run really sent, whichever IO
    manager sent it (the stock manager's LIST at start-up and multipart uploads included)."""
    puts = gets = 0
    for api, n in after.items():
        delta = n - before.get(api, 0)
        if delta <= 0 or api in S3_FREE:
            continue
        if api in S3_PUT_CLASS:
            puts += delta
        else:
            gets += delta
    return puts, gets
