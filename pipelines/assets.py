"""The demo and word count as software-defined assets, their values in the local Cassandra.

What most Dagster users write today, beside the op jobs of the same applications:

* ``demo_chunk`` (one partition per chunk) -> ``demo_summary``: the demo's fan-out / fan-in, the
  fan-out as partitions and the fan-in as an unpartitioned asset that reads them all (a dict by
  partition key, as Dagster's ``UPathIOManager`` loads several partitions);
* ``corpus_split`` -> ``split_word_counts`` (one partition per split: the map side) ->
  ``word_counts`` (the reduce side: every split's counts merged), and ``word_counts_rolling``, a
  split's counts with the two before it (``TimeWindowPartitionMapping``-style offsets are for
  time partitions; here ``StaticPartitionMapping`` names each split's window);
* ``daily_sample`` (one partition a day) -> ``sample_3day``: a day's samples with the two days
  before, through ``TimeWindowPartitionMapping(start_offset=-2)`` (clipped at the first day).

Materialize a partitioned asset's partitions from the UI (asset page, "Materialize" -> all
partitions, a backfill run by the daemon), then the downstream asset.
"""
from collections import Counter

import dagster as dg
import numpy as np

from asgard.pipelines import data
from asgard.pipelines.word_count import tokenize

DEMO_CHUNKS = dg.StaticPartitionsDefinition([f"chunk_{i}" for i in range(4)])
#: word count's map side: the corpus (scale 0.25, about 1 MiB of stdlib sources) in four splits
SPLITS = dg.StaticPartitionsDefinition([f"split_{i}" for i in range(4)])
CORPUS_SCALE = 0.25


@dg.asset(partitions_def=DEMO_CHUNKS, group_name="demo")
def demo_chunk(context: dg.AssetExecutionContext) -> np.ndarray:
    """One chunk of the demo: 1 MiB of normal samples, standardized."""
    i = int(context.partition_key.rsplit("_", 1)[1])
    chunk = np.random.default_rng(7 + i).normal(loc=i, scale=1.0 + i, size=128 * 1024)
    return (chunk - chunk.mean()) / chunk.std()


@dg.asset(group_name="demo")
def demo_summary(demo_chunk: dict) -> dict:
    """Fan-in: every chunk, loaded as ``{partition_key: array}``."""
    chunks = [demo_chunk[k] for k in sorted(demo_chunk)]
    return {"chunks": len(chunks), "values": int(sum(c.size for c in chunks)),
            "mean_abs_mean": float(np.mean([abs(c.mean()) for c in chunks])),
            "mean_std": float(np.mean([c.std() for c in chunks]))}


@dg.asset(partitions_def=SPLITS, group_name="word_count")
def corpus_split(context: dg.AssetExecutionContext) -> list:
    """The texts of one split: every fourth stdlib file of the corpus, from the split's index on."""
    i = int(context.partition_key.rsplit("_", 1)[1])
    files = data.stdlib_corpus(CORPUS_SCALE)[i::len(SPLITS.get_partition_keys())]
    return [data.read_source(rel) for rel in files]


@dg.asset(partitions_def=SPLITS, group_name="word_count")
def split_word_counts(corpus_split: list) -> dict:
    """The map side: one split's word counts."""
    counts: Counter = Counter()
    for text in corpus_split:
        counts.update(tokenize(text))
    return dict(counts)


@dg.asset(group_name="word_count")
def word_counts(context: dg.AssetExecutionContext, split_word_counts: dict) -> dict:
    """The reduce side: every split's counts (``{split: counts}``) merged."""
    total: Counter = Counter()
    for counts in split_word_counts.values():
        total.update(counts)
    context.add_output_metadata({"n_words": sum(total.values()), "n_distinct": len(total),
                                 "splits": len(split_word_counts)})
    return dict(total)


def _window(key: str, width: int = 3) -> list[str]:
    keys = SPLITS.get_partition_keys()
    i = keys.index(key)
    return keys[max(0, i - width + 1): i + 1]


# StaticPartitionMapping maps each upstream split to the downstream splits whose window holds it
_ROLLING = dg.StaticPartitionMapping({
    up: {down for down in SPLITS.get_partition_keys() if up in _window(down)} for up in SPLITS.get_partition_keys()})


@dg.asset(partitions_def=SPLITS, group_name="word_count",
          ins={"split_word_counts": dg.AssetIn(partition_mapping=_ROLLING)})
def word_counts_rolling(context: dg.AssetExecutionContext, split_word_counts: dict) -> dict:
    """A split's counts with the two before it: several upstream partitions for one downstream."""
    window = _window(context.partition_key)
    # as with UPathIOManager, a window of one partition loads as the value, of several as a dict
    by_split = split_word_counts if len(window) > 1 else {window[0]: split_word_counts}
    total: Counter = Counter()
    for counts in by_split.values():
        total.update(counts)
    return {"splits": sorted(by_split), "n_words": sum(total.values())}


DAYS = dg.DailyPartitionsDefinition(start_date="2026-11-01")


@dg.asset(partitions_def=DAYS, group_name="demo")
def daily_sample(context: dg.AssetExecutionContext) -> np.ndarray:
    """One day's samples: 256 KiB of normal values, seeded by the date."""
    seed = int(context.partition_key.replace("-", ""))
    return np.random.default_rng(seed).normal(size=32 * 1024)


@dg.asset(partitions_def=DAYS, group_name="demo",
          ins={"daily_sample": dg.AssetIn(partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-2))})
def sample_3day(context: dg.AssetExecutionContext, daily_sample) -> dict:
    """A day and the two before it (a time window of upstream partitions, loaded as a dict by
    date; on the first days, the days that exist)."""
    by_day = daily_sample if isinstance(daily_sample, dict) else {context.partition_key: daily_sample}
    values = np.concatenate([by_day[d] for d in sorted(by_day)])
    return {"days": sorted(by_day), "values": int(values.size), "mean": float(values.mean())}


ASSETS = [demo_chunk, demo_summary, corpus_split, split_word_counts, word_counts, word_counts_rolling,
          daily_sample, sample_3day]
#: the map side of word count, partition by partition, under the multiprocess executor (its
#: partitions, SPLITS, are the selected assets')
word_count_map_job = dg.define_asset_job("word_count_map", selection=[corpus_split, split_word_counts])
