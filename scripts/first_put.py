"""The first 10 KiB put of a fresh process, as every step of Dagster's multiprocess executor makes
it (issue 13, item 5): where its time goes, and interleaved A/B of code trees.

    # one traced first put: every request the driver sends (connection, opcode, what), with times
    python scripts/first_put.py trace
    python scripts/first_put.py trace --profile        # and the cProfile of the timed part
    # interleaved A/B in fresh processes: each round runs every tree once (order rotated), and a
    # tree listed twice under two names is the A/A noise floor
    python scripts/first_put.py ab --tree base=/tmp/fp_base --tree base2=/tmp/fp_base \
        --tree new=/work/firstput --tree new2=/work/firstput --peer redis --rounds 15

The probe is asgard bench io's (``_FIRST_PUT_PROBE``): the libraries imported before the timer,
the timer covering opening the store and the first put. A tree is a checkout of the project put
first on ``PYTHONPATH``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid

TRACE = r"""
import json, os, sys, time
import numpy as np
from asgard.resources.stores import ObjectKey
from asgard_bench.io import open_peer
import dagster, asgard_dagster, asgard_dagster.s3, boto3, cassandra.cluster, redis
import asgard.resources.stores.cql, asgard.resources.stores.redis, asgard.resources.stores.s3
from cassandra import connection as conn_mod, protocol

t0 = time.perf_counter()
events = []
names = {v: k for k, v in vars(protocol).items() if k.isupper() and isinstance(v, int) and k.endswith(("STARTUP", "OPTIONS", "QUERY", "PREPARE", "EXECUTE", "BATCH", "REGISTER", "CREDENTIALS"))}
orig_send = conn_mod.Connection.send_msg
def send_msg(self, msg, request_id, cb, *a, **kw):
    what = type(msg).__name__
    q = getattr(msg, "query", None)
    if q is not None:
        what += ": " + " ".join(str(q).split())[:90]
    events.append(((time.perf_counter() - t0) * 1000, "send", "conn%x" % (id(self) & 0xffff), what))
    return orig_send(self, msg, request_id, cb, *a, **kw)
conn_mod.Connection.send_msg = send_msg
orig_init = conn_mod.Connection.__init__
def init(self, *a, **kw):
    events.append(((time.perf_counter() - t0) * 1000, "open", "conn%x" % (id(self) & 0xffff), str(a[0] if a else kw.get("endpoint"))))
    return orig_init(self, *a, **kw)
conn_mod.Connection.__init__ = init
orig_process = conn_mod.Connection.process_msg
def process_msg(self, header, body):
    events.append(((time.perf_counter() - t0) * 1000, "recv", "conn%x" % (id(self) & 0xffff), "opcode 0x%02x stream %d, %d bytes" % (header.opcode, header.stream, len(body))))
    return orig_process(self, header, body)
conn_mod.Connection.process_msg = process_msg
import threading
from cassandra import cluster as cl_mod, pool as pool_mod
def wrap(owner, attr):
    fn = getattr(owner, attr)
    def wrapped(*a, **kw):
        th = threading.current_thread().name[:10]
        events.append(((time.perf_counter() - t0) * 1000, "enter", th, owner.__name__ + "." + attr))
        try:
            return fn(*a, **kw)
        finally:
            events.append(((time.perf_counter() - t0) * 1000, "exit", th, owner.__name__ + "." + attr))
    setattr(owner, attr, wrapped)
for owner, attr in [(cl_mod.Cluster, "connect"), (cl_mod.ControlConnection, "_try_connect"),
                    (cl_mod.ControlConnection, "_refresh_node_list_and_token_map"),
                    (cl_mod.ControlConnection, "_refresh_schema"), (cl_mod.Cluster, "_new_session"),
                    (cl_mod.Session, "add_or_renew_pool"), (pool_mod.HostConnection, "__init__"),
                    (conn_mod.Connection, "_get_socket_addresses"),
                    (conn_mod.Connection, "register_watchers"), (cl_mod.Session, "prepare"),
                    (cl_mod.Cluster, "__init__"), (cl_mod.Cluster, "_get_connection_class") if hasattr(cl_mod.Cluster, "_get_connection_class") else (cl_mod.Cluster, "connect")]:
    if os.environ.get("FIRST_PUT_MARKS"):
        wrap(owner, attr)

