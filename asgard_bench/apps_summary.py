"""Pricing and summaries of ``asgard bench apps``: a run's cost and Perf/$ (:func:`price_row`), the
per-cell medians and ratios (:func:`summarize`), the paper's claims beside them, and the report
files (markdown, CSVs, JSON, plots).
"""
from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

from .apps_config import BENCH_BACKENDS, PIPELINE_BACKEND
from .cost import Prices, perf_per_dollar, run_cost

#: the peers every Perf/$ is compared against in the table
PEERS = ("s3", "redis")

#: the paper's claims (Asgard, Front. HPC'23, §4.1-4.3), each set beside the same ratio measured here:
#: (app, claim, metric, mine, peer, paper's ratio). ``perf``: Perf/$ of mine over peer's;
#: ``speed``: peer's E2E over mine (>1: mine is faster); ``what_if``: Perf/$ of Cassandra priced
#: on instance ``mine`` over instance ``peer``.
PAPER_CLAIMS = (
    ("video_analytics", "Cassandra (default) over S3, Perf/$: +189%", "perf", "cassandra", "s3", 2.89),
    ("video_analytics", "Cassandra (default) over Redis, Perf/$: +326%", "perf", "cassandra", "redis", 4.26),
    ("video_analytics", "Asgard Lite (tuned) over default Cassandra, Perf/$: +47%", "perf", "cassandra_tuned", "cassandra", 1.47),
    ("video_analytics", "tuned Cassandra faster than S3, E2E: 150%", "speed", "cassandra_tuned", "s3", 2.50),
    ("video_analytics", "tuned Cassandra faster than Redis, E2E: 106%", "speed", "cassandra_tuned", "redis", 2.06),
    ("video_analytics", "Redis faster than S3, E2E: 21%", "speed", "redis", "s3", 1.21),
    ("video_analytics", "what-if: c5.large over i3.large, Perf/$: +29%", "what_if", "c5.large", "i3.large", 1.29),
    ("video_analytics", "what-if: c5.large over m5.large, Perf/$: +75%", "what_if", "c5.large", "m5.large", 1.75),
    ("lightgbm_forest", "Redis over tuned Cassandra, Perf/$: +16% (Redis best)", "perf", "redis", "cassandra_tuned", 1.16),
    ("lightgbm_forest", "Cassandra (default) over S3, Perf/$: about +32%", "perf", "cassandra", "s3", 1.32),
    ("lightgbm_forest", "tuned Cassandra over S3, Perf/$: about +32%", "perf", "cassandra_tuned", "s3", 1.32),
    ("lightgbm_forest", "what-if: m5.large over i3.large, Perf/$: +8.9%", "what_if", "m5.large", "i3.large", 1.089),
    ("lightgbm_forest", "what-if: m5.large over c5.large, Perf/$: +8.1%", "what_if", "m5.large", "c5.large", 1.081),
)
#: backends that cannot pass data between two Lambda functions (a function's disk is its own);
#: they are measured as a floor, not as a deployable peer
NOT_DEPLOYABLE = frozenset({"local", "fs_stock"})


def paper_comparison(cells: list[dict]) -> list[dict]:
    """Each of :data:`PAPER_CLAIMS` with the ratio measured in this bench (None where a backend
    was not run)."""
    by = {(c["app"], c["backend"]): c for c in cells}
    rows = []
    for app, claim, metric, mine, peer, paper in PAPER_CLAIMS:
        ours = None
        if metric == "what_if":
            c = by.get((app, "cassandra"))
            w = c.get("what_if", {}) if c else {}
            a, b = (w.get(mine) or {}).get("median"), (w.get(peer) or {}).get("median")
            ours = a / b if a and b else None
        else:
            m, p = by.get((app, mine)), by.get((app, peer))
            if m and p:
                key = "perf_per_usd" if metric == "perf" else "e2e_s"
                a, b = m[key]["median"], p[key]["median"]
                if a and b:
                    ours = a / b if metric == "perf" else b / a
        rows.append({"app": app, "claim": claim, "metric": metric, "paper": paper, "ours": ours})
    return rows


