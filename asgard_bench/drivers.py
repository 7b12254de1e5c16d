"""``asgard bench drivers``: the Cassandra store on cassandra-driver against scylla-driver, in one run.

scylla-driver is a maintained fork of cassandra-driver with the same API under the same package
name (``cassandra``), so the two cannot share one environment. The fork is installed apart
(:func:`install_driver`, called by ``scripts/setup.sh``) under ``$ASGARD_HOME/cache/drivers/``, and
every variant runs the same store code in a worker process of its own, the fork's directory first
on its ``PYTHONPATH`` for the fork. Each round runs one block of every measure in every worker,
the workers' order drawn afresh each round; the parent reads the node's CPU from ``/proc``
around each block. The first variant is listed twice by default (``A/A``): how far two workers on
the same driver land apart is the noise floor of the ratio.

    asgard bench drivers [--rounds 8] [--json]
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path

from asgard.resources.paths import REPO_ROOT, cache_dir

MiB = 1024 * 1024
SMALL_BYTES = 10 * 1024

#: the driver the project depends on (setup.py) and the fork it is measured against; a fork's
#: version is pinned here, installed by scripts/setup.sh (no network when the bench runs)
BASE_DRIVER = "cassandra-driver"
ALTERNATIVE_DRIVERS = {"scylla-driver": "3.29.12"}


class DriverNotInstalledError(RuntimeError):
    """A driver variant whose package is not installed where the bench looks for it."""


def driver_dir(name: str) -> Path | None:
    """Where an alternative driver is installed (its ``cassandra`` package inside); None for the
    environment's own driver."""
    if name == BASE_DRIVER:
        return None
    if name not in ALTERNATIVE_DRIVERS:
        raise ValueError(f"unknown driver {name!r}: choose from {', '.join([BASE_DRIVER, *ALTERNATIVE_DRIVERS])}")
    return cache_dir("drivers") / f"{name}-{ALTERNATIVE_DRIVERS[name]}"


def install_driver(name: str) -> Path:
    """Install the pinned ``name`` (with its compiled extensions: the wheel's) into its own
    directory, once; its dependencies are cassandra-driver's, already in the environment."""
    target = driver_dir(name)
    if target is None:
        raise ValueError(f"{name} is the environment's driver (setup.py), not installed apart")
    if (target / "cassandra" / "__init__.py").exists():
        return target
    partial = target.with_name(target.name + ".partial")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade", "--target", str(partial),
                    f"{name}=={ALTERNATIVE_DRIVERS[name]}"], check=True)
    partial.rename(target)  # complete or absent: a broken download is never taken for an install
    return target


