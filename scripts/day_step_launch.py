"""Where an ETL step's wall time goes on a bench day: the mean seconds from STEP_WORKER_STARTING to
STEP_START (the step's process starting: fork, imports, resources) and from STEP_START to
STEP_SUCCESS (the step: inputs, compute, outputs), by variant, read from the day's progress log
(Dagster's event lines, to the second) and its day.json (which run is which variant).
Usage: .venv/bin/python scripts/day_step_launch.py OUT_DIR LOG [SETTING]"""
import collections
import datetime
import json
import statistics
import sys


def main() -> None:
    out, log = sys.argv[1], sys.argv[2]
    setting = sys.argv[3] if len(sys.argv) > 3 else "cloud"
    days = json.load(open(f"{out}/day.json"))["settings"][setting]["days"]
    variant_of = {r["run_id"]: d["variant"] for d in days for r in d["runs"] if r["app"] == "etl_columnar"}
    seen: dict[tuple[str, str], dict[str, datetime.datetime]] = collections.defaultdict(dict)
    for line in open(log, errors="replace"):
        parts = line.split(" - ")
        if len(parts) < 8 or parts[4] not in variant_of:
            continue
        try:
            t = datetime.datetime.strptime(parts[0][:19], "%Y-%m-%d %H:%M:%S")
        except ValueError:
            continue
        seen[(parts[4], parts[6].strip())].setdefault(parts[7].split(" ")[0].strip(), t)
    spans = collections.defaultdict(lambda: collections.defaultdict(list))
    for (run_id, _), at in seen.items():
        for name, start, end in (("launch", "STEP_WORKER_STARTING", "STEP_START"), ("step", "STEP_START", "STEP_SUCCESS")):
            if start in at and end in at:
                spans[variant_of[run_id]][name].append((at[end] - at[start]).total_seconds())
    print("variant      launch s (mean)  step s (mean)  steps")
    for variant, s in spans.items():
        print(f"{variant:<12} {statistics.mean(s['launch']):>15.2f} {statistics.mean(s['step']):>14.2f}  {len(s['step'])}")


if __name__ == "__main__":
    main()
