"""``asgard bench io``: store throughput and memory, every backend in one run.

Throughput: write and read MB/s of 1, 16 and 64 MiB numpy arrays (best of ``repeat``), and
ops/s of 10 KiB objects (write + read). Backends are interleaved size by size so that machine
drift hits all alike. Memory: in a fresh subprocess per measurement, the peak resident memory
(``VmHWM``, reset just before) added while writing, and while reading back, a 256 MiB array, as a multiple
of the object size beyond the object itself.

Server cost: each throughput row carries the storage server's CPU seconds per GB moved,
written and read (``/proc/PID/stat`` of the Cassandra instances, the Redis or the MinIO process;
``local`` has no server), and each 10 KiB ops row its server CPU milliseconds per op. First
request: each ops row carries ``first_put_ms``, the median over fresh processes of opening the
store and making the first 10 KiB put, as every step process
of Dagster's multiprocess (or k8s) executor does; the process has the library imported, as a
step process has its code location. Spread (Cassandra): one run of six 16 MiB outputs in a
fresh table, flushed, then each instance's live bytes and largest partition from ``nodetool
tablestats``; with ``nodes > 1`` the bench runs on a ring of its own (127.0.0.11 onwards).

Peers are our stores (:func:`asgard.resources.stores.registry.open_store`) and ``s3_stock``, dagster-aws's
own ``S3PickleIOManager`` on the same MinIO (:class:`StockS3Peer`), so the table shows our S3 store
against the stock Dagster way in the same run; :func:`open_peer` opens either by name.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
import uuid

import numpy as np

from asgard.resources.process import ThreadCpuClock

from asgard.resources.stores import ObjectKey
from asgard.resources.stores.registry import open_store

MiB = 1024 * 1024
SMALL_BYTES = 10 * 1024


class StockS3Peer:
    """dagster-aws's stock ``S3PickleIOManager`` (as :func:`asgard_dagster.s3.stock_s3_pickle_io_manager`
    configures it: same MinIO, bucket ``asgard``, prefix ``dagster-stock``) behind the few store
    methods the bench calls. Each call drives the real IO manager through Dagster's public
    ``build_output_context`` / ``build_input_context`` as an asset-less op output:
    ``ObjectKey.for_run(run_id, step_key, name)`` is the output ``name`` of step ``step_key`` in run
    ``run_id``, stored by dagster-aws at ``<prefix>/storage/<run_id>/<step_key>/<name>``.

    Writes go through ``handle_output`` with a cheap built output context. Reads call the
    manager's own ``load_from_path`` on the path it wrote, with one input context built up front:
    ``build_input_context`` makes an ephemeral Dagster instance each time (40-100 ms here), which
    a read inside a real run never pays, and which would swamp the S3 time measured.
    """

    def __init__(self, **manager_kwargs):
        import dagster as dg

        from asgard_dagster.s3 import stock_s3_pickle_io_manager

        self._stack = contextlib.ExitStack()
        configured = stock_s3_pickle_io_manager(**manager_kwargs)
        # resolves EnvVar config (MINIO_ROOT_*) and the nested S3Resource, as a run would
        self.manager = self._stack.enter_context(configured.process_config_and_initialize_cm())
        self.bucket, self.prefix = self.manager.s3_bucket, self.manager.s3_prefix
        # dagster-aws makes its client (and checks the bucket) on first use: do it now, untimed,
        # as our stores connect in open/ping; ping and purge share that client
        self.client = self.manager.inner_io_manager().s3
        self._resources = self._stack.enter_context(dg.build_resources({}))
        self._inner = self.manager.inner_io_manager()
        self._input_context = dg.build_input_context()  # load_from_path only logs with it

    @staticmethod
    def _run_id(scope: str) -> str:
        kind, _, run_id = scope.partition("/")
        if kind != "run" or not run_id:
            raise ValueError(f"{scope!r}: the stock peer stores op outputs, scopes run/<run_id>")
        return run_id

    def _output(self, key: ObjectKey) -> tuple[str, str, str]:
        step_key, _, name = key.path.partition("/")
        if not name:
            raise ValueError(f"{key}: the stock peer stores op outputs, paths <step_key>/<name>")
        return self._run_id(key.scope), step_key, name

    def _output_context(self, key: ObjectKey):
        import dagster as dg

        run_id, step_key, name = self._output(key)
        return dg.build_output_context(run_id=run_id, step_key=step_key, name=name, resources=self._resources)

    def object_name(self, key: ObjectKey) -> str:
        """The S3 key dagster-aws writes ``key`` to."""
        run_id, step_key, name = self._output(key)
        return f"{self.prefix}/storage/{run_id}/{step_key}/{name}"

    def put(self, key: ObjectKey, obj) -> None:
        with _quiet_dagster_logs():
            self.manager.handle_output(self._output_context(key), obj)

    def get(self, key: ObjectKey):
        with _quiet_dagster_logs():
            # the path load_input would compute for this output (UPathIOManager._get_path)
            path = self._inner._get_path(self._output_context(key))
            return self._inner.load_from_path(context=self._input_context, path=path), None

    def purge_scope(self, scope: str) -> None:
        run_id = self._run_id(scope)
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/storage/{run_id}/")
        for page in pages:  # at most 1000 keys a page, the DeleteObjects limit
            names = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if names:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": names, "Quiet": True})

    def ping(self) -> None:
        self.client.head_bucket(Bucket=self.bucket)

    def close(self) -> None:
        self._stack.close()


@contextlib.contextmanager
def _quiet_dagster_logs():
    """Built contexts log each read and write at DEBUG to a console logger; keep it off the table."""
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(previous)


def open_peer(name: str, **kwargs):
    """Our store ``name`` (:func:`open_store`, ``kwargs`` to it), or the stock peer for ``s3_stock``
    (``endpoint_url`` only: the MinIO it reaches)."""
    if name == "s3_stock":
        return StockS3Peer(**{k: v for k, v in kwargs.items() if k == "endpoint_url"})
    return open_store(name, **kwargs)


#: HotSpot's JIT compiler threads, as /proc shows their names (15 characters)
JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


class ServerCpu:
    """CPU seconds of the server processes behind a backend, from their threads' run times in
    /proc (to the nanosecond: :class:`~asgard.resources.process.ThreadCpuClock`), for differences."""

    def __init__(self, servers: list):
        self.servers = servers
        self._clocks: dict[int, ThreadCpuClock] = {}
        self._jit_clocks: dict[int, ThreadCpuClock] = {}

    @classmethod
    def for_backend(cls, backend: str, cassandra_nodes: list | None = None, deployment=None) -> "ServerCpu":
        from asgard.resources.network import Deployment

        if backend == "cassandra" and cassandra_nodes:
            return cls(cassandra_nodes)
        server = (deployment or Deployment()).server(backend)
        return cls([server] if server is not None else [])  # local files: no server

    def seconds(self) -> float | None:
        if not self.servers:
            return None
        total = 0.0
        for server in self.servers:
            if not hasattr(server, "pid"):  # a group of processes: their totals
                total += server.cpu_seconds()
                continue
            pid = server.pid()
            if pid is not None:  # a restarted server is a new process: a new clock
                total += self._clocks.setdefault(pid, ThreadCpuClock(pid)).seconds()
        return total

    def jit_seconds(self) -> float | None:
        """CPU seconds of the servers' JIT compiler threads (HotSpot's ``C1``/``C2 CompilerThread``),
        for differences; ``None`` when no server is a local JVM (Redis, MinIO, a ring seen as a
        group): nothing to wait for, or nothing to read."""
        total, found = 0.0, False
        for server in self.servers:
            pid = server.pid() if hasattr(server, "pid") else None
            if pid is None:
                continue
            clock = self._jit_clocks.setdefault(pid, ThreadCpuClock(pid, JIT_THREADS))
            total += clock.seconds()
            found = found or clock.threads > 0
        return total if found else None


#: A server counts as idle once it spends under this share of one core over SETTLE_WINDOW_S.
SETTLE_CPU_SHARE = 0.05
SETTLE_WINDOW_S = 0.5
#: the longest a bench waits for a server to go idle (a compaction of four ~60 MiB sstables took
#: 11 s on node 1 here)
SETTLE_TIMEOUT_S = 30.0


def _settle(cpu: ServerCpu) -> float:
    """Wait until the backend's servers are idle, and return the CPU seconds they spent meanwhile.

    Writes leave work behind: Cassandra flushes a full memtable (every ~170 MiB written here) and
    compacts the sstables that pile up, for seconds after the put returned. Measured right away,
    that work landed in the read that followed (a 64 MiB read at 262-340 MB/s with 3.2-3.8 s of
    server CPU per GB, against 538-570 and 1.9-2.1 when re-run alone) and in the next backend's
    rows. The bench waits it out after each put and charges it to the write, whose cost it is."""
    start = cpu.seconds()
    if start is None:
        return 0.0
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last = start
    while time.monotonic() < deadline:
        time.sleep(SETTLE_WINDOW_S)
        now = cpu.seconds()
        if now - last < SETTLE_CPU_SHARE * SETTLE_WINDOW_S:
            break
        last = now
    return last - start


def _throughput(store, size_mib: int, repeat: int, cpu: ServerCpu) -> dict:
    data = np.random.default_rng(size_mib).integers(0, 255, size_mib * MiB, dtype=np.uint8)
    key = ObjectKey.for_run(f"bench-{uuid.uuid4().hex[:8]}", "io", f"{size_mib}mib")
    best_w = best_r = 0.0
    cpu_w = cpu_r = 0.0
    for _ in range(repeat):
        c0, t0 = cpu.seconds(), time.perf_counter()
        store.put(key, data)
        t1 = time.perf_counter()
        _settle(cpu)  # the flushes and compactions the put left behind (Cassandra): the write's cost
        c1, t1r = cpu.seconds(), time.perf_counter()
        back, _ = store.get(key)
        c2, t2 = cpu.seconds(), time.perf_counter()
        assert back.nbytes == data.nbytes
        best_w = max(best_w, size_mib / (t1 - t0))
        best_r = max(best_r, size_mib / (t2 - t1r))
        if c0 is not None:
            cpu_w += c1 - c0
            cpu_r += c2 - c1
    store.purge_scope(key.scope)
    gb = repeat * size_mib / 1024
    has_cpu = bool(cpu.servers)
    return {"write_mb_s": round(best_w, 1), "read_mb_s": round(best_r, 1),
            "server_cpu_write_s_per_gb": round(cpu_w / gb, 2) if has_cpu else None,
            "server_cpu_read_s_per_gb": round(cpu_r / gb, 2) if has_cpu else None}


_FIRST_PUT_PROBE = r"""
import json, os, sys, time
import numpy as np

