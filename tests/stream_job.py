"""A job passing GiB of bytes from one step process to another as a ``Stream`` (tests/test_stream.py).

No ``from __future__ import annotations`` here: Dagster reads the ops' annotations (the config
class, ``Stream``) as types, not strings.
"""
from dagster import Config, job, multiprocess_executor, op

from asgard_dagster import CassandraIOManager, CassandraResource, Stream


class StreamConfig(Config):
    gib: float = 4.0
    hwm_file: str = ""  # where the producer writes its peak RSS once every piece is handed out


def _peak_rss_bytes() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _pieces(total: int, hwm_file: str):
    import numpy as np

    block = np.random.default_rng(11).bytes(4 << 20)
    for i in range(-(-total // len(block))):
        size = min(len(block), total - i * len(block))
        yield i.to_bytes(8, "little") + block[8:size]  # each piece differs, so order is checked
    if hwm_file:
        with open(hwm_file, "w") as f:
            f.write(str(_peak_rss_bytes()))


@op
def emit_stream(config: StreamConfig) -> Stream:
    return Stream(_pieces(int(config.gib * (1 << 30)), config.hwm_file))


@op
def digest_stream(data: Stream) -> dict:
    import hashlib

    h, n = hashlib.sha256(), 0
    for piece in data:
        h.update(piece)
        n += piece.nbytes
    return {"bytes": n, "sha256": h.hexdigest(), "peak_rss": _peak_rss_bytes()}


@job(resource_defs={"io_manager": CassandraIOManager(cassandra=CassandraResource(keyspace="asgard_test"), concurrency=4)},
     executor_def=multiprocess_executor)
def stream_job():
    digest_stream(emit_stream())