def price_row(row: dict, prices: Prices, puts: int = 0, gets: int = 0) -> dict:
    """Add cost, Perf/$ and the instance what-if columns to a run row (``puts``/``gets``: the S3
    requests the run made, priced for backends whose storage is priced by request)."""
    b = row["backend"]
    kind, _ = prices.storage_kind(b)
    if kind != "s3_requests":
        puts = gets = 0
    c = run_cost(b, row["e2e_s"], row["step_s_total"], row["invocations"], puts, gets, prices)
    row.update(s3_puts=puts, s3_gets=gets, function_gb_s=c.function_gb_s, function_usd=c.function_usd,
               storage_usd=c.storage_usd, storage_basis=c.storage_basis, cost_usd=c.total,
               perf_per_usd=perf_per_dollar(row["e2e_s"], c.total))
    if PIPELINE_BACKEND.get(b, b) == "cassandra":
        for inst in prices.what_if_instances:
            wc = run_cost(b, row["e2e_s"], row["step_s_total"], row["invocations"], 0, 0, prices, instance=inst)
            row[f"cost_usd@{inst}"] = wc.total
            row[f"perf_per_usd@{inst}"] = perf_per_dollar(row["e2e_s"], wc.total)
    return row


def _stats(xs: list[float]) -> dict:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not xs:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def summarize(rows: list[dict], prices: Prices, meta: dict | None = None) -> dict:
    cells: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        cells.setdefault((r["app"], r["backend"]), []).append(r)
    out_cells = []
    for (app, backend), rs in cells.items():
        ok = [r for r in rs if r["success"]]
        cell = {"app": app, "backend": backend, "runs": len(rs), "ok": len(ok)}
        for key in ("e2e_s", "wall_s", "cost_usd", "function_usd", "storage_usd", "perf_per_usd",
                    "compute_s_total", "write_s_total", "read_s_total", "store_share_pct", "step_s_total", "server_cpu_s",
                    "bytes_written", "bytes_read", "s3_puts", "s3_gets", "steps_parallel_mean", "steps_parallel_max"):
            cell[key] = _stats([r.get(key) for r in ok])
        if PIPELINE_BACKEND.get(backend, backend) == "cassandra":
            cell["what_if"] = {inst: _stats([r.get(f"perf_per_usd@{inst}") for r in ok])
                               for inst in prices.what_if_instances}
        cell["io_timing"] = sorted({r["io_timing"] for r in rs})
        out_cells.append(cell)
    by = {(c["app"], c["backend"]): c for c in out_cells}
    for c in out_cells:
        c["ratios"] = {}
        for peer in PEERS + ("cassandra",):
            p = by.get((c["app"], peer))
            mine, theirs = c["perf_per_usd"]["median"], p["perf_per_usd"]["median"] if p else None
            if mine and theirs:
                c["ratios"][f"perf_vs_{peer}"] = mine / theirs
            me2e, pe2e = c["e2e_s"]["median"], p["e2e_s"]["median"] if p else None
            if me2e and pe2e:
                c["ratios"][f"e2e_vs_{peer}"] = me2e / pe2e
        if "what_if" in c:
            base = c["what_if"].get("i3.large", {}).get("median")
            c["what_if_vs_i3"] = {k: (v["median"] / base if base and v["median"] else None)
                                  for k, v in c["what_if"].items()}
    return {"meta": meta or {}, "cells": out_cells, "paper": paper_comparison(out_cells), "failed_runs": [
        {k: r[k] for k in ("rep", "app", "backend", "run_id", "error")} for r in rows if not r["success"]]}


def _pct(ratio: float | None) -> str:
    return "" if ratio is None else f"{ratio:.2f}x ({(ratio - 1) * 100:+.0f}%)"


def _f(x: float | None, nd: int = 2, scale: float = 1.0) -> str:
    return "" if x is None else f"{x * scale:.{nd}f}"


