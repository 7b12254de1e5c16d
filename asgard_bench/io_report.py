"""The tables of ``asgard bench io``: one per network profile (or ring), and the profiles side by side."""
from __future__ import annotations

MiB = 1024 * 1024


def print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    def fmt(v, suffix="", digits=1):
        return "-" if v is None else f"{v:,.{digits}f}{suffix}"

    by_size: dict[int, dict[str, dict]] = {}
    for row in rows:
        if "spread" not in row:
            by_size.setdefault(row["object_bytes"], {})[row["backend"]] = row
    backends = {row["backend"] for row in rows}
    peer = "s3" if "s3" in backends else "local"
    network = rows[0].get("network", "loopback") if rows else "loopback"
    table = Table(title=f"asgard bench io, network {network} (best of repeats; ratios against {peer} in the same run)")
    for col in ("backend", "object", "write MB/s", "read MB/s", "ops/s (10 KiB)", f"write vs {peer}",
                f"read vs {peer}", f"ops vs {peer}", "server CPU s/GB w / r (ms/op)", "first put ms",
                "extra mem write", "extra mem read"):
        table.add_column(col, justify="right")

    def ratio(row, other, field):
        if not other or row.get(field) is None or not other.get(field):
            return "-"
        return f"{row[field] / other[field]:.2f}x"

    def cpu(row):
        w, r = row.get("server_cpu_write_s_per_gb"), row.get("server_cpu_read_s_per_gb")
        if row.get("server_cpu_ms_per_op") is not None:
            return f"{row['server_cpu_ms_per_op']:.3f} ms/op"
        if w is None and r is None:
            return "-"
        return f"{fmt(w, digits=2)} / {fmt(r, digits=2)}"

    for row in rows:
        if "spread" in row:
            continue
        size = row["object_bytes"]
        other = by_size.get(size, {}).get(peer) if row["backend"] != peer else None
        label = f"{size // MiB} MiB" if size >= MiB else f"{size // 1024} KiB"
        table.add_row(row["backend"], label, fmt(row.get("write_mb_s")), fmt(row.get("read_mb_s")),
                      fmt(row.get("ops_s")), ratio(row, other, "write_mb_s"), ratio(row, other, "read_mb_s"),
                      ratio(row, other, "ops_s"), cpu(row), fmt(row.get("first_put_ms")),
                      fmt(row.get("write_extra_memory_x"), "x", 2) if "write_extra_memory_x" in row else "-",
                      fmt(row.get("read_extra_memory_x"), "x", 2) if "read_extra_memory_x" in row else "-")
    console = Console(width=max(160, Console().width))
    console.print(table)
    for row in rows:
        if "fallbacks" in row:
            found = ", ".join(f"{reason} x{n}" for reason, n in row["fallbacks"].items()) or "none"
            console.print(f"cassandra fallbacks (a fast path stepping aside, this process, whole run): {found}")
        if row.get("warmup_cpu_ms_per_op"):
            passes = row["warmup_cpu_ms_per_op"]
            console.print(f"cassandra warm-up: {len(passes)} pass(es), server CPU per 10 KiB op "
                          + " -> ".join("-" if c is None else f"{c:.3f}" for c in passes) + " ms")
            shares = row.get("warmup_jit_share") or []
            if any(s is not None for s in shares):
                console.print("cassandra warm-up: the JIT compiler's share of the node's CPU per pass "
                              + " -> ".join("-" if s is None else f"{s:.0%}" for s in shares))
        if row.get("ops_s_runs") and len(row["ops_s_runs"]) > 1:
            console.print(f"{row['backend']} 10 KiB ops/s, each repeat (best reported): "
                          + ", ".join(f"{o:,.0f}" for o in row["ops_s_runs"]))
        if row.get("senders"):
            took = ", ".join(f"{name} x{n}" for name, n in row["senders"].items())
            console.print(f"cassandra senders (which sender took the small puts and head reads, this process): {took}")
    for row in rows:
        if "spread" in row:
            s = row["spread"]
            shares = ", ".join(f"{a}: {b / MiB:,.1f} MiB" for a, b in s["instance_bytes"].items())
            console.print(
                f"cassandra spread of one run ({s['outputs']} x {s['output_bytes'] // MiB} MiB outputs): {shares}; "
                f"max/min {s['max_min_bytes_ratio'] if s['max_min_bytes_ratio'] is not None else '-'}; largest "
                f"partition {s['largest_partition_bytes'] / MiB:,.2f} MiB (Cassandra's histogram bucket; one chunk "
                f"group is {s['chunk_group_bytes'] / MiB:,.2f} MiB)")
            if s.get("host_bytes"):
                console.print("per host: " + ", ".join(f"{h}: {b / MiB:,.1f} MiB" for h, b in s["host_bytes"].items())
                              + f"; max/min {s['max_min_host_bytes_ratio']}")


def print_side_by_side(rows: list[dict]) -> None:
    """One line per backend and object size: each network profile's figures next to each other,
    with the ratio against s3 under that profile."""
    from rich.console import Console
    from rich.table import Table

    networks = list(dict.fromkeys(r.get("network", "loopback") for r in rows))
    cells = {(r.get("network", "loopback"), r["backend"], r["object_bytes"]): r for r in rows if "spread" not in r}
    table = Table(title="asgard bench io: " + " beside ".join(networks) + " (each profile's ratio against its own s3)")
    table.add_column("backend", justify="right")
    table.add_column("object", justify="right")
    for net in networks:
        table.add_column(f"{net}: MB/s w / r, or ops/s", justify="right")
        table.add_column(f"{net}: vs s3", justify="right")
    keys = list(dict.fromkeys((r["backend"], r["object_bytes"]) for r in rows
                              if "spread" not in r and (r.get("ops_s") or r.get("write_mb_s"))))
    for backend, size in keys:
        line = [backend, f"{size // MiB} MiB" if size >= MiB else f"{size // 1024} KiB"]
        for net in networks:
            row, peer = cells.get((net, backend, size)), cells.get((net, "s3", size))
            if row is None:
                line += ["-", "-"]
            elif row.get("ops_s"):
                line += [f"{row['ops_s']:,.1f}", f"{row['ops_s'] / peer['ops_s']:.2f}x" if peer and peer.get("ops_s") else "-"]
            else:
                ratio = (f"{row['write_mb_s'] / peer['write_mb_s']:.2f}x / {row['read_mb_s'] / peer['read_mb_s']:.2f}x"
                         if peer and peer.get("write_mb_s") and peer.get("read_mb_s") else "-")
                line += [f"{row['write_mb_s']:,.1f} / {row['read_mb_s']:,.1f}", ratio]
        table.add_row(*line)
    Console(width=max(160, Console().width)).print(table)