def _worker_env(driver: str, store_kwargs: dict) -> dict:
    env = {**os.environ, "ASGARD_PROBE_STORE": json.dumps(store_kwargs)}
    path = [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    where = driver_dir(driver)
    if where is not None:
        if not (where / "cassandra" / "__init__.py").exists():
            raise DriverNotInstalledError(
                f"{driver} {ALTERNATIVE_DRIVERS[driver]} is not installed in {where}: run scripts/setup.sh, or "
                f"python -c \"from asgard_bench.drivers import install_driver; install_driver('{driver}')\"")
        path.insert(0, str(where))
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


_WORKER = r"""
import json, os, sys, time, uuid
import numpy as np
import cassandra
from asgard.resources.stores import ObjectKey
from asgard_bench.io import open_peer

MiB = 1024 * 1024
out = sys.stdout
sys.stdout = sys.stderr  # only replies on the pipe

def reply(obj):
    out.write(json.dumps(obj) + "\n")
    out.flush()

store = open_peer("cassandra", **json.loads(os.environ["ASGARD_PROBE_STORE"]))
store.ping()
scope = "bench-drivers-" + uuid.uuid4().hex[:8]
data = {}
reply({"version": cassandra.__version__, "module": cassandra.__file__})
for line in sys.stdin:
    cmd = json.loads(line)
    try:
        op = cmd["op"]
        if op == "quit":
            store.purge_scope("run/" + scope)
            reply({})
            break
        if op in ("write", "read"):
            mib = cmd["mib"]
            arr = data.setdefault(mib, np.random.default_rng(mib).integers(0, 255, mib * MiB, dtype=np.uint8))
            keys = [ObjectKey.for_run(scope, "io", f"{mib}mib-{i}") for i in range(cmd["objects"])]
            backs = []
            p0, t0 = time.process_time(), time.perf_counter()
            for key in keys:
                if op == "write":
                    store.put(key, arr)
                else:
                    backs.append(store.get(key)[0])
            t1, p1 = time.perf_counter(), time.process_time()
            for back in backs:
                if not np.array_equal(np.frombuffer(back, dtype=np.uint8), arr):
                    raise AssertionError(f"a {mib} MiB object read back differs from what was written")
            del backs
            reply({"seconds": t1 - t0, "client_cpu_s": p1 - p0})
        elif op == "small":
            payload = np.random.default_rng(0).bytes(10 * 1024)
            keys = [ObjectKey.for_run(scope, "small-" + uuid.uuid4().hex[:6], str(i)) for i in range(cmd["count"])]
            p0, t0 = time.process_time(), time.perf_counter()
            for key in keys:
                store.put(key, payload)
            for key in keys:
                back, _ = store.get(key)
            t1, p1 = time.perf_counter(), time.process_time()
            if bytes(back) != payload:
                raise AssertionError("a 10 KiB object read back differs from what was written")
            reply({"seconds": t1 - t0, "client_cpu_s": p1 - p0})
        else:
            raise ValueError(f"unknown op {op!r}")
    except Exception as exc:
        reply({"error": f"{type(exc).__name__}: {exc}"})
"""


class DriverWorker:
    """A process running the Cassandra store on one driver, doing one block per command."""

    def __init__(self, name: str, driver: str, store_kwargs: dict):
        self.name, self.driver = name, driver
        self._proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, env=_worker_env(driver, store_kwargs))
        hello = self._read()
        self.version, self.module = hello["version"], hello["module"]
        where = driver_dir(driver)
        if where is not None and not self.module.startswith(str(where)):
            self.close()
            raise DriverNotInstalledError(f"{name}: imported cassandra from {self.module}, not from {where}")

    def _read(self) -> dict:
        line = self._proc.stdout.readline()
        if not line:
            code = self._proc.wait()
            raise RuntimeError(f"driver worker {self.name} ({self.driver}) exited with {code} (its stderr is above)")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"driver worker {self.name} ({self.driver}): {answer['error']}")
        return answer

    def call(self, **cmd) -> dict:
        self._proc.stdin.write(json.dumps(cmd) + "\n")
        self._proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self.call(op="quit")
            except (RuntimeError, OSError, ValueError):
                pass
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()


def _first_put_ms(driver: str, store_kwargs: dict, scope: str) -> float:
    """A fresh process's first 10 KiB put on ``driver`` (bench io's probe)."""
    from .io import _FIRST_PUT_PROBE, _run_probe

    env = _worker_env(driver, store_kwargs)
    return _run_probe(_FIRST_PUT_PROBE, store_kwargs, "cassandra", scope, env=env)["first_put_ms"]


def parse_variants(drivers: str, aa: bool) -> list[tuple[str, str]]:
    """``(variant name, driver)`` for a comma-separated driver list; the first twice with ``aa``."""
    names = [d.strip() for d in drivers.split(",") if d.strip()]
    if not names:
        raise ValueError("no driver given: e.g. --drivers cassandra-driver,scylla-driver")
    for name in names:
        driver_dir(name)  # an unknown name is a ValueError here, before any process starts
    if len(set(names)) != len(names):
        raise ValueError(f"{drivers!r}: a driver is listed twice; the A/A variant is added by --aa")
    variants = [(n, n) for n in names]
    if aa:
        variants.insert(1, (f"{names[0]} (A/A)", names[0]))
    return variants


