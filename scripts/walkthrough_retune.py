"""The retune loop once through ``dagster dev``, for the record (issue 10): what a user sees.

    PYTHONPATH=. .venv/bin/python scripts/walkthrough_retune.py [--runs 3] [--force-knobs '{"concurrent_reads": 64}']

1. ``dagster dev -w workspace.yaml`` with a DAGSTER_HOME of its own whose run queue takes one run
   at a time, so submitted runs wait as QUEUED;
2. the upcoming-runs sensor is started (``dagster sensor start``), N runs of the video job are
   submitted (GraphQL, as the Launchpad does);
3. the sensor's tick sees the queued runs and launches the retune job, which jumps the queue
   (its ``dagster/priority`` tag); its plan, recommendation and decision are printed from the
   run's own events;
4. a retune launched by hand with ``knobs`` and ``force`` (an operator's choice) applies a change,
   probes the workload before and after and records the realized against the predicted gain.

It talks to the local Cassandra the workspace uses (``asgard stores up``): step 4 reconfigures it.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP_JOB = "video_analytics__cassandra"
RETUNE_JOB = "asgard_retune_cassandra"
SENSOR = "asgard_upcoming_runs_sensor"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(predicate, timeout: float, what: str, poll: float = 2.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(poll)


def step_metadata(instance, run_id: str) -> dict[str, dict]:
    """``{step: {key: value}}`` of the outputs' metadata in a run."""
    from dagster import DagsterEventType

    out: dict[str, dict] = {}
    for record in instance.get_records_for_run(run_id, of_type=DagsterEventType.STEP_OUTPUT).records:
        event = record.event_log_entry.dagster_event
        meta = event.event_specific_data.metadata or {}
        out[event.step_key] = {k: getattr(v, "value", v) for k, v in meta.items()}
    return out


def show(instance, run, label: str) -> dict:
    meta = step_metadata(instance, run.run_id)
    plan, rec, dec = meta.get("plan_workload", {}), meta.get("recommend_configuration", {}), meta.get("reconfigure", {})
    print(f"\n## {label}: run {run.run_id[:8]} {run.status.value}, tags "
          f"{ {k: v for k, v in run.tags.items() if k.startswith(('asgard/', 'dagster/priority', 'dagster/sensor'))} }")
    print(f"plan: job {plan.get('job')}, pattern {plan.get('pattern')}, fan-out {plan.get('fanout')}, "
          f"object {plan.get('object_kib')} KiB, look-ahead {plan.get('lookahead_seconds')} s "
          f"({(plan.get('forecast') or {}).get('source')})")
    print(f"recommendation: predicted gain over the stock default {rec.get('predicted_gain_vs_default_pct')} %")
    keys = ("reconfigure", "reason", "benefit", "cost", "restart_seconds", "restart_source", "live_change_seconds",
            "live_slowdown", "live_source", "measured_live_change", "applied",
            "restart_order", "member_restart_seconds", "predicted_gain_pct", "realized_gain_pct", "noise_pct",
            "rolled_back")
    for k in keys:
        if k in dec:
            print(f"  {k}: {json.dumps(dec[k], default=str) if isinstance(dec[k], (dict, list)) else dec[k]}")
    return dec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="Runs of the video job to queue.")
    ap.add_argument("--force-knobs", default='{"concurrent_reads": 64}',
                    help="Knobs the hand-launched retune applies with force (JSON); '' skips step 4.")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()

    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
    from dagster_graphql import DagsterGraphQLClient

    from asgard.pipelines.jobs import SMALL, run_config

    home = Path(tempfile.mkdtemp(prefix="asgard-walkthrough-"))
    # one run at a time: the submitted runs wait in the queue, where the sensor looks for them
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\nrun_queue:\n  max_concurrent_runs: 1\n")
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    dagster = str(Path(sys.executable).with_name("dagster"))
    log = open(home / "dagster-dev.log", "w")
    proc = subprocess.Popen([dagster, "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    t0 = time.monotonic()
    try:
        def up():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as r:
                    return r.status == 200
            except OSError:
                return False
        wait(up, 240, "dagster dev")
        print(f"# dagster dev on :{port}, DAGSTER_HOME {home} (up in {time.monotonic() - t0:.0f} s)")
        subprocess.run([dagster, "sensor", "start", SENSOR, "-w", "workspace.yaml"], cwd=ROOT, env=env,
                       check=True, capture_output=True, text=True)
        print(f"sensor {SENSOR} started")
        os.environ["DAGSTER_HOME"] = str(home)
        instance = DagsterInstance.get()
        client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        config = run_config("video_analytics", **SMALL["video_analytics"])
        submitted = [client.submit_job_execution(APP_JOB, run_config=config) for _ in range(args.runs)]
        print(f"submitted {len(submitted)} runs of {APP_JOB}: {[r[:8] for r in submitted]}")

        def retune_runs():
            return instance.get_runs(RunsFilter(job_name=RETUNE_JOB))

        def sensor_retune_done():
            runs = [r for r in retune_runs() if r.tags.get("dagster/sensor_name") == SENSOR]
            return next((r for r in runs if r.status in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE)), None)

        run = wait(sensor_retune_done, args.timeout, "the sensor's retune run")
        started = {r.run_id: r for r in instance.get_runs(RunsFilter(job_name=APP_JOB))}
        print(f"the sensor launched retune run {run.run_id[:8]} ({time.monotonic() - t0:.0f} s in); "
              f"video runs by then: {sorted(r.status.value for r in started.values())}")
        show(instance, run, "retune launched by the sensor")
        if args.force_knobs:
            knobs = json.loads(args.force_knobs)
            hand = client.submit_job_execution(RETUNE_JOB, run_config={"ops": {"plan_workload": {"config": {
                "upcoming_jobs": [APP_JOB], "knobs": knobs, "force": True, "quiet_wait_seconds": 600}}}})
            done = wait(lambda: (r := instance.get_run_by_id(hand)) and r.status in (
                DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE) and r, args.timeout, "the hand-launched retune")
            show(instance, done, f"retune launched by hand with knobs {knobs} and force")
        apps = instance.get_runs(RunsFilter(job_name=APP_JOB))
        wait(lambda: all(r.status in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE)
                         for r in instance.get_runs(RunsFilter(job_name=APP_JOB))), args.timeout, "the video runs")
        apps = instance.get_runs(RunsFilter(job_name=APP_JOB))
        print(f"\nvideo runs: {sorted(r.status.value for r in apps)}; whole walkthrough {time.monotonic() - t0:.0f} s")
        return 0 if all(r.status == DagsterRunStatus.SUCCESS for r in apps) else 1
    finally:
        import signal

        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


if __name__ == "__main__":
    sys.exit(main())
