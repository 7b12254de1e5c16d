"""The README's demo: a fan-out / fan-in job whose every output lives in the local Cassandra.

``make_chunks`` scatters n numpy arrays (DynamicOutput), ``normalize`` runs once per chunk
(``.map``), ``summarize_chunks`` gathers them (``.collect()``). Run it with
``bash scripts/demo.sh`` or ``dagster job execute -m asgard.pipelines.demo -j fan_out_fan_in``.
"""

import numpy as np
from dagster import Config, DynamicOut, DynamicOutput, In, MetadataValue, Output, job, multiprocess_executor, op

from asgard_dagster import CassandraIOManager


class ChunksConfig(Config):
    chunks: int = 4
    chunk_mib: int = 8
    seed: int = 7


@op(out=DynamicOut(np.ndarray))
def make_chunks(config: ChunksConfig):
    rng = np.random.default_rng(config.seed)
    n = config.chunk_mib * 1024 * 1024 // 8
    for i in range(config.chunks):
        yield DynamicOutput(rng.normal(loc=i, scale=1.0 + i, size=n), mapping_key=f"chunk_{i}")


@op
def normalize(chunk: np.ndarray) -> np.ndarray:
    return (chunk - chunk.mean()) / chunk.std()


@op(ins={"chunks": In(list)})
def summarize_chunks(chunks: list) -> Output:
    stats = {
        "chunks": len(chunks),
        "values": int(sum(c.size for c in chunks)),
        "mean_abs_mean": float(np.mean([abs(c.mean()) for c in chunks])),
        "mean_std": float(np.mean([c.std() for c in chunks])),
    }
    return Output(stats, metadata={k: MetadataValue.float(float(v)) for k, v in stats.items()})


@job(
    resource_defs={"io_manager": CassandraIOManager()},
    executor_def=multiprocess_executor.configured({"max_concurrent": 2}),
    description="Fan-out / fan-in of numpy chunks through the local Cassandra (asgard-dagster demo).",
)
def fan_out_fan_in():
    summarize_chunks(make_chunks().map(normalize).collect())
