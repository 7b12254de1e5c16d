"""One run of ``asgard bench apps``: an app on a backend, measured from the run's event log (latency,
billed step seconds, each stored output and loaded input, the server's CPU) and priced; what is
measured and how is set out in :mod:`asgard_bench.apps`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable

from .apps_config import PIPELINE_BACKEND, STOCK_BACKENDS
from .apps_servers import server_for
from .apps_summary import price_row
from .cost import Prices, s3_requests


def _md(metadata: dict, key: str) -> Any:
    v = metadata.get(key)
    return getattr(v, "value", v) if v is not None else None


def _stored_size(uri: str | None, path: str | None, backend: str, endpoint: str | None = None,
                 keys: tuple[str | None, str | None] = (None, None)) -> int | None:
    """Size of a stock manager's stored object (after the run, outside the timed window)."""
    try:
        if backend == "fs_stock" and path:
            return Path(path).stat().st_size
        if backend == "s3_stock" and uri and uri.startswith("s3://"):
            from asgard.resources.stores.s3 import LOCAL_ENDPOINT, resolve_credentials, s3_client

            endpoint = endpoint or LOCAL_ENDPOINT
            bucket, key = uri[5:].split("/", 1)
            access, secret = resolve_credentials(endpoint, *keys)
            client = s3_client(endpoint, "us-east-1", access, secret, None, 10, 10, 60)
            return int(client.head_object(Bucket=bucket, Key=key)["ContentLength"])
    except Exception:
        return None
    return None


def clear_stock_s3_run(run_id: str, endpoint: str | None, keys: tuple[str | None, str | None]) -> int:
    """Delete what dagster-aws's stock manager stored for ``run_id`` (it never deletes: a day of its
    runs left 19 GB in MinIO and filled the disk); the objects deleted."""
    from asgard.resources.stores.s3 import LOCAL_ENDPOINT, resolve_credentials, s3_client
    from asgard_dagster.s3.io_manager import STOCK_BUCKET, STOCK_PREFIX

    endpoint = endpoint or LOCAL_ENDPOINT
    client = s3_client(endpoint, "us-east-1", *resolve_credentials(endpoint, *keys), None, 10, 10, 60)
    deleted = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=STOCK_BUCKET,
                                                                  Prefix=f"{STOCK_PREFIX}/storage/{run_id}/"):
        objects = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if objects:
            client.delete_objects(Bucket=STOCK_BUCKET, Delete={"Objects": objects})
            deleted += len(objects)
    return deleted


def store_share_pct(compute_s: float | None, io_s: float | None) -> float | None:
    """The store's share of the steps' time, in percent: their writes and reads over those plus
    their compute (a step's billed time less its start-up)."""
    if compute_s is None or io_s is None or compute_s + io_s <= 0:
        return None
    return 100.0 * io_s / (compute_s + io_s)


def step_parallelism(spans: list[tuple[float, float]]) -> tuple[float, int]:
    """``(mean, max)`` steps running at once over the steps' ``(start, end)`` spans: mean is the
    steps' summed time over the span from the first start to the last end."""
    spans = [(a, b) for a, b in spans if b is not None and b >= a]
    if not spans:
        return 0.0, 0
    total = sum(b - a for a, b in spans)
    width = max(b for _, b in spans) - min(a for a, _ in spans)
    running = peak = 0
    for _, delta in sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1])):
        running += delta
        peak = max(peak, running)
    return (total / width if width > 0 else float(len(spans))), peak