backend, kwargs, scope = sys.argv[1], json.loads(os.environ["ASGARD_PROBE_STORE"]), sys.argv[2]
payload = np.random.default_rng(0).bytes(10 * 1024)
profile = os.environ.get("FIRST_PUT_PROFILE")
if profile:
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
t0 = time.perf_counter()
store = open_peer(backend, **kwargs)
store.put(ObjectKey.for_run(scope, "first", "put"), payload)
total = (time.perf_counter() - t0) * 1000
events.append((total, "mark", "-", "first put returned"))
if backend == "cassandra":
    store.session  # the session opened meanwhile (the put may not have waited for it)
    events.append(((time.perf_counter() - t0) * 1000, "mark", "-", "session ready"))
if profile:
    prof.disable()
    import pstats
    pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
for e in events:
    print("%8.2f ms  %-5s %-9s %s" % e, file=sys.stderr)
print(json.dumps({"first_put_ms": total}))
"""


def run(tree: str, script: str, backend: str, store_kwargs: dict, scope: str, env_extra=None) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": tree, "ASGARD_PROBE_STORE": json.dumps(store_kwargs), **(env_extra or {})}
    proc = subprocess.run([sys.executable, "-c", script, backend, scope], capture_output=True, text=True,
                          env=env, cwd=tree)
    if proc.returncode:
        raise RuntimeError(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["trace", "ab"])
    ap.add_argument("--tree", action="append", default=[], help="name=path of a project tree (ab)")
    ap.add_argument("--backend", default="cassandra")
    ap.add_argument("--peer", default="redis", help="a backend measured in the same rounds ('' for none)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for a tree: tree:NAME=VALUE")
    ap.add_argument("--peer-preimport", default="",
                    help="a module the peer's probe imports before its timer too (what its open imports)")
    args = ap.parse_args()

    from asgard_bench.io import _FIRST_PUT_PROBE
    from asgard.resources.network import Deployment

    deployment = Deployment("loopback")
    scope = f"bench-first-{uuid.uuid4().hex[:8]}"
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if args.mode == "trace":
        result, err = run(here, TRACE, args.backend, deployment.store_kwargs(args.backend), scope,
                          {"FIRST_PUT_MARKS": "1", **({"FIRST_PUT_PROFILE": "1"} if args.profile else {})})
        print(err)
        print(result)
        return
    trees = [(n, p) for n, _, p in (t.partition("=") for t in args.tree)]
    envs: dict = {}
    for item in args.env:
        name, _, kv = item.partition(":")
        k, _, v = kv.partition("=")
        envs.setdefault(name, {})[k] = v
    jobs = [(n, p, args.backend) for n, p in trees]
    if args.peer:
        jobs.append((args.peer, here, args.peer))
    times: dict = {n: [] for n, _, _ in jobs}
    # the bench's probe, also reporting the process's CPU time over the same span (all threads)
    probe = _FIRST_PUT_PROBE.replace("t0 = time.perf_counter()\n", "t0 = time.perf_counter(); c0 = time.process_time()\n")
    probe = probe.replace('{"first_put_ms": (time.perf_counter() - t0) * 1000}',
                          '{"first_put_ms": (time.perf_counter() - t0) * 1000, "cpu_ms": (time.process_time() - c0) * 1000}')
    assert "c0" in probe and "cpu_ms" in probe, "the bench's probe changed: update this script"
    cpus: dict = {n: [] for n, _, _ in jobs}
    for r in range(args.rounds):
        order = jobs[r % len(jobs):] + jobs[:r % len(jobs)]
        for name, tree, backend in order:
            script = probe
            if args.peer_preimport and name == args.peer:
                script = probe.replace("payload = ", f"import {args.peer_preimport}\npayload = ", 1)
            result, _ = run(tree, script, backend, deployment.store_kwargs(backend), scope, envs.get(name))
            times[name].append(result["first_put_ms"])
            cpus[name].append(result["cpu_ms"])
    for name, values in times.items():
        q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
        print(f"{name:>10}: median {statistics.median(values):7.2f} ms  quartiles {q[0]:6.2f} / {q[2]:6.2f}  "
              f"min {min(values):6.2f}  CPU median {statistics.median(cpus[name]):6.2f} ms  (n={len(values)})")
    if args.peer:
        peer = times[args.peer]
        for name, _, _ in jobs[:-1]:
            ratios = [a / b for a, b in zip(times[name], peer)]
            print(f"{name:>10} / {args.peer}: median per-round ratio {statistics.median(ratios):.2f}x")
    from asgard_bench.io import open_peer

    for backend in {b for _, _, b in jobs}:
        open_peer(backend, **deployment.store_kwargs(backend)).purge_scope(f"run/{scope}")


if __name__ == "__main__":
    main()
