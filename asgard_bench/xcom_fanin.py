"""A fan-in over N mapped outputs through the asgard XCom backend, read concurrently (the
backend's read-ahead, ``[asgard] object_concurrency`` = 8) against one at a time (= 1).

One ``airflow dags test`` run: ``make.expand(i=range(N))`` pushes N values of ``size`` random
bytes (each stored in Cassandra); ``fan_in`` takes them all, as a fan-in task does (Airflow's
lazy sequence, one row at a time), and reads them ``repeat`` times per mode, the modes interleaved
and their order alternated per repeat, after one untimed read of each. Each repeat's ratio
(sequential / concurrent) is printed: their spread is the run's noise floor. Beside the time of
the whole fan-in (Airflow's own round trip per row included), the backend's part: the time
inside ``deserialize_value``. ``--rtt-ms`` puts the node behind a private Toxiproxy with that
round trip (half each way), as a worker a network hop away from Cassandra sees it.

    python -m asgard_bench.xcom_fanin                    # 16 x 1 MiB, 7 repeats, on loopback
    python -m asgard_bench.xcom_fanin --rtt-ms 2 --json
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

DAG_ID = "asgard_bench_xcom_fanin"
KEYSPACE = "asgard_bench_xcom"
MODES = {"concurrent": 8, "sequential": 1}
# Airflow's safe mode parses only files that say "airflow" and "dag"
DAG_FILE = f"""# an airflow DAG: asgard xcom fan-in bench
from asgard_bench.xcom_fanin import make_fanin_dag
dag = make_fanin_dag({DAG_ID!r})
"""


def measure_in_task(parts, spec: dict) -> dict:
    """Read every value of ``parts`` (Airflow's lazy sequence) per mode and repeat, in one task."""
    from asgard_airflow import xcom

    cls, inside = xcom.CassandraXComBackend, [0.0]
    real = cls.deserialize_value

    def timed(result):
        t0 = time.perf_counter()
        try:
            return real(result)
        finally:
            inside[0] += time.perf_counter() - t0

    cls.deserialize_value = staticmethod(timed)
    samples = []
    for rep in range(-1, spec["repeat"]):
        order = list(MODES) if rep % 2 == 0 else list(reversed(MODES))
        for mode in order:
            os.environ["AIRFLOW__ASGARD__OBJECT_CONCURRENCY"] = str(MODES[mode])
            xcom.read_settings.cache_clear()
            inside[0] = 0.0
            t0 = time.perf_counter()
            values = list(parts)
            seconds = time.perf_counter() - t0
            if len(values) != spec["n"] or any(len(v) != spec["size"] for v in values):
                raise RuntimeError(f"{mode}: read {len(values)} values of sizes {sorted({len(v) for v in values})}")
            if rep >= 0:
                samples.append({"mode": mode, "repeat": rep, "seconds": seconds, "backend_s": inside[0]})
    return {"samples": samples}


def make_fanin_dag(dag_id: str = DAG_ID):
    from airflow.sdk import dag, get_current_context, task

    spec = json.loads(Path(os.environ["ASGARD_XCOM_FANIN"]).read_text())

    @task
    def make(i: int) -> bytes:
        return os.urandom(spec["size"])

    @task
    def fan_in(parts) -> None:
        result = measure_in_task(parts, spec)
        result["run_id"] = get_current_context()["run_id"]
        Path(spec["out"]).write_text(json.dumps(result))

    @dag(dag_id=dag_id, schedule=None, catchup=False, tags=["asgard", "bench"])
    def bench():
        fan_in(make.expand(i=list(range(spec["n"]))))

    return bench()


def summarize(samples: list[dict]) -> dict:
    out = {}
    for field, name in (("seconds", "fan_in"), ("backend_s", "backend")):
        by = {mode: {s["repeat"]: s[field] for s in samples if s["mode"] == mode} for mode in MODES}
        ratios = [round(by["sequential"][r] / by["concurrent"][r], 2) for r in sorted(by["concurrent"])]
        out[name] = {"concurrent_ms": round(statistics.median(by["concurrent"].values()) * 1000, 1),
                     "sequential_ms": round(statistics.median(by["sequential"].values()) * 1000, 1),
                     "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                     "ratio_max": max(ratios), "ratios": ratios}
    return out


@contextlib.contextmanager
def _link(rtt_ms: int):
    """A private Toxiproxy in front of the local node with ``rtt_ms`` round trip: ``(port)``."""
    if not rtt_ms:
        yield 9042
        return
    from asgard.resources.network.toxiproxy import install_toxiproxy

    api, port = _free_port(), _free_port()
    proc = subprocess.Popen([str(install_toxiproxy()), "-host", "127.0.0.1", "-port", str(api)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        call = lambda path, body: urllib.request.urlopen(urllib.request.Request(  # noqa: E731
            f"http://127.0.0.1:{api}{path}", data=json.dumps(body).encode(), method="POST"), timeout=10).read()
        for _ in range(100):
            try:
                call("/proxies", {"name": "cassandra", "listen": f"127.0.0.1:{port}", "upstream": "127.0.0.1:9042"})
                break
            except OSError:
                time.sleep(0.1)
        for stream in ("upstream", "downstream"):
            call("/proxies/cassandra/toxics", {"type": "latency", "stream": stream,
                                               "attributes": {"latency": rtt_ms // 2 if stream == "upstream"
                                                              else rtt_ms - rtt_ms // 2}})
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_fanin_bench(n: int = 16, size: int = 1 << 20, repeat: int = 7, rtt_ms: int = 0) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="asgard-bench-fanin-"))
    home = tmp / "airflow"
    (home / "dags").mkdir(parents=True)
    (home / "dags" / "asgard_bench_xcom_fanin.py").write_text(DAG_FILE)
    spec = {"n": n, "size": size, "repeat": repeat, "out": str(tmp / "result.json")}
    (tmp / "spec.json").write_text(json.dumps(spec))
    root = str(Path(__file__).resolve().parent.parent)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")},
        "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__XCOM_BACKEND": "asgard_airflow.CassandraXComBackend",
        "AIRFLOW__ASGARD__KEYSPACE": KEYSPACE, "AIRFLOW__ASGARD__TTL_SECONDS": "3600",
        "ASGARD_XCOM_FANIN": str(tmp / "spec.json"),
        "PYTHONPATH": os.pathsep.join([root] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    with _link(rtt_ms) as port:
        env["AIRFLOW__ASGARD__PORT"] = str(port)
        for args in (["db", "migrate"], ["dags", "test", DAG_ID]):
            out = subprocess.run([airflow, *args], env=env, capture_output=True, text=True, timeout=1200)
            if out.returncode != 0:
                raise RuntimeError(f"airflow {' '.join(args)} failed:\n{(out.stdout + out.stderr)[-4000:]}")
    result = json.loads(Path(spec["out"]).read_text())
    from asgard.resources.stores.registry import open_store

    store = open_store("cassandra", keyspace=KEYSPACE)  # the run's values and its marker, as `asgard airflow purge` does
    store.purge_scope(f"airflow/{DAG_ID}/{result['run_id']}")
    from asgard_airflow.xcom import run_marker_key

    store.delete(run_marker_key(DAG_ID, result["run_id"]))
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return {"n": n, "size": size, "repeat": repeat, "rtt_ms": rtt_ms, **summarize(result["samples"]),
            "samples": result["samples"]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--rtt-ms", type=int, default=0, help="the node behind a Toxiproxy link of this round trip")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run_fanin_bench(args.n, args.size, args.repeat, args.rtt_ms)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    link = f"{report['rtt_ms']} ms round trip (Toxiproxy)" if report["rtt_ms"] else "loopback"
    print(f"fan-in of {report['n']} x {report['size']:,} bytes, Cassandra on {link}, medians of "
          f"{report['repeat']} interleaved repeats, concurrent (read-ahead 8) vs sequential:")
    for name, what in (("fan_in", "the fan-in through Airflow's lazy sequence"), ("backend", "the backend's part")):
        r = report[name]
        print(f"  {what}: {r['concurrent_ms']} ms vs {r['sequential_ms']} ms, {r['ratio_median']:.2f}x "
              f"(each repeat: {', '.join(f'{x:.2f}x' for x in r['ratios'])})")


if __name__ == "__main__":
    main()