from asgard.resources.process import ThreadCpuClock
from asgard.resources.stores import ObjectKey
from asgard_bench.io import open_peer
# what a step process has imported with its code location: the package and every client library
import dagster, asgard_dagster, asgard_dagster.s3, boto3, cassandra.cluster, redis
import asgard.resources.stores.cql, asgard.resources.stores.redis, asgard.resources.stores.s3
backend, kwargs, scope = sys.argv[1], json.loads(os.environ["ASGARD_PROBE_STORE"]), sys.argv[2]
payload = np.random.default_rng(0).bytes(10 * 1024)
t0 = time.perf_counter()
store = open_peer(backend, **kwargs)
store.put(ObjectKey.for_run(scope, "first", "put"), payload)
print(json.dumps({"first_put_ms": (time.perf_counter() - t0) * 1000}))
"""


def _run_probe(script: str, store_kwargs: dict, *args: str, env: dict | None = None) -> dict:
    """Run ``script`` in a fresh interpreter (``env``: its environment, this process's by
    default); its last output line is a JSON object. The store's keywords go by environment, not
    argv: they may hold a password, and argv is visible to all."""
    env = {**(os.environ if env is None else env), "ASGARD_PROBE_STORE": json.dumps(store_kwargs)}
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True,
                         env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def _first_put_ms(backend: str, kwargs: dict, scope: str) -> float:
    return _run_probe(_FIRST_PUT_PROBE, kwargs, backend, scope)["first_put_ms"]


def _small_ops(store, count: int, budget_s: float | None = None,
               cpu: ServerCpu | None = None) -> float | tuple[float, float | None]:
    """Put+get ops/s of ``count`` 10 KiB objects (all puts, then all gets); with ``budget_s``, fewer
    objects when 10 probe pairs say ``count`` would take longer (a store 50 ms away). With ``cpu``,
    ``(ops/s, server CPU ms per op)``."""
    payload = np.random.default_rng(0).bytes(SMALL_BYTES)
    scope = f"bench-{uuid.uuid4().hex[:8]}"
    if budget_s:
        probe = ObjectKey.for_run(scope, "probe", "0")
        t0 = time.perf_counter()
        for _ in range(10):
            store.put(probe, payload)
            store.get(probe)
        per_pair = (time.perf_counter() - t0) / 10
        count = max(10, min(count, int(budget_s / per_pair)))
    keys = [ObjectKey.for_run(scope, "small", str(i)) for i in range(count)]
    c0 = cpu.seconds() if cpu is not None else None
    t0 = time.perf_counter()
    for key in keys:
        store.put(key, payload)
    for key in keys:
        store.get(key)
    seconds = time.perf_counter() - t0
    c1 = cpu.seconds() if cpu is not None else None
    store.purge_scope(f"run/{scope}")
    if cpu is None:
        return 2 * count / seconds
    return 2 * count / seconds, (round((c1 - c0) * 1000 / (2 * count), 3) if c0 is not None else None)


_MEMORY_PROBE = r"""
import gc, json, os, sys, numpy as np
from asgard.resources.stores import ObjectKey
from asgard_bench.io import open_peer