def markdown(summary: dict) -> str:
    meta = summary["meta"]
    lines = ["# asgard bench apps", ""]
    if meta:
        lines += [f"Started {meta.get('started_at')}, {meta.get('seconds')} s; repetitions {meta.get('repetitions')}; "
                  f"sizes {json.dumps(meta.get('sizes'))}; function memory {meta.get('function_memory_mb')} MB; "
                  f"prices {meta.get('prices')} (AWS us-east-1, Nov 2022).", ""]
        lines += [f"Steps of a run in parallel: at most {meta.get('max_concurrent', 2)} (the multiprocess executor's "
                  "max_concurrent; the paper runs a stage's k = 6 functions at once: `--max-concurrent 6` starts a "
                  "stage's readers as that many processes even on 2 cores). The table's \"steps at once\" is measured "
                  "from the run's events: summed step time over the steps' span (mean), and the peak.", ""]
        net = meta.get("network") or {"profile": "loopback", "links": {}}
        lines += [f"Network profile **{net['profile']}**" + (f": {net.get('description', '')}" if net.get("links") else
                  ": every store on this machine's loopback.")]
        lines += [f"- {b}: {d}" for b, d in net.get("links", {}).items()] + [""]
        if meta.get("cassandra_tuned"):
            lines += [f"cassandra_tuned: `{meta.get('cassandra_config')}` = {json.dumps(meta['cassandra_tuned'])}", ""]
    lines += ["Medians over successful runs, [min, max] in brackets. Perf/$ = 1 / (E2E s x cost $). "
              "Cost = Lambda GB-s + requests + storage service (Cassandra on i3.large, Redis on cache.r5.large, "
              "both x E2E time; S3 by PUT/GET requests; local files: no service, the function's disk).", ""]
    lines += ["| app | backend | ok/runs | E2E s | cost µ$ | Perf/$ (1/s$) | vs S3 | vs Redis | compute s | write s | read s | store % | MB written | MB read | server CPU s | steps at once mean/max | IO timing |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in sorted(summary["cells"], key=lambda c: (c["app"], BENCH_BACKENDS.index(c["backend"]))):
        e, p = c["e2e_s"], c["perf_per_usd"]
        r = c["ratios"]
        lines.append(
            f"| {c['app']} | {c['backend']}{' *' if c['backend'] in NOT_DEPLOYABLE else ''} | {c['ok']}/{c['runs']} | {_f(e['median'])} [{_f(e['min'])}, {_f(e['max'])}] | "
            f"{_f(c['cost_usd']['median'], 1, 1e6)} | {_f(p['median'], 0)} [{_f(p['min'], 0)}, {_f(p['max'], 0)}] | "
            f"{_pct(r.get('perf_vs_s3'))} | {_pct(r.get('perf_vs_redis'))} | {_f(c['compute_s_total']['median'])} | "
            f"{_f(c['write_s_total']['median'], 3)} | {_f(c['read_s_total']['median'], 3)} | "
            f"{_f((c.get('store_share_pct') or {}).get('median'), 0)} | {_f(c['bytes_written']['median'], 2, 1 / 2**20)} | {_f(c['bytes_read']['median'], 2, 1 / 2**20)} | "
            f"{_f(c['server_cpu_s']['median'])} | {_f((c.get('steps_parallel_mean') or {}).get('median'), 1)}/"
            f"{_f((c.get('steps_parallel_max') or {}).get('median'), 0)} | {'/'.join(c['io_timing'])} |")
    if any(c["backend"] in NOT_DEPLOYABLE for c in summary["cells"]):
        lines += ["", "\\* local files: a floor, not a peer. A Lambda function's disk cannot pass data to "
                      "another function, and its storage is priced at $0 here."]
    wi = [c for c in summary["cells"] if "what_if" in c]
    if wi:
        insts = list(wi[0]["what_if"])
        lines += ["", "## Instance what-if (paper Figs 6-7): the same Cassandra runs priced on each instance", "",
                  "| app | backend | " + " | ".join(f"Perf/$ {i}" for i in insts) + " | "
                  + " | ".join(f"{i} vs i3.large" for i in insts if i != "i3.large") + " |",
                  "|---|---|" + "---|" * (2 * len(insts) - (1 if "i3.large" in insts else 0))]
        for c in wi:
            lines.append(f"| {c['app']} | {c['backend']} | "
                         + " | ".join(_f(c["what_if"][i]["median"], 0) for i in insts) + " | "
                         + " | ".join(_pct(c["what_if_vs_i3"][i]) for i in insts if i != "i3.large") + " |")
        lines += ["", "Only the price changes: the latency is the one measured on this machine (the paper "
                      "measured each instance type)."]
    lines += ["", "## Beside the paper (Asgard, Front. HPC'23, §4.1-4.3)", "",
              "| app | the paper's claim | paper | ours |", "|---|---|---|---|"]
    for r in summary["paper"]:
        lines.append(f"| {r['app']} | {r['claim']} | {r['paper']:.2f}x | {_f(r['ours'])}{'x' if r['ours'] else 'not run'} |")
    lines += ["", "perf: Perf/$ of the first over the second; speed: E2E of the second over the first; what-if: "
                  "Perf/$ of the same runs priced on each instance."]
    if summary["failed_runs"]:
        lines += ["", "## Failed runs", ""] + [f"- {json.dumps(f)}" for f in summary["failed_runs"]]
    return "\n".join(lines) + "\n"


def side_by_side(summaries: dict[str, dict]) -> str:
    """Markdown: the paper's claims and each cell's E2E and Perf/$ under every network profile."""
    nets = list(summaries)
    first = summaries[nets[0]]
    lines = [f"# asgard bench apps: {' beside '.join(nets)}", "",
             "The same bench under each network profile, run one after the other on this machine "
             "(not interleaved between profiles; within a profile, backends rotate per repetition as always). "
             "Each profile's full report is in its own folder.", ""]
    for net in nets:
        info = summaries[net]["meta"].get("network") or {}
        links = "; ".join(f"{b}: {d}" for b, d in (info.get("links") or {}).items()) or "loopback, no added delay"
        lines.append(f"- **{net}**: {links}")
    lines += ["", "## Beside the paper (Asgard, Front. HPC'23, §4.1-4.3)", "",
              "| app | the paper's claim | paper | " + " | ".join(nets) + " |",
              "|---|---|---|" + "---|" * len(nets)]
    for i, r in enumerate(first["paper"]):
        ours = [summaries[n]["paper"][i]["ours"] for n in nets]
        lines.append(f"| {r['app']} | {r['claim']} | {r['paper']:.2f}x | "
                     + " | ".join(f"{_f(o)}x" if o else "not run" for o in ours) + " |")
    lines += ["", "## Every cell: E2E s and Perf/$ (medians)", "",
              "| app | backend | " + " | ".join(f"E2E s {n}" for n in nets) + " | "
              + " | ".join(f"Perf/$ {n}" for n in nets) + " | " + " | ".join(f"steps at once {n}" for n in nets) + " |",
              "|---|---|" + "---|" * (3 * len(nets))]
    cells = {n: {(c["app"], c["backend"]): c for c in summaries[n]["cells"]} for n in nets}
    for key in sorted(cells[nets[0]], key=lambda k: (k[0], BENCH_BACKENDS.index(k[1]))):
        got = [cells[n].get(key) for n in nets]
        lines.append(f"| {key[0]} | {key[1]} | "
                     + " | ".join(_f(c["e2e_s"]["median"]) if c else "" for c in got) + " | "
                     + " | ".join(_f(c["perf_per_usd"]["median"], 0) if c else "" for c in got) + " | "
                     + " | ".join(_f((c.get("steps_parallel_mean") or {}).get("median"), 1) if c else "" for c in got)
                     + " |")
    return "\n".join(lines) + "\n"


def _write_csv(path: Path, rows: list[dict]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def write_outputs(out: Path, rows: list[dict], steps: list[dict], edges: list[dict], summary: dict) -> dict:
    from .plots import plot_all

    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "runs.csv", rows)
    _write_csv(out / "steps.csv", steps)
    _write_csv(out / "edges.csv", edges)
    (out / "summary.md").write_text(markdown(summary))
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    pngs = plot_all(summary, out)
    summary["files"] = {"runs_csv": str(out / "runs.csv"), "steps_csv": str(out / "steps.csv"),
                        "edges_csv": str(out / "edges.csv"), "markdown": str(out / "summary.md"),
                        "json": str(out / "summary.json"), "png": [str(p) for p in pngs]}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary["files"]
