"""CPU seconds of the cloud profile's Cassandra node by thread group (compaction, memtable flushes, the
native transport, reads, ...), over two ETL runs at scale 0.5 after one untimed, by psutil's threads.
Usage: .venv/bin/python scripts/jvm_thread_cpu.py ['{"codec": "lz4"}']   (the IO manager's config, optional)
Needs `asgard stores up --network cloud`."""
import collections
import json
import re
import sys
import tempfile
import time

import dagster as dg
import psutil

from asgard.pipelines.jobs import run_app
from asgard.resources.network import Deployment


def thread_cpu_seconds(pid: int) -> collections.Counter:
    """CPU seconds by thread name, its trailing number dropped (CompactionExecutor:3 -> CompactionExecutor)."""
    out: collections.Counter = collections.Counter()
    for t in psutil.Process(pid).threads():
        try:
            with open(f"/proc/{pid}/task/{t.id}/comm") as f:
                name = f.read().strip()
        except OSError:  # a thread that ended meanwhile
            continue
        out[re.sub(r"[-:]?\d+$", "", name)] += t.user_time + t.system_time
    return out


def main() -> None:
    pid = Deployment("cloud").server("cassandra").pid()
    if pid is None:
        sys.exit("no Cassandra node of the cloud profile runs: `asgard stores up --network cloud`")
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else None
    with tempfile.TemporaryDirectory() as tmp, dg.DagsterInstance.local_temp(tempdir=tmp) as instance:
        run_app("etl_columnar", "cassandra", scale=0.5, instance=instance, network="cloud", io_manager_config=config)
        before = thread_cpu_seconds(pid)
        for _ in range(2):
            run_app("etl_columnar", "cassandra", scale=0.5, instance=instance, network="cloud", io_manager_config=config)
        time.sleep(5)  # the flushes and compactions the runs set off
        used = {k: v - before.get(k, 0) for k, v in thread_cpu_seconds(pid).items()}
    print(f"total {sum(used.values()):.1f}")
    for name, seconds in sorted(used.items(), key=lambda x: -x[1])[:18]:
        print(f"{name:<40} {seconds:6.2f}")


if __name__ == "__main__":
    main()
