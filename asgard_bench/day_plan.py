"""What ``asgard bench day``'s two engines share (:mod:`asgard_bench.day` for Dagster,
:mod:`asgard_bench.day_airflow` for Airflow): the day's configuration and mix, the variants and
their order round by round, best_static's levers and coordinate search, the loop's fields, the
summaries of a setting's days, and the emulated hosts or a profile's servers brought up for a day."""
from __future__ import annotations

import contextlib
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from asgard.resources.network.hosts import link_rate  # standard library imports only

SETTINGS = ("loopback", "cloud", "hosts3")
RUNNABLE_SETTINGS = ("loopback", "cloud")
VARIANTS = ("peer", "default", "best_static", "loop")
ENGINES = ("dagster", "airflow")
PEER_BACKEND = "s3_stock"
MiB = 1 << 20
#: the per-edge levers best_static sets once for every edge: the default first, then the alternatives
STATIC_LEVERS: dict[str, tuple] = {
    "replicas": ("store", "1"),  # first: the codecs then weighed at its copies; only on a ring of more than one
    "codec": ("none", "lz4", "blosc-lz4", "zstd"),
    "placement": ("ring", "producer-local"),
    # 0 is the store's own (DEFAULT_CHUNK_SIZE, 1 MiB); 16 MiB is over a default node's largest chunk (15 MiB)
    "chunk_size_bytes": (0, 4 * MiB, 8 * MiB),
    "concurrency": (8, 4, 16),
}
#: the share of its store seconds a probe must save on the best so far to replace it: under it, one probe
#: each cannot tell a gain from noise (assumption: a day's store seconds varied 2.3-17% round to round with
#: its levers unchanged, median 6.7%, and its E2E 2.1-10.5%, median 5.2%; nine variant-days of the three
#: cloud days of 2026-11-29, docs/results/issue37-chunks-and-search.txt)
SEARCH_MIN_GAIN = 0.05
#: the loop's IO manager fields: decided per output (chunk_reads is the connection's, auto by default);
#: replicas auto keeps one copy of a 1:1 intermediate and the store's factor for a broadcast or an asset
LOOP_FIELDS = {"codec": "auto", "placement": "auto", "replicas": "auto"}
#: columns (the ETL), text landed and parsed into columns (the logs), and a seed app: edges that want different codecs
DEFAULT_MIX = "etl_columnar:scale=0.5,log_analytics:scale=0.5,word_count"


def store_table_knobs(replication_factor: int = 1) -> dict[str, Any]:
    """The table knobs' values on the objects table as the store creates it: compression off (the
    store's codecs compress) and its gc_grace_seconds (0 with one replica)."""
    from asgard.resources.stores.cql.statements import table_gc_grace_seconds

    return {"compression": "none", "gc_grace_seconds": table_gc_grace_seconds(replication_factor)}


