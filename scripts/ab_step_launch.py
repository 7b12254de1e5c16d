"""A/B of the forkserver's preload of what a step's process imports (pipelines/forkserver_preload.py):
the ETL (fanout 3, scale 0.1) on loopback with the multiprocess executor, each arm in a process of its
own (the forkserver is one per process and keeps its first preload), arms interleaved, repeats.
Per step, from the run's event log: launch (STEP_WORKER_STARTING to STEP_START: the fork, the
instance opened from its ref, the job rebuilt, the resources) and step (STEP_START to STEP_SUCCESS).
Usage: .venv/bin/python scripts/ab_step_launch.py [--repeats 3] [--runs 2] [--backends cassandra,s3_stock] [--json]
Needs `asgard stores up` (Cassandra and MinIO on loopback)."""
import argparse
import json
import statistics
import subprocess
import sys

PRELOAD_MODULE = "asgard.pipelines.forkserver_preload"

ARM = """
import json, statistics, sys, tempfile
import dagster as dg
import asgard.pipelines.jobs as jobs
arm, backend, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
if arm == "without":
    jobs.PRELOAD.remove("%s")
if __name__ == "__main__":
    out = []
    with tempfile.TemporaryDirectory() as tmp, dg.DagsterInstance.local_temp(tempdir=tmp) as instance:
        for i in range(runs + 1):  # the first starts the forkserver: untimed
            run = jobs.run_app("etl_columnar", backend, fanout=3, scale=0.1, instance=instance)
            assert run.success
            if i == 0:
                continue
            at = {}
            for e in instance.all_logs(run.run_id):
                if e.dagster_event and e.step_key:
                    at.setdefault(e.step_key, {}).setdefault(e.dagster_event.event_type_value, e.timestamp)
            launch = [a["STEP_START"] - a["STEP_WORKER_STARTING"] for a in at.values()]
            step = [a["STEP_SUCCESS"] - a["STEP_START"] for a in at.values()]
            out.append({"e2e_s": run.seconds, "launch_s": statistics.mean(launch), "step_s": statistics.mean(step)})
    print(json.dumps(out))
""" % PRELOAD_MODULE


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--runs", type=int, default=2, help="measured runs per arm and repeat, after one untimed")
    p.add_argument("--backends", default="cassandra,s3_stock")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    rows: dict[tuple[str, str], list[dict]] = {}
    for r in range(a.repeats):
        for backend in a.backends.split(","):
            arms = ("without", "with") if r % 2 == 0 else ("with", "without")
            for arm in arms:
                out = subprocess.run([sys.executable, "-c", ARM, arm, backend, str(a.runs)],
                                     capture_output=True, text=True, timeout=1200)
                if out.returncode != 0:
                    sys.exit(out.stderr[-3000:])
                got = json.loads(out.stdout.strip().splitlines()[-1])
                rows.setdefault((backend, arm), []).extend(got)
                print(f"repeat {r + 1}/{a.repeats} {backend:<10} {arm:<8} E2E "
                      + ", ".join(f"{g['e2e_s']:.2f}" for g in got), file=sys.stderr)
    summary = {}
    for (backend, arm), got in rows.items():
        e2e = [g["e2e_s"] for g in got]
        summary.setdefault(backend, {})[arm] = {
            "e2e_s": statistics.median(e2e), "e2e_min_s": min(e2e), "e2e_max_s": max(e2e),
            "launch_s": statistics.mean(g["launch_s"] for g in got), "step_s": statistics.mean(g["step_s"] for g in got),
            "runs": len(got)}
    for backend, arms in summary.items():
        w = arms["with"]
        # the noise: the preloaded arm's E2E spread over its runs, relative to its median
        arms["noise_pct"] = round(100 * (w["e2e_max_s"] - w["e2e_min_s"]) / w["e2e_s"], 1)
        arms["e2e_ratio_without_over_with"] = round(arms["without"]["e2e_s"] / w["e2e_s"], 3)
    if a.json:
        print(json.dumps(summary, indent=1))
        return
    print("backend    arm       E2E s (median) [min, max]   launch s  step s  runs")
    for backend, arms in summary.items():
        for arm in ("without", "with"):
            v = arms[arm]
            print(f"{backend:<10} {arm:<8} {v['e2e_s']:>14.2f} [{v['e2e_min_s']:.2f}, {v['e2e_max_s']:.2f}]"
                  f" {v['launch_s']:>9.2f} {v['step_s']:>7.2f} {v['runs']:>5}")
        print(f"{backend:<10} E2E without/with {arms['e2e_ratio_without_over_with']}x, noise {arms['noise_pct']}%")


if __name__ == "__main__":
    main()
