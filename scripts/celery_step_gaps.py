"""Where a run's wall time goes on dagster-celery across the 3 emulated hosts: for each step, the
seconds from the executor submitting its task to the step starting on a worker (broker, worker
pick-up, job rebuild, resources), the step itself (STEP_START to STEP_SUCCESS), and from its end
to the executor handling its result; summed along the run's critical path (each step's latest
upstream), by backend; and the CPU seconds of the ring's JVMs, the MinIO and the whole machine during
each run.
Runs alternate between the S3 peer and Cassandra (the loop's fields).
Usage: .venv/bin/python scripts/celery_step_gaps.py [--app etl_columnar:scale=0.5] [--runs 3]"""
from __future__ import annotations

import argparse
import collections
import statistics
import tempfile


def process_cpu() -> collections.Counter:
    """CPU seconds so far of the Cassandra JVMs and the MinIO on this machine, and of the whole machine."""
    import psutil
    from cpu_by_process import machine_cpu_seconds  # beside this script

    out: collections.Counter = collections.Counter()
    for proc in psutil.process_iter(["cmdline", "name"]):
        try:
            if "CassandraDaemon" in " ".join(proc.info["cmdline"] or []):
                group = "cassandra JVMs"
            elif proc.info["name"] == "minio":
                group = "minio"
            else:
                continue
            t = proc.cpu_times()
            out[group] += t.user + t.system
        except psutil.Error:
            continue
    out["machine"] = machine_cpu_seconds()
    return out


def timeline(instance, run_id: str) -> dict[str, dict[str, float]]:
    """``{step: {"submit", "start", "end", "handled"}}`` (event timestamps, seconds)."""
    import dagster as dg

    T = dg.DagsterEventType
    at: dict[str, dict[str, float]] = collections.defaultdict(dict)
    for rec in instance.all_logs(run_id):
        ev, step = rec.dagster_event, rec.step_key
        if ev is None or not step:
            continue
        if ev.event_type == T.ENGINE_EVENT and "Submitting celery task" in (rec.user_message or ""):
            at[step].setdefault("submit", rec.timestamp)
        elif ev.event_type == T.STEP_START:
            at[step]["start"] = rec.timestamp
        elif ev.event_type == T.STEP_SUCCESS:
            at[step]["end"] = rec.timestamp
    return at


def critical_path(instance, run_id: str, at: dict[str, dict[str, float]]) -> list[str]:
    """The chain of steps ending last, each step's upstream the one whose end came last."""
    run = instance.get_run_by_id(run_id)
    plan = instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
    upstream = {s.key: {i.upstream_output_handles[0].step_key for i in s.inputs if i.upstream_output_handles}
                for s in plan.steps}
    done = [s for s in at if "end" in at[s]]

    def upstream_of(step: str) -> list[str]:  # a mapped step's keys resolved: its own key, or all (a collect)
        base, bracket, key = step.partition("[")
        found = []
        for u in upstream.get(f"{base}[?]" if bracket else step, ()):
            if u.endswith("[?]"):
                found += [d for d in done if d == f"{u[:-3]}[{key}" or (not bracket and d.startswith(u[:-2]))]
            elif u in done:
                found.append(u)
        return found

    step = max(done, key=lambda s: at[s]["end"])
    chain = [step]
    while True:
        ups = upstream_of(step)
        if not ups:
            return chain[::-1]
        step = max(ups, key=lambda u: at[u]["end"])
        chain.append(step)


def main() -> None:
    import dagster as dg

    from asgard_bench.apps_run import run_one
    from asgard_bench.cost import Prices
    from asgard_bench.day_plan import LOOP_FIELDS, PEER_BACKEND, HostsForDay, parse_mix

    p = argparse.ArgumentParser()
    p.add_argument("--app", default="etl_columnar:scale=0.5")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    (app, sizes), = parse_mix(args.app)
    prices = Prices.load(None)
    hosts = HostsForDay(print)
    hosts.up()
    rows = collections.defaultdict(list)
    cpu = collections.defaultdict(collections.Counter)
    try:
        with tempfile.TemporaryDirectory() as tmp, dg.DagsterInstance.local_temp(tempdir=tmp) as instance:
            arms = [(PEER_BACKEND, None), ("cassandra", dict(LOOP_FIELDS))]
            for backend, client in arms:  # untimed: each worker's first step imports and connects
                run_one(instance, -1, "warmup", app, backend, sizes, prices, 2, None, "hosts3", client)
            for i in range(args.runs):
                for backend, client in (arms if i % 2 == 0 else arms[::-1]):
                    before = process_cpu()
                    row, _, _ = run_one(instance, i, "gaps", app, backend, sizes, prices, 2, None, "hosts3", client)
                    used = process_cpu()
                    used.subtract(before)
                    cpu[backend].update(used)
                    at = timeline(instance, row["run_id"])
                    chain = critical_path(instance, row["run_id"], at)
                    wait = sum(at[s]["start"] - at[s]["submit"] for s in chain)
                    work = sum(at[s]["end"] - at[s]["start"] for s in chain)
                    hand = sum(at[b]["submit"] - at[a]["end"] for a, b in zip(chain, chain[1:]))
                    rows[backend].append((row["e2e_s"], wait, work, hand, len(chain),
                                          row["write_s_total"] + row["read_s_total"]))
                    print(f"{backend:<10} run {row['e2e_s']:5.1f} s  critical path {len(chain)} steps: "
                          f"submit->start {wait:5.2f}  steps {work:5.2f}  end->next submit {hand:5.2f}  "
                          + " ".join(f"{s}:{at[s]['start'] - at[s]['submit']:.2f}/{at[s]['end'] - at[s]['start']:.2f}"
                                     for s in chain))
    finally:
        hosts.down()
    print("\nbackend     run E2E s  submit->start  steps  end->next submit  path steps  store s (all steps)")
    for backend, xs in rows.items():
        med = [statistics.median(x[k] for x in xs) for k in range(6)]
        print(f"{backend:<10} {med[0]:10.2f} {med[1]:14.2f} {med[2]:6.2f} {med[3]:17.2f} {med[4]:11.0f} {med[5]:10.2f}")
    print_cpu(cpu, args.runs)


def print_cpu(cpu, runs: int) -> None:
    print("\nCPU seconds a run")
    print("process                       " + "".join(f"{b:>12}" for b in cpu))
    for g in ("machine", "cassandra JVMs", "minio"):
        print(f"{g:<30}" + "".join(f"{cpu[b][g] / runs:12.2f}" for b in cpu))


if __name__ == "__main__":
    main()