def run_driver_bench(drivers: str = f"{BASE_DRIVER},scylla-driver", sizes_mib: tuple[int, ...] = (1, 64),
                     rounds: int = 8, small_ops: int = 500, block_mib: int = 128, first_puts: bool = True,
                     aa: bool = True, warmup: bool = True, store_kwargs: dict | None = None, progress: bool = True,
                     seed: int = 0) -> dict:
    """Per measure and variant: the median over rounds of the speed (MB/s, ops/s, first put ms),
    of the node's CPU per GB or per op and of the client's, and the geometric mean of the per-round
    speed ratio against the first variant with its 95% interval (first put: its time's inverse).
    A block writes (then reads) ``block_mib`` of objects of one size: one 1 MiB put lasts a few
    milliseconds, too short to time against this machine's noise."""
    from rich.progress import Progress

    from asgard.resources.network import Deployment

    from .io import ServerCpu, _settle

    variants = parse_variants(drivers, aa)
    deployment = Deployment("loopback")
    store_kwargs = store_kwargs if store_kwargs is not None else deployment.store_kwargs("cassandra")
    cpu = ServerCpu.for_backend("cassandra", None, deployment)
    if not cpu.servers:
        raise RuntimeError("no local Cassandra node to measure: start it with `asgard stores up`")
    objects = {size: max(1, -(-block_mib // size)) for size in sizes_mib}
    workers: dict[str, DriverWorker] = {}
    try:
        for name, driver in variants:
            workers[name] = DriverWorker(name, driver, store_kwargs)
        if warmup:  # untimed: each worker's code paths and connections, the node's JIT
            for w in workers.values():
                for size in sizes_mib:
                    w.call(op="write", mib=size, objects=objects[size])
                    w.call(op="read", mib=size, objects=objects[size])
                w.call(op="small", count=max(1, small_ops // 4))
            _settle(cpu)
        samples: dict[tuple[str, int], dict[str, list[dict]]] = {}

        def record(measure, object_bytes, name, speed, server_cpu, client_cpu):
            samples.setdefault((measure, object_bytes), {}).setdefault(name, []).append(
                {"speed": speed, "server_cpu": server_cpu, "client_cpu": client_cpu})

        scope = f"bench-drivers-first-{uuid.uuid4().hex[:8]}"
        steps = rounds * len(variants) * (len(sizes_mib) + 1 + int(first_puts))
        with Progress(disable=not progress, transient=True) as bar:
            task = bar.add_task("bench drivers", total=steps)
            shuffle = random.Random(seed)
            for r in range(rounds):
                # a fresh order each round, not a rotation: the node flushes its memtable every
                # ~170 MiB written, and with a fixed cycle of orders those flushes kept landing
                # after the same variant's writes (its reads then came from sstables: 1.15x
                # slower than its A/A twin's over 16 rotated rounds)
                order = shuffle.sample(variants, len(variants))
                for size in sizes_mib:
                    gb = size * objects[size] / 1024
                    for name, _ in order:
                        bar.update(task, description=f"round {r + 1}: {name} {size} MiB")
                        c0 = cpu.seconds()
                        w = workers[name].call(op="write", mib=size, objects=objects[size])
                        _settle(cpu)  # flushes and compactions the put left: the write's cost
                        c1 = cpu.seconds()
                        rd = workers[name].call(op="read", mib=size, objects=objects[size])
                        c2 = cpu.seconds()
                        mb = size * objects[size]
                        record("write", size * MiB, name, mb / w["seconds"], (c1 - c0) / gb, w["client_cpu_s"] / gb)
                        record("read", size * MiB, name, mb / rd["seconds"], (c2 - c1) / gb, rd["client_cpu_s"] / gb)
                        bar.advance(task)
                for name, _ in order:
                    bar.update(task, description=f"round {r + 1}: {name} 10 KiB ops")
                    c0 = cpu.seconds()
                    s = workers[name].call(op="small", count=small_ops)
                    c1 = cpu.seconds()
                    ops = 2 * small_ops
                    record("small", SMALL_BYTES, name, ops / s["seconds"], (c1 - c0) * 1000 / ops,
                           s["client_cpu_s"] * 1000 / ops)
                    bar.advance(task)
                if first_puts:
                    for name, driver in order:
                        bar.update(task, description=f"round {r + 1}: {name} first put")
                        ms = _first_put_ms(driver, store_kwargs, scope)
                        record("first_put", SMALL_BYTES, name, 1000.0 / ms, None, None)
                        bar.advance(task)
        if first_puts:
            from .io import open_peer

            open_peer("cassandra", **store_kwargs).purge_scope(f"run/{scope}")
    finally:
        for w in workers.values():
            w.close()
    return {"variants": [{"variant": n, "driver": d, "version": workers[n].version} for n, d in variants],
            "rounds": rounds, "block_mib": block_mib, "rows": _summarize(samples, variants)}


def _summarize(samples: dict, variants: list[tuple[str, str]]) -> list[dict]:
    import statistics

    from asgard.tuner.measure import geomean, ratio_interval

    base = variants[0][0]
    rows = []
    for (measure, object_bytes), per_variant in samples.items():
        for name, driver in variants:
            got = per_variant[name]
            speeds = [g["speed"] for g in got]
            ratios = [g["speed"] / b["speed"] for g, b in zip(got, per_variant[base])]

            def med(field):
                vals = [g[field] for g in got if g[field] is not None]
                return round(statistics.median(vals), 3) if vals else None

            row = {"variant": name, "driver": driver, "measure": measure, "object_bytes": object_bytes,
                   "speed_median": round(statistics.median(speeds), 2), "speeds": [round(v, 2) for v in speeds],
                   "server_cpu_median": med("server_cpu"), "client_cpu_median": med("client_cpu")}
            if measure == "first_put":  # kept as a time: the unit a reader expects
                row["first_put_ms_median"] = round(1000.0 / statistics.median(speeds), 2)
            if name != base:
                low, high = ratio_interval(ratios)
                row.update(speed_vs_base=round(geomean(ratios), 3), ci_low=round(low, 3), ci_high=round(high, 3))
            rows.append(row)
    return rows


_UNITS = {"write": ("MB/s", "s/GB"), "read": ("MB/s", "s/GB"), "small": ("ops/s", "ms/op"), "first_put": ("ms", "")}


def print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    variants = result["variants"]
    base = variants[0]["variant"]
    table = Table(title=f"asgard bench drivers: the Cassandra store on each driver, {result['rounds']} interleaved rounds "
                        f"(medians; speed ratio = geometric mean of the per-round ratios against {base}, 95% interval)")
    for col in ("measure", "variant", "driver", "speed", "speed vs " + base, "node CPU", "client CPU"):
        table.add_column(col, justify="right")
    by_measure: dict[tuple, list[dict]] = {}
    for row in result["rows"]:
        by_measure.setdefault((row["measure"], row["object_bytes"]), []).append(row)
    versions = {v["variant"]: v["version"] for v in variants}
    for (measure, size), rows in by_measure.items():
        unit, cpu_unit = _UNITS[measure]
        label = f"{measure} {size // MiB} MiB" if size >= MiB else f"{measure} {size // 1024} KiB"
        for row in rows:
            speed = (f"{row['first_put_ms_median']:.2f} {unit}" if measure == "first_put"
                     else f"{row['speed_median']:,.1f} {unit}")
            ratio = ("-" if "speed_vs_base" not in row else
                     f"{row['speed_vs_base']:.3f}x [{row['ci_low']:.3f}, {row['ci_high']:.3f}]")
            cpu = lambda v: "-" if v is None else f"{v:.3f} {cpu_unit}"
            table.add_row(label, row["variant"], f"{row['driver']} {versions[row['variant']]}", speed, ratio,
                          cpu(row["server_cpu_median"]), cpu(row["client_cpu_median"]))
    Console(width=max(150, Console().width)).print(table)
