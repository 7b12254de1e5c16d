"""Web server logs landed as CSV text, parsed into Arrow and summed by path (issue 37, the data-heavy day):
an ETL whose first edge is text and whose later edges are columns, so what an edge carries differs.

    land_logs --raw CSV x fanout (scatter)--> parse_logs.map --> traffic_by_path.map --> merge_traffic (collect)

* ``land_logs`` (config: ``fanout`` partitions, ``scale`` GiB of CSV text in all, ``seed``) yields each
  partition's log file as the bytes a source system lands (``ts``, ``user_id``, ``method``, ``path``,
  ``status``, ``bytes``, ``latency_ms``, ``user_agent``; about :data:`LOG_ROW_BYTES` a line).
* ``parse_logs`` reads the CSV with Arrow (the low-cardinality strings dictionary-encoded): a table of
  about 0.4x the text's bytes, mostly 8-byte numbers.
* ``traffic_by_path`` sums requests, bytes and latency by ``(path, status)``; ``merge_traffic`` sums the
  partitions' (the run's result).

The text compresses as text does (LZ4 4.3x, zstd 6.6x, Blosc's byte shuffle 2.0x) and the parsed table as
columns do (Blosc's shuffle 2.7x, LZ4 2.1x): docs/results/issue37-log-analytics.txt.
:func:`expected_result` computes the run's result in one process, for checks.
"""

import dagster as dg
import numpy as np

#: bytes of one CSV line as :func:`log_file` writes it (measured: 138.0 over 2.1e6 lines)
LOG_ROW_BYTES = 138
PATHS = tuple(f"/api/v{v}/{r}" for v in (1, 2) for r in ("orders", "customers", "items", "search", "cart", "checkout",
                                                         "login", "static/app.js", "static/site.css", "images/logo.png"))
AGENTS = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
          "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 "
          "Safari/605.1.15",
          "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0",
          "curl/8.5.0", "python-requests/2.32.3", "Googlebot/2.1 (+http://www.google.com/bot.html)")
METHODS = ("GET", "POST")
STATUSES = (200, 200, 200, 200, 304, 404, 500)
DAY_MS = 86_400_000
FIRST_MS = 1_764_028_800_000  # 2025-11-25 00:00 UTC


class LogConfig(dg.Config):
    """Run config of ``land_logs``."""

    fanout: int = 4  # partitions of the logs (one parse and one summary each)
    scale: float = 1.0  # GiB of CSV text in all
    seed: int = 0


def _rows(scale: float, fanout: int) -> int:
    return max(1, int(scale * (1 << 30) / LOG_ROW_BYTES / fanout))


def _dictionary(values: tuple, indices: np.ndarray):
    import pyarrow as pa

    return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(values))


def log_table(scale: float, fanout: int, seed: int, part: int):
    """Partition ``part``'s log lines as a table (deterministic: the same in every process)."""
    import pyarrow as pa

    rows = _rows(scale, fanout)
    rng = np.random.default_rng([seed, part])
    ts = FIRST_MS + part * DAY_MS // fanout + np.sort(rng.integers(0, DAY_MS // fanout, rows))
    return pa.table({
        "ts": pa.array(ts, pa.timestamp("ms")),
        "user_id": rng.integers(0, 1_000_000, rows),
        "method": _dictionary(METHODS, (rng.random(rows) >= 0.8).astype(np.int32)),
        "path": _dictionary(PATHS, rng.integers(0, len(PATHS), rows, dtype=np.int32)),
        "status": np.asarray(STATUSES, dtype=np.int64)[rng.integers(0, len(STATUSES), rows)],
        "bytes": rng.integers(200, 60_000, rows),
        "latency_ms": np.round(rng.exponential(40.0, rows), 3),
        "user_agent": _dictionary(AGENTS, rng.integers(0, len(AGENTS), rows, dtype=np.int32)),
    })


def log_file(scale: float, fanout: int, seed: int, part: int) -> bytes:
    """Partition ``part`` as the CSV file a source system lands (a header line, then one line a request)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    sink = pa.BufferOutputStream()
    pcsv.write_csv(log_table(scale, fanout, seed, part), sink)
    return sink.getvalue().to_pybytes()


@dg.op(out=dg.DynamicOut(bytes))
def land_logs(context: dg.OpExecutionContext, config: LogConfig):
    """Each partition's log file, as it is made (one in memory at a time)."""
    if config.fanout < 1 or config.scale <= 0:
        raise dg.Failure(f"fanout must be >= 1 and scale > 0, got fanout {config.fanout}, scale {config.scale}")
    for part in range(config.fanout):
        raw = log_file(config.scale, config.fanout, config.seed, part)
        context.log.info(f"log partition {part}: {len(raw) / (1 << 20):.1f} MiB of CSV")
        yield dg.DynamicOutput(raw, mapping_key=f"p{part:03d}")
        del raw


def _parsed(raw):
    import pyarrow as pa
    import pyarrow.csv as pcsv

    return pcsv.read_csv(pa.BufferReader(raw), convert_options=pcsv.ConvertOptions(auto_dict_encode=True))


def _traffic(logs):
    logs = logs.unify_dictionaries()  # the parse dictionary-encodes each block of lines on its own
    return logs.group_by(["path", "status"]).aggregate(
        [("bytes", "sum"), ("latency_ms", "sum"), ("user_id", "count")])


def _merged(parts) -> dict:
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = [p.cast(pa.schema([pa.field("path", pa.string()) if f.name == "path" else f for f in p.schema]))
             for p in parts]  # each partition's parse made its own dictionary
    total = pa.concat_tables(parts).group_by(["path", "status"]).aggregate(
        [("bytes_sum", "sum"), ("latency_ms_sum", "sum"), ("user_id_count", "sum")])
    requests = int(total["user_id_count_sum"].to_numpy().sum())
    errors = int(pc.sum(total.filter(pc.greater_equal(total["status"], 500))["user_id_count_sum"]).as_py() or 0)
    return {"app": "log_analytics", "groups": total.num_rows, "requests": requests, "errors": errors,
            "bytes": int(total["bytes_sum_sum"].to_numpy().sum()),
            "mean_latency_ms": round(float(total["latency_ms_sum_sum"].to_numpy().sum()) / max(requests, 1), 6)}


@dg.op
def parse_logs(raw: bytes):
    """The partition's lines as an Arrow table (method, path and user agent dictionary-encoded)."""
    return _parsed(raw)


@dg.op
def traffic_by_path(logs):
    """Requests, bytes and latency summed by (path, status)."""
    return _traffic(logs)


@dg.op
def merge_traffic(context: dg.OpExecutionContext, parts: list) -> dict:
    """The partitions' sums by (path, status) summed: the run's result."""
    result = _merged(parts)
    context.add_output_metadata({k: v for k, v in result.items() if k != "app"})
    return result


def expected_result(scale: float, fanout: int, seed: int = 0) -> dict:
    """The run's result computed in one process, partition by partition (for checks)."""
    return _merged([_traffic(_parsed(log_file(scale, fanout, seed, p))) for p in range(fanout)])


@dg.graph
def log_analytics():
    """Log analytics: log files scattered as text, parsed into columns, summed, gathered."""
    merge_traffic(land_logs().map(parse_logs).map(traffic_by_path).collect())