def measure_run(instance, run_id: str, backend: str, s3_endpoint: str | None = None,
                s3_keys: tuple[str | None, str | None] = (None, None)) -> dict[str, Any]:
    """Latency, steps and edges of one finished run from its event log."""
    import dagster as dg

    T = dg.DagsterEventType
    run_start = run_end = None
    status = "unknown"
    steps: dict[str, dict] = {}
    writes: list[dict] = []
    reads: list[dict] = []
    last_event_ts: dict[str, float] = {}
    last_output_ts: dict[str, float] = {}
    invoked: dict[str, float] = {}
    for rec in instance.all_logs(run_id):
        ev = rec.dagster_event
        if ev is None:
            continue
        et, ts, step = ev.event_type, rec.timestamp, rec.step_key
        if et == T.RUN_START:
            run_start = ts
        elif et in (T.RUN_SUCCESS, T.RUN_FAILURE):
            run_end, status = ts, ("success" if et == T.RUN_SUCCESS else "failure")
        elif et in (T.STEP_WORKER_STARTED, T.RESOURCE_INIT_STARTED) and step:
            # the step's process starts and builds its resources (an IO manager's client) before
            # STEP_START; a function invocation is billed for that too
            invoked[step] = min(invoked.get(step, ts), ts)
        elif et == T.STEP_START:
            steps[step] = {"step": step, "start": ts, "end": None}
        elif et in (T.STEP_SUCCESS, T.STEP_FAILURE) and step in steps:
            steps[step]["end"] = ts
        elif et == T.STEP_OUTPUT:
            last_output_ts[step] = ts
        elif et == T.HANDLED_OUTPUT:
            d = ev.event_specific_data
            md = d.metadata or {}
            secs = _md(md, "write_seconds")
            timing = "metadata"
            if secs is None:
                secs, timing = ts - last_output_ts.get(step, last_event_ts.get(step, ts)), "events"
            uri = _md(md, "dagster/uri") or _md(md, "uri")
            writes.append({"step": step, "output": d.output_name, "bytes": _md(md, "bytes"),
                           "chunks": _md(md, "chunks"), "seconds": float(secs), "timing": timing,
                           "uri": uri, "path": _md(md, "path")})
        elif et == T.LOADED_INPUT:
            d = ev.event_specific_data
            md = d.metadata or {}
            secs = _md(md, "read_seconds")
            timing = "metadata"
            if secs is None:
                secs, timing = ts - last_event_ts.get(step, ts), "events"
            reads.append({"step": step, "input": d.input_name, "upstream_step": d.upstream_step_key,
                          "upstream_output": d.upstream_output_name, "bytes": _md(md, "bytes"),
                          "seconds": float(secs), "timing": timing})
        if step:
            last_event_ts[step] = ts

    if backend in STOCK_BACKENDS:
        for w in writes:
            if w["bytes"] is None or backend in STOCK_BACKENDS:
                w["bytes"] = _stored_size(w["uri"], w["path"], backend, s3_endpoint, s3_keys)
    # each read's chunks and (for stock) bytes: from the output it loads
    by_output: dict[tuple, list[dict]] = {}
    for w in writes:
        by_output.setdefault((w["step"], w["output"]), []).append(w)
    for r in reads:
        cands = by_output.get((r["upstream_step"], r["upstream_output"]), [])
        src = None
        if len(cands) == 1:
            src = cands[0]
        elif cands and "[" in r["step"]:
            mk = r["step"].split("[", 1)[1].rstrip("]")
            src = next((c for c in cands if str(c.get("uri") or c.get("path") or "").rstrip("/").endswith(mk)), None)
        if src is not None:
            r["chunks"] = src.get("chunks")
            if r["bytes"] is None:
                r["bytes"] = src.get("bytes")
        else:
            r["chunks"] = None

    io_by_step: dict[str, float] = {}
    for e in writes + reads:
        io_by_step[e["step"]] = io_by_step.get(e["step"], 0.0) + e["seconds"]
    step_rows = []
    for s in steps.values():
        dur = (s["end"] - s["start"]) if s["end"] else 0.0
        init = max(s["start"] - invoked.get(s["step"], s["start"]), 0.0)
        io = io_by_step.get(s["step"], 0.0)
        # seconds: what a function invocation bills (process start and resource init included)
        step_rows.append({"step": s["step"], "seconds": init + dur, "init_seconds": init, "io_seconds": io,
                          "compute_seconds": max(dur - io, 0.0)})
    e2e = (run_end - run_start) if (run_start and run_end) else float("nan")
    timing = sorted({e["timing"] for e in writes + reads}) or ["none"]
    # how parallel the steps really ran: from the step processes' first event to STEP_SUCCESS
    mean_par, max_par = step_parallelism([(invoked.get(s["step"], s["start"]), s["end"]) for s in steps.values()])
    return {"status": status, "e2e_s": e2e, "steps": step_rows, "writes": writes, "reads": reads,
            "io_timing": "+".join(timing), "parallel_mean": mean_par, "parallel_max": max_par}


def _sum(xs: Iterable[Any]) -> float:
    return float(sum(x for x in xs if x is not None))