def rss(field):  # this process's own counters (ru_maxrss would include the parent's pages)
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM (peak RSS) to the current RSS

backend, mode, size_mib, scope = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
store = open_peer(backend, **json.loads(os.environ["ASGARD_PROBE_STORE"]))
key = ObjectKey.for_run(scope, "memory", "array")
store.put(ObjectKey.for_run(scope, "memory", "warmup"), b"x" * 1024)  # connect, prepare
store.get(ObjectKey.for_run(scope, "memory", "warmup"))
size = size_mib * 1024 * 1024
if mode == "write":
    arr = np.ones(size // 8, dtype=np.float64)  # touched: resident before the baseline
    gc.collect(); reset_peak(); base = rss("VmRSS")
    store.put(key, arr)
    extra = rss("VmHWM") - base
else:
    gc.collect(); reset_peak(); base = rss("VmRSS")
    arr, _ = store.get(key)
    extra = rss("VmHWM") - base - arr.nbytes
print(json.dumps({"extra_bytes": extra, "object_bytes": size}))
"""


def _memory(backend: str, size_mib: int, kwargs: dict) -> tuple[float, float]:
    scope = f"bench-mem-{uuid.uuid4().hex[:8]}"
    ratios = []
    for mode in ("write", "read"):
        result = _run_probe(_MEMORY_PROBE, kwargs, backend, mode, str(size_mib), scope)
        ratios.append(max(0, result["extra_bytes"]) / result["object_bytes"])
    open_peer(backend, **kwargs).purge_scope(f"run/{scope}")
    return ratios[0], ratios[1]


def _tablestats(node, table: str) -> dict:
    """Live bytes and the largest partition of ``table`` on one instance (after a flush)."""
    from asgard.resources.cassandra.nodetool import table_stats

    keyspace, name = table.split(".")
    node.nodetool("flush", keyspace, name)
    return table_stats(node.nodetool("tablestats", table))


def spread(nodes: list, store_kwargs: dict, outputs: int = 6, size_mib: int = 16) -> dict:
    """One run of ``outputs`` x ``size_mib`` outputs in a fresh table: each instance's share of the
    bytes and the largest partition (nodetool tablestats; the partition size is Cassandra's
    histogram bucket, rounded up to it). The table is dropped afterwards."""
    from asgard.resources.stores.cql import CassandraObjectStore

    table = f"spread_{uuid.uuid4().hex[:8]}"
    keyspace = f"asgard_bench_rf{store_kwargs.get('replication_factor', 1)}"
    store = CassandraObjectStore(keyspace=keyspace, table=table, **store_kwargs)
    run = f"bench-spread-{uuid.uuid4().hex[:8]}"
    try:
        for i in range(outputs):
            data = np.random.default_rng(i).integers(0, 255, size_mib * MiB, dtype=np.uint8)
            store.put(ObjectKey.for_run(run, f"map_{i}", "result"), data)
        per_node = {node.address: _tablestats(node, store.qualified_table) for node in nodes}
    finally:
        for t in (store.qualified_table, store.qualified_index):
            store.session.execute(f"DROP TABLE IF EXISTS {t}")
    shares = [v["live_bytes"] for v in per_node.values()]
    host_bytes: dict[str, int] = {}
    for node in nodes:  # members of a ring across hosts: their host is their network namespace
        if getattr(node, "netns", None):
            host_bytes[node.netns] = host_bytes.get(node.netns, 0) + per_node[node.address]["live_bytes"]
    return {
        "instance_bytes": {a: v["live_bytes"] for a, v in per_node.items()},
        "host_bytes": host_bytes or None,
        "max_min_host_bytes_ratio": (round(max(host_bytes.values()) / min(host_bytes.values()), 3)
                                     if host_bytes and min(host_bytes.values()) else None),
        "max_min_bytes_ratio": round(max(shares) / min(shares), 3) if min(shares) else None,
        "largest_partition_bytes": max(v["largest_partition_bytes"] for v in per_node.values()),
        "chunk_group_bytes": store.chunks_per_partition * store.chunk_size,
        "outputs": outputs, "output_bytes": size_mib * MiB,
    }


#: Untimed warm-up of ``asgard bench io`` before it measures. One pass was not enough for a node
#: restarted a minute earlier: three runs of the same 10 KiB and 1 MiB rows in a row, right after
#: a restart of node 1, gave Cassandra 714, 823 and 895 ops/s, and a full run right after the
#: restart 3.4-3.7 s of server CPU per GB written and read against 1.9-2.1 in a run on a node up
#: for an hour (C2 compiling the hot paths, on the node's own CPU time). MinIO (Go) and Redis (C)
#: have no JIT; the bias was against Cassandra alone.
WARMUP_SECONDS = 60.0
#: Nor is 60 s enough for a node started minutes before, and that was the first run's dip: the
#: node's own threads, read by name in /proc, gave HotSpot's C1/C2 compiler threads 49% of its CPU
#: over a whole run right after a start. With this warm-up, right after a restart, they took
#: 47-65% of the node's CPU over each of the first 13 passes and 20-44% over the next 9, while the
#: server CPU per 10 KiB op fell from 1.40 to 0.07-0.09 ms (docs/results/bench-io-jit-warmup.txt).
#: A pass over every backend gives the JVM seconds of work a minute, so after WARMUP_SECONDS the
#: warm-up goes on with Cassandra alone, until its compiler threads took at most JIT_QUIET_SHARE
#: of its CPU over a pass (or JIT_WAIT_S more seconds have passed); the shares and CPU per op of
#: every pass are printed. 5% is an assumption: the pass the compile queue drained in (1-3% in
#: the runs recorded), next to the 20-65% of the passes before it.
JIT_QUIET_SHARE = 0.05
JIT_WAIT_S = 300.0


def _warm_pass(store, sizes_mib: list[int], small_ops: int, small_seconds: float, cpu: ServerCpu) -> dict:
    """One untimed pass of a store: each size once, then a quarter of the 10 KiB ops.
    ``{"cpu_ms_per_op": server CPU per 10 KiB op, "jit_share": the compiler threads' share of the
    servers' CPU over the whole pass (None: not a local JVM)}``."""
    c0, j0 = cpu.seconds(), cpu.jit_seconds()
    for size in sizes_mib:
        _throughput(store, size, 1, ServerCpu([]))
    _settle(cpu)  # the pass's flushes: not the 10 KiB ops' cost
    _, cpu_ms = _small_ops(store, max(1, small_ops // 4), small_seconds / 4, cpu)
    c1, j1 = cpu.seconds(), cpu.jit_seconds()
    share = None
    if j0 is not None and j1 is not None and c1 - c0 > 0:
        share = round((j1 - j0) / (c1 - c0), 3)
    return {"cpu_ms_per_op": cpu_ms, "jit_share": share}


def run_io_bench(backends: list[str], sizes_mib: list[int], small_ops: int = 2000, repeat: int = 3,
                 memory_mib: int = 256, progress: bool = True, first_puts: int = 3, nodes: int = 1,
                 replication_factor: int = 1, spread_outputs: int = 6, warmup: bool = True,
                 network: str = "loopback", small_seconds: float = 30.0,
                 warmup_seconds: float = WARMUP_SECONDS, hosts: int = 0, host_ring=None,
                 jit_wait_seconds: float = JIT_WAIT_S) -> list[dict]:
    """Rows ``{backend, object_bytes, write_mb_s, read_mb_s, ops_s, network, ...}``: throughput with
    server CPU per GB, 10 KiB ops/s with the first put of a fresh process, memory, and (Cassandra)
    the spread of one run over the instances. ``nodes > 1`` runs Cassandra on a ring of its own.
    ``network``: a profile of :mod:`asgard.resources.network`; its servers are started (and left running)
    in their namespaces behind the profile's links. ``small_seconds`` bounds each backend's 10 KiB
    measurement (fewer objects on a slow link). ``warmup`` runs untimed passes over every backend
    first, repeated until ``warmup_seconds`` have passed (at least one), then Cassandra alone until
    its JIT compiler is quiet (``jit_wait_seconds`` at most: :data:`JIT_QUIET_SHARE`). ``hosts``: Cassandra on a
    ring of the project's own across that many emulated hosts (network namespaces on a bridge, TLS
    internode and client, one login: :func:`asgard.resources.cassandra.hosts.emulated_host_ring`),
    made for the bench and torn down after; ``host_ring``: such a ring already running. The bench
    runs in this (the root) namespace and reaches the members by the hosts' addresses, and the
    spread row gives each host's bytes."""
    from contextlib import ExitStack

    from rich.progress import Progress

    from asgard.resources.network import Deployment

    deployment = Deployment(network, cassandra_heap="1G" if network != "loopback" else None)
    if (hosts or host_ring) and (nodes > 1 or deployment.emulated):
        raise ValueError("--hosts runs the ring across emulated hosts on its own: not with --nodes or a network profile")
    if deployment.emulated:
        if nodes > 1:
            raise ValueError("--nodes > 1 runs on loopback only: a profile puts one instance per store behind its link")
        deployment.up(tuple(b for b in backends if b != "local"))
    with ExitStack() as stack:
        cassandra_nodes = None
        kwargs = {b: deployment.store_kwargs(b) for b in backends}
        if "cassandra" in backends:
            from asgard.resources.cassandra import CassandraCluster

            if hosts and host_ring is None:
                from asgard.resources.cassandra.hosts import emulated_host_ring

                _, host_ring = stack.enter_context(emulated_host_ring(hosts, replication_factor=replication_factor))
            if host_ring is not None:
                cassandra_nodes = host_ring.members
                kwargs["cassandra"] = {**host_ring.client_options(), "replication_factor": replication_factor,
                                       "keyspace": f"asgard_hosts_rf{replication_factor}"}
            elif nodes > 1:
                ring = CassandraCluster(nodes=nodes, first_index=11, heap="1G")
                ring.start()
                stack.callback(ring.stop)
                cassandra_nodes = ring.nodes
                kwargs["cassandra"] = {"contact_points": ring.contact_points,
                                       "replication_factor": replication_factor, "keyspace": "asgard_ring"}
            else:
                # the profile's node; on loopback a secure local node (`asgard cassandra up --secure`)
                # comes with its CA and superuser in store_kwargs
                cassandra_nodes = [deployment.server("cassandra")]
        stores = {b: open_peer(b, **kwargs[b]) for b in backends}
        for store in stores.values():
            store.ping()
        cpus = {b: ServerCpu.for_backend(b, cassandra_nodes, deployment) for b in backends}
        rows: list[dict] = []
        warm: list[dict] = []  # Cassandra's warm-up passes: server CPU per 10 KiB op, the JIT's share
        if warmup:
            # untimed: every client's first connections and code paths, then a JVM's JIT (Cassandra
            # after a restart) are warm before any backend is measured
            t_warm = time.monotonic()
            while True:
                for backend, store in stores.items():
                    passed = _warm_pass(store, sizes_mib, small_ops, small_seconds, cpus[backend])
                    if backend == "cassandra" and cpus[backend].servers:
                        warm.append(passed)
                if time.monotonic() - t_warm >= warmup_seconds:
                    break
            # then Cassandra alone, until its compiler threads are a small share of its work: a pass
            # over every backend gives a JVM only seconds of work a minute
            while (warm and warm[-1]["jit_share"] is not None and warm[-1]["jit_share"] > JIT_QUIET_SHARE
                   and time.monotonic() - t_warm < warmup_seconds + jit_wait_seconds):
                warm.append(_warm_pass(stores["cassandra"], sizes_mib, small_ops, small_seconds, cpus["cassandra"]))
            for backend in stores:
                _settle(cpus[backend])
        steps = len(backends) * (len(sizes_mib) + 1 + (1 if memory_mib else 0)) + (1 if cassandra_nodes else 0)
        with Progress(disable=not progress, transient=True) as bar:
            task = bar.add_task("bench io", total=steps)
            for size in sizes_mib:
                for backend, store in stores.items():  # interleaved: drift hits every backend alike
                    bar.update(task, description=f"{backend} {size} MiB")
                    rows.append({"backend": backend, "object_bytes": size * MiB, "ops_s": None,
                                 **_throughput(store, size, repeat, cpus[backend])})
                    bar.advance(task)
            first: dict[str, list[float]] = {b: [] for b in backends}
            scope = f"bench-first-{uuid.uuid4().hex[:8]}"
            for _ in range(first_puts):  # fresh processes, interleaved across backends
                for backend in backends:
                    first[backend].append(_first_put_ms(backend, kwargs[backend], scope))
            small: dict[str, list[tuple[float, float | None]]] = {b: [] for b in backends}
            for _ in range(repeat):  # interleaved, as the sizes: drift hits every backend alike
                for backend, store in stores.items():
                    bar.update(task, description=f"{backend} 10 KiB ops")
                    _settle(cpus[backend])  # what the last backend's purge left is not this one's cost
                    small[backend].append(_small_ops(store, small_ops, small_seconds, cpus[backend]))
            for backend, store in stores.items():
                times = sorted(first[backend])
                ops, cpu_ms = max(small[backend], key=lambda run: run[0])  # best, as the sizes' rows
                rows.append({"backend": backend, "object_bytes": SMALL_BYTES, "write_mb_s": None, "read_mb_s": None,
                             "ops_s": round(ops, 1), "server_cpu_ms_per_op": cpu_ms,
                             "ops_s_runs": [round(run[0], 1) for run in small[backend]],
                             "first_put_ms": round(times[len(times) // 2], 1) if times else None})
                if first_puts:
                    store.purge_scope(f"run/{scope}")
                bar.advance(task)
            if memory_mib:
                for backend in backends:
                    bar.update(task, description=f"{backend} memory {memory_mib} MiB")
                    w, r = _memory(backend, memory_mib, kwargs[backend])
                    rows.append({"backend": backend, "object_bytes": memory_mib * MiB, "write_mb_s": None,
                                 "read_mb_s": None, "ops_s": None,
                                 "write_extra_memory_x": round(w, 3), "read_extra_memory_x": round(r, 3)})
                    bar.advance(task)
            if cassandra_nodes and spread_outputs:
                bar.update(task, description=f"cassandra spread over {len(cassandra_nodes)} instance(s)")
                store_kwargs = {k: v for k, v in kwargs["cassandra"].items() if k != "keyspace"}
                result = spread(cassandra_nodes, store_kwargs, outputs=spread_outputs)
                rows.append({"backend": "cassandra", "object_bytes": result["output_bytes"], "write_mb_s": None,
                             "read_mb_s": None, "ops_s": None, "spread": result})
                bar.advance(task)
        for row in rows:
            row["network"] = network if host_ring is None else f"{len(host_ring.hosts)} emulated hosts"
            if row["backend"] == "cassandra" and row.get("ops_s") is not None:
                # how often the client's fast paths (early, direct, fast read) stepped aside in this
                # process over the whole run (step processes count their own)
                from asgard.resources.stores.cql import fallbacks, senders

                row["fallbacks"] = fallbacks.counts()
                row["senders"] = senders.taken()  # which sender of the chain took the small puts and head reads
                row["warmup_cpu_ms_per_op"] = [p["cpu_ms_per_op"] for p in warm]
                row["warmup_jit_share"] = [p["jit_share"] for p in warm]
        return rows


# the tables live beside the bench (asgard_bench.io_report); imported here, where callers found them
from .io_report import print_side_by_side, print_table  # noqa: E402,F401 -- re-exported