def parse_mix(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``app[:key=value[;key=value]]`` entries, comma-separated, each one run of the day."""
    from asgard.pipelines.jobs import APPS

    mix = []
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        app, _, rest = entry.partition(":")
        if app not in APPS:
            raise ValueError(f"--mix: unknown app {app!r} in {entry!r}; known: {sorted(APPS)}")
        sizes: dict[str, Any] = {}
        for pair in (p for p in rest.split(";") if p):
            key, eq, value = pair.partition("=")
            if not eq or key not in ("scale", "fanout", "reducers"):
                raise ValueError(f"--mix: {pair!r} in {entry!r} is not scale=, fanout= or reducers=<number>")
            sizes[key] = int(value) if key != "scale" else float(value)
        mix.append((app, sizes))
    if not mix:
        raise ValueError("--mix names no run")
    return mix


@dataclass
class DayConfig:
    settings: list[str] = field(default_factory=lambda: list(RUNNABLE_SETTINGS))
    mix: list[tuple[str, dict]] = field(default_factory=lambda: parse_mix(DEFAULT_MIX))
    concurrent: int = 2  # runs of the day at once
    rounds: int = 3  # interleaved rounds (>= 2 for a noise floor)
    max_concurrent: int = 2  # steps at once within a run
    search_probes: int = 8  # best_static's probe runs at most, per setting
    prices: str | None = None
    out: str | None = None
    model_path: str | None = None
    engine: str = "dagster"  # or "airflow": the mix as DAG runs (asgard_bench.day_airflow)
    host_link_mbit: int | None = None  # hosts3: each host's link, Mbit/s each way (None or 0: unshaped)

    def check(self) -> None:
        unknown = [s for s in self.settings if s not in SETTINGS]
        if unknown:
            raise ValueError(f"unknown settings {unknown}; choose from {list(SETTINGS)}")
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine {self.engine!r}; choose from {list(ENGINES)}")
        if self.rounds < 1 or self.concurrent < 1 or self.max_concurrent < 1 or self.search_probes < 1:
            raise ValueError("rounds, concurrent, max_concurrent and search_probes must be at least 1")
        self.host_link_mbit = link_rate(self.host_link_mbit)  # HostLinkError (a ValueError); 0 is unshaped


def variant_order(i: int) -> list[str]:
    return [VARIANTS[(i + j) % len(VARIANTS)] for j in range(len(VARIANTS))]


def static_levers(replication_factor: int) -> dict[str, tuple]:
    """best_static's levers on a store keeping ``replication_factor`` copies: one copy of every edge
    (broadcasts and the last outputs too) is a choice only where the ring keeps more than one."""
    return {k: v for k, v in STATIC_LEVERS.items() if k != "replicas" or replication_factor > 1}


def trial(client: dict, day: dict) -> dict:
    """A probe's record: its levers, the apps its day ran, its E2E and its figure, the seconds its runs'
    puts and loads took in all (``store_s``; inf when a run failed: a lever that fails a run never wins)."""
    failed = bool(day["failed_runs"])
    store = sum((r.get("write_s_total") or 0.0) + (r.get("read_s_total") or 0.0) for r in day["runs"])
    return {"client": dict(client), "apps": [r["app"] for r in day["runs"]],
            "e2e_s": day["e2e_s"] if not failed else float("inf"),
            "store_s": round(store, 3) if not failed else float("inf")}


def search_static(probe: Callable[[dict], dict], probes: int, say: Callable[[str], None],
                  levers: dict[str, tuple]) -> tuple[dict, list[dict]]:
    """Coordinate search over ``levers`` (:func:`static_levers`): each lever in turn, every value
    tried with the others at the best so far, one ``probe`` each (the day's mix with those levers,
    its day's record; a value that does not beat the best stays out); ``probes`` probes at most.
    A probe is judged by its runs' store seconds (puts and loads, a codec's work included), not its
    E2E: the levers act there, on 38-49% of the steps' time, so a lever's effect is about twice as
    large a share of them, against a round-to-round noise only a little larger (:data:`SEARCH_MIN_GAIN`).
    The cloud days of 2026-11-29: blosc-lz4 against lz4 on every edge, 11 against 13.4 store seconds a
    day (-18%), 15.9 against 17.4 s E2E (-9%); judged by E2E, one probe each (18.6 against 18.3 s), the
    search had kept lz4. A value is kept only where it beats the best so far by ``SEARCH_MIN_GAIN``."""
    best = {k: v[0] for k, v in levers.items()}
    trials = [trial(best, probe(best))]
    best_s = trials[0]["store_s"]
    for lever, values in levers.items():
        for value in values[1:]:
            if len(trials) >= probes:
                return best, trials
            candidate = {**best, lever: value}
            trials.append(trial(candidate, probe(candidate)))
            t = trials[-1]
            say(f"  search {lever}={value}: store {t['store_s']:.1f}s, E2E {t['e2e_s']:.1f}s (best store {best_s:.1f}s)")
            if t["store_s"] < (1 - SEARCH_MIN_GAIN) * best_s:
                best, best_s = candidate, t["store_s"]
    return best, trials


def median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarize_variants(days: list[dict]) -> dict[str, dict]:
    """Per variant, the medians of its days (E2E, Perf/$, store share), its E2E range and its failures."""
    variants = {}
    for v in VARIANTS:
        mine = [d for d in days if d["variant"] == v]
        variants[v] = {"e2e_s": median([d["e2e_s"] for d in mine]),
                       "perf_per_dollar": median([d["perf_per_dollar"] for d in mine]),
                       "e2e_s_range": [min(d["e2e_s"] for d in mine), max(d["e2e_s"] for d in mine)] if mine else None,
                       "store_share_pct": median([d["store_share_pct"] for d in mine]),
                       "failed_runs": sum(d["failed_runs"] for d in mine),
                       "reconfiguration_s": round(sum(d["reconfiguration_s"] for d in mine), 2), "days": len(mine)}
    return variants


def cv_pct(xs: list[float]) -> float | None:
    return 100 * statistics.stdev(xs) / statistics.mean(xs) if len(xs) > 1 else None


def ratios(variants: dict) -> dict[str, float | None]:
    """E2E speed-ups (the other's E2E over this one's) and Perf/$ ratios the issue's targets name."""
    def over(a: str, b: str, key: str) -> float | None:
        x, y = variants[a][key], variants[b][key]
        if not x or not y:
            return None
        return round((y / x) if key == "e2e_s" else (x / y), 3)

    return {"loop_over_best_static_e2e": over("loop", "best_static", "e2e_s"),
            "loop_over_peer_e2e": over("loop", "peer", "e2e_s"),
            "default_over_peer_e2e": over("default", "peer", "e2e_s"),
            "loop_over_peer_perf_per_dollar": over("loop", "peer", "perf_per_dollar"),
            "loop_over_default_e2e": over("loop", "default", "e2e_s")}


class HostsForDay:
    """The 3 emulated hosts for a day: brought up unless they run (and then down after the day),
    their client environment (the ring's login, the broker, the MinIO) set in this process meanwhile."""

    def __init__(self, say: Callable[[str], None], airflow_dags: Path | None = None, link_mbit: int | None = None):
        self.say, self.started, self.airflow_dags, self.link_mbit = say, False, airflow_dags, link_mbit
        self.environment = contextlib.ExitStack()
        self.links_before: dict | None = None

    def up(self) -> str:
        from asgard.resources.paths import REPO_ROOT
        from asgard.resources.workers.deployment import EmulatedDeployment

        deployment = EmulatedDeployment()
        running = (deployment.hosts_up() and deployment.broker().is_ready() and deployment.object_store().is_ready()
                   and all(w.is_ready() for w in deployment.workers()))
        if not running:
            self.say("[hosts3] asgard hosts up: 3 hosts, the ring, the broker, the MinIO, the workers")
            deployment = EmulatedDeployment(3, code_paths=[REPO_ROOT], worker_concurrency=1,
                                            airflow_dags=self.airflow_dags)
            self.started = True
            deployment.up()
        self.environment.enter_context(deployment.client_environment_set())
        # the day's links (hosts that ran before get theirs back at the end)
        self.links_before = deployment.hosts.link_rates()
        deployment.hosts.shape_links(self.link_mbit)
        link = (f"each host's link {self.link_mbit} Mbit/s each way (tc HTB)" if self.link_mbit else
                "the hosts' links unshaped (the bridge: memory speed)")
        return (f"{deployment.count} emulated hosts (network namespaces on one bridge), a ring member, a "
                f"dagster-celery and an Airflow celery worker ({deployment.worker_concurrency} at a time) on each; the ring at "
                f"RF 3 LOCAL_QUORUM over TLS; the peer's MinIO on the bridge; {link}")

    def down(self) -> None:
        import gc

        gc.collect()  # the runs' celery results let go while their broker still answers
        self.environment.close()
        if not self.started and self.links_before is not None:
            from asgard.resources.workers.deployment import EmulatedDeployment

            before = set(self.links_before.values())
            EmulatedDeployment().hosts.shape_links(before.pop() if len(before) == 1 else None)
        if self.started:
            from asgard.resources.workers.deployment import EmulatedDeployment

            self.say("[hosts3] asgard hosts down")
            EmulatedDeployment().down()


class ProfileServersForDay:
    """A network profile's Cassandra node and MinIO for a day: brought up unless they run, and under a
    profile other than loopback stopped after the day when it started them (as the hosts are); a day
    left them running before, and the next profile or suite met their namespaces' addresses taken."""

    KINDS = ("cassandra", "s3")

    def __init__(self, network: str, say: Callable[[str], None], kinds: tuple[str, ...] = KINDS):
        from asgard.resources.network import Deployment

        self.network, self.say, self.kinds = network, say, kinds
        self.deployment = Deployment(network)
        self.started: tuple[str, ...] = ()

    def up(self):
        running = {k for k in self.kinds if (server := self.deployment.server(k)) is not None and server.pid()}
        self.deployment.up(self.kinds)
        self.started = tuple(k for k in self.kinds if k not in running)
        return self.deployment

    def down(self) -> None:
        if self.network != "loopback" and self.started:  # loopback's servers are the user's
            self.say(f"[{self.network}] stopping what the day started: {', '.join(self.started)}")
            self.deployment.down(self.started)


def empty_tables(store) -> None:
    """A bench store's tables emptied, their disk given back now: a purged run's rows stay on disk
    as tombstones until a compaction drops them (the node's auto_snapshot is off: nothing is kept)."""
    for table in (store.qualified_table, store.qualified_index):
        store.session.execute(f"TRUNCATE {table}", timeout=120)