def run_one(instance, rep: int, phase: str, app: str, backend: str, sizes: dict, prices: Prices,
            max_concurrent: int = 2, cassandra_overrides: dict | None = None,
            network: str = "loopback", io_manager_config: dict | None = None,
            cassandra_keyspace: dict | None = None) -> tuple[dict, list[dict], list[dict]]:
    """Run ``app`` on ``backend`` once, reached over ``network`` (``io_manager_config``: the IO
    manager's run config); (run row, step rows, edge rows)."""
    from asgard.pipelines.hosts import HOSTS_NETWORK, hosts_store_kwargs
    from asgard.pipelines.jobs import run_app
    from asgard.resources.network import Deployment

    pb = PIPELINE_BACKEND.get(backend, backend)
    server = server_for(backend, network)
    cpu0 = server.cpu_seconds() if server is not None else 0.0
    counts = getattr(server, "request_counts", None)  # S3: the server counts every request
    requests0 = counts() if counts else {}
    t0 = time.perf_counter()
    error = ""
    try:
        ar = run_app(app, pb, instance=instance, max_concurrent=max_concurrent, raise_on_error=False,
                     network=network, io_manager_config=io_manager_config, **sizes)
        run_id, ok = ar.run_id, ar.success
    except Exception as exc:  # a crash outside the run (e.g. the server is down): record it
        run_id, ok, error = "", False, f"{type(exc).__name__}: {exc}"
    wall = time.perf_counter() - t0
    cpu1 = server.cpu_seconds() if server is not None else 0.0
    puts, gets = s3_requests(requests0, counts()) if counts else (0, 0)
    if network == HOSTS_NETWORK:
        s3 = hosts_store_kwargs("s3")
    else:
        s3 = Deployment(network).store_kwargs("s3")
    m = measure_run(instance, run_id, pb, s3.get("endpoint_url"),
                    (s3.get("aws_access_key_id"), s3.get("aws_secret_access_key"))) if run_id else {
        "status": "error", "e2e_s": float("nan"), "steps": [], "writes": [], "reads": [], "io_timing": "none",
        "parallel_mean": None, "parallel_max": None}
    purge_error = ""
    if run_id and ok and pb in ("cassandra", "redis", "s3", "local"):
        try:  # ephemeral data: drop it (outside the timed window)
            from asgard.pipelines.backends import io_manager_for

            io_manager_for(pb, network).purge_run(run_id)
        except Exception as exc:  # recorded, not raised: the run succeeded; its rows stay until their TTL
            purge_error = f"{type(exc).__name__}: {exc}"
    if run_id and pb == "s3_stock":  # the peer's objects, as the purge drops ours (outside the timed window)
        clear_stock_s3_run(run_id, s3.get("endpoint_url"), (s3.get("aws_access_key_id"), s3.get("aws_secret_access_key")))
    writes, reads, steps = m["writes"], m["reads"], m["steps"]
    row = {
        "rep": rep, "app": app, "backend": backend, "phase": phase,
        "fanout": sizes.get("fanout", ""), "scale": sizes.get("scale", ""),
        "run_id": run_id, "success": bool(ok and m["status"] == "success"), "error": error,
        "purge_error": purge_error,
        "e2e_s": m["e2e_s"], "wall_s": wall,
        "invocations": len(steps),
        "step_s_total": _sum(s["seconds"] for s in steps),
        "compute_s_total": _sum(s["compute_seconds"] for s in steps),
        "write_s_total": _sum(w["seconds"] for w in writes),
        "read_s_total": _sum(r["seconds"] for r in reads),
        "store_share_pct": store_share_pct(_sum(s["compute_seconds"] for s in steps),
                                           _sum(w["seconds"] for w in writes) + _sum(r["seconds"] for r in reads)),
        "n_writes": len(writes), "n_reads": len(reads),
        "bytes_written": int(_sum(w["bytes"] for w in writes)),
        "bytes_read": int(_sum(r["bytes"] for r in reads)),
        "io_timing": m["io_timing"],
        "network": network,
        "steps_parallel_mean": m["parallel_mean"], "steps_parallel_max": m["parallel_max"],
        "server_cpu_s": cpu1 - cpu0 if server is not None else 0.0,
        "cassandra_overrides": json.dumps(cassandra_overrides, sort_keys=True) if cassandra_overrides is not None else "",
        "io_manager_config": json.dumps(io_manager_config, sort_keys=True) if io_manager_config else "",
        "cassandra_keyspace": json.dumps(cassandra_keyspace, sort_keys=True) if cassandra_keyspace else "",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - wall)),
    }
    price_row(row, prices, puts, gets)
    base = {"rep": rep, "app": app, "backend": backend, "run_id": run_id}
    step_rows = [{**base, **s} for s in steps]
    edge_rows = ([{**base, "kind": "write", "step": w["step"], "name": w["output"], "upstream": "",
                   "bytes": w["bytes"], "chunks": w["chunks"], "seconds": w["seconds"], "timing": w["timing"]}
                  for w in writes]
                 + [{**base, "kind": "read", "step": r["step"], "name": r["input"],
                     "upstream": f"{r['upstream_step']}.{r['upstream_output']}",
                     "bytes": r["bytes"], "chunks": r.get("chunks"), "seconds": r["seconds"], "timing": r["timing"]}
                    for r in reads])
    return row, step_rows, edge_rows
