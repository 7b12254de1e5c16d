"""CPU seconds by process during ETL runs (scale 0.5) under the cloud profile: the profile's Cassandra
node, its MinIO, their Toxiproxies, and the rest of the machine (the total from /proc/stat: the step
processes end within a run, so they are in it only). Each spec is a backend, optionally with the IO
manager's config as JSON; one untimed run, then two measured.
Usage: .venv/bin/python scripts/cpu_by_process.py cassandra s3_stock 'cassandra:{"codec":"lz4","placement":"producer-local"}'
Needs `asgard stores up --network cloud`."""
import json
import sys
import tempfile

import dagster as dg
import psutil

from asgard.pipelines.jobs import run_app
from asgard.resources.network import Deployment


def machine_cpu_seconds() -> float:
    t = psutil.cpu_times()
    return t.user + t.system + t.nice + t.irq + t.softirq


def main() -> None:
    cloud = Deployment("cloud")
    servers = {"cassandra": cloud.server("cassandra"), "minio": cloud.server("s3"),
               "toxiproxy": [cloud.proxy("cassandra"), cloud.proxy("s3")]}

    def cpu() -> dict[str, float]:
        got = {k: sum(s.cpu_seconds() for s in (v if isinstance(v, list) else [v])) for k, v in servers.items()}
        return {**got, "total": machine_cpu_seconds()}

    with tempfile.TemporaryDirectory() as tmp, dg.DagsterInstance.local_temp(tempdir=tmp) as instance:
        for spec in sys.argv[1:]:
            backend, _, config = spec.partition(":")
            config = json.loads(config) if config else None
            run_app("etl_columnar", backend, scale=0.5, instance=instance, network="cloud", io_manager_config=config)
            for _ in range(2):
                before = cpu()
                run = run_app("etl_columnar", backend, scale=0.5, instance=instance, network="cloud",
                              io_manager_config=config)
                used = {k: v - before[k] for k, v in cpu().items()}
                used["rest"] = used["total"] - used["cassandra"] - used["minio"] - used["toxiproxy"]
                print(json.dumps({"spec": spec, "e2e_s": round(run.seconds, 1),
                                  **{k: round(v, 1) for k, v in used.items()}}), flush=True)


if __name__ == "__main__":
    main()
