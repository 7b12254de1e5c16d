"""Interleaved A/B of the codec per output (``codec="auto"``) against none, on a data-heavy job
through the local Cassandra node: E2E of one in-process run, rounds alternating the two.

    python scripts/ab_codec_auto.py --rounds 6 --rows 4000000

The job: a generated table (ids, a low-cardinality category, prices in cents, timestamps), read by
three steps (a broadcast), each writing a filtered copy read by a final join step.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from dagster import In, job, op

from asgard_dagster import CassandraIOManager, CassandraResource


@op(config_schema={"rows": int})
def table(context) -> dict:
    rows = context.op_config["rows"]
    rng = np.random.default_rng(11)
    return {"id": np.arange(rows, dtype=np.int64), "category": rng.integers(0, 12, rows).astype(np.int64),
            "cents": rng.integers(100, 10_000, rows).astype(np.int64),
            "ts": 1_790_000_000 + np.cumsum(rng.integers(0, 3, rows)).astype(np.int64)}


def _filtered(t: dict, category: int) -> dict:
    keep = t["category"] == category
    return {k: v[keep] for k, v in t.items()}


@op
def low(t: dict) -> dict:
    return _filtered(t, 1)


@op
def mid(t: dict) -> dict:
    return _filtered(t, 5)


@op
def high(t: dict) -> dict:
    return _filtered(t, 9)


@op(ins={"a": In(), "b": In(), "c": In()})
def join(a: dict, b: dict, c: dict) -> int:
    return int(a["cents"].sum() + b["cents"].sum() + c["cents"].sum())


def make_job(codec: str):
    @job(name=f"etl_{codec}", resource_defs={"io_manager": CassandraIOManager(
        cassandra=CassandraResource(keyspace="asgard_ab"), codec=codec)})
    def etl():
        t = table()
        join(low(t), mid(t), high(t))

    return etl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--rows", type=int, default=4_000_000)
    args = ap.parse_args()
    jobs = {"none": make_job("none"), "auto": make_job("auto")}
    config = {"ops": {"table": {"config": {"rows": args.rows}}}}
    jobs["auto"].execute_in_process(run_config=config)  # warm-up: sessions, schema, the throughput record
    times: dict[str, list[float]] = {"none": [], "auto": []}
    codecs = {}
    for r in range(args.rounds):
        for name in (("none", "auto") if r % 2 == 0 else ("auto", "none")):
            t0 = time.perf_counter()
            result = jobs[name].execute_in_process(run_config=config)
            times[name].append(time.perf_counter() - t0)
            codecs[name] = sorted({e.event_specific_data.metadata["codec"].value for e in result.all_events
                                   if e.event_type_value == "HANDLED_OUTPUT" and e.step_key != "join"})
            CassandraIOManager(cassandra=CassandraResource(keyspace="asgard_ab")).purge_run(result.run_id)
    ratios = [n / a for n, a in zip(times["none"], times["auto"])]
    print(f"rows {args.rows}, {args.rounds} rounds, interleaved (order alternating)")
    for name in ("none", "auto"):
        print(f"{name:>5}: E2E median {statistics.median(times[name]):.3f} s  runs {[round(t, 3) for t in times[name]]}  "
              f"codecs {codecs[name]}")
    print(f"none/auto per round: {[round(x, 3) for x in ratios]}  median {statistics.median(ratios):.3f}x  "
          f"(A/A spread, none: {min(times['none']) / max(times['none']):.3f}..1)")


if __name__ == "__main__":
    main()
