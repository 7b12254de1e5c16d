"""Word count, a *shuffle* (MapReduce) fan-out (Marvel paper §4.2, WordCount).

Marvel runs Hadoop MapReduce on serverless functions with the intermediate data in an
in-memory store: mappers scan their input split word by word and emit <word, count> pairs
partitioned by key; each reducer sums its partition of every mapper's output. Every mapper
writes once, every reducer reads its partition of what every mapper wrote (m writers x r readers: a shuffle).

Here, as Dagster ops (every edge passes through the ``io_manager`` resource)::

    split_corpus --DynamicOutput x m--> map_words.map --part_j, j < r--> reduce_bucket_j (collect) --> merge_counts

* ``split_corpus`` (config: ``fanout`` = m mappers, ``reducers`` = r (default 4, at most ``MAX_REDUCERS``),
  ``scale`` = corpus size, x 4 MiB of the standard library's ``.py`` sources in sorted order,
  :func:`asgard.pipelines.data.stdlib_corpus`) cuts the corpus into m contiguous splits of about
  equal bytes; each split's text is one output (scatter).
* ``map_words`` tokenizes (:func:`tokenize`), counts, and partitions its counts into r
  buckets by ``zlib.crc32(word) % r`` (stable across processes, unlike the salted ``hash()``),
  one output per bucket: m x r intermediate objects, as in MapReduce.
* ``reduce_bucket_j`` collects output ``part_j`` of every mapper and merges it (the shuffle:
  each reducer reads its own partition from all m mappers); ``merge_counts`` (fan-in)
  merges the r disjoint partial results into the total counts.

Dagster cannot let one step both collect over a dynamic output and map over another, so the
reducers are ``MAX_REDUCERS`` static nodes and ``map_words`` has that many optional outputs;
a run emits only the first r, and the reducers past r are skipped (no process is started).
"""

import bisect
import re
import time
import zlib
from collections import Counter

import dagster as dg

from asgard.pipelines import data

_WORD = re.compile(r"[a-z][a-z0-9_]*")


def tokenize(text: str) -> list[str]:
    """Words: lower-cased runs of ASCII letters, digits and ``_`` starting with a letter."""
    return _WORD.findall(text.lower())


def partition(word: str, reducers: int) -> int:
    """The reducer bucket of ``word``: a stable hash (CRC-32), the same in every process."""
    return zlib.crc32(word.encode("utf-8")) % reducers


def reference_counts(scale: float) -> Counter:
    """``collections.Counter`` over the whole corpus for ``scale``, in one process (for checks)."""
    total: Counter = Counter()
    for rel in data.stdlib_corpus(scale):
        total.update(tokenize(data.read_source(rel)))
    return total


#: reducers are static nodes of the graph (Dagster cannot make a step both collect over one
#: dynamic output and map over another); a run uses the first ``reducers`` of them
MAX_REDUCERS = 8


class WordCountConfig(dg.Config):
    """Run config of ``split_corpus``."""

    fanout: int = 4  # m: mappers
    reducers: int = 4  # r: reducer buckets, 1..MAX_REDUCERS
    scale: float = 1.0  # corpus size: scale x 4 MiB of stdlib sources (1.0 = 321 files)


@dg.op(out=dg.DynamicOut(dict))
def split_corpus(context: dg.OpExecutionContext, config: WordCountConfig):
    """Cut the corpus into ``fanout`` contiguous splits of about equal size, one output each."""
    m, r = config.fanout, config.reducers
    if m < 1 or not 1 <= r <= MAX_REDUCERS:
        raise dg.Failure(f"need fanout >= 1 and 1 <= reducers <= {MAX_REDUCERS}, got {m} and {r}")
    files = data.stdlib_corpus(config.scale)
    texts = [data.read_source(rel) for rel in files]
    total = sum(len(t) for t in texts)
    context.log.info(f"corpus: {len(files)} files, {total} characters, {m} mappers, {r} reducers")
    # contiguous splits: boundary i is the file boundary nearest to i/m of the characters
    cum = [0]
    for t in texts:
        cum.append(cum[-1] + len(t))
    bounds = [0]
    for i in range(1, m):
        x = total * i / m
        k = bisect.bisect_left(cum, x)
        if k > 0 and x - cum[k - 1] < cum[k] - x:
            k -= 1
        bounds.append(max(bounds[-1], k))
    bounds.append(len(texts))
    for i in range(m):
        a, b = bounds[i], bounds[i + 1]
        split = {"split": i, "reducers": r, "files": files[a:b], "texts": texts[a:b]}
        yield dg.DynamicOutput(split, mapping_key=f"split_{i:04d}",
                               metadata={"files": b - a, "chars": cum[b] - cum[a]})


@dg.op(out={f"part_{j}": dg.Out(dict, is_required=False) for j in range(MAX_REDUCERS)})
def map_words(context: dg.OpExecutionContext, split: dict):
    """Count the words of one split; one output per reducer bucket (``zlib.crc32(word) % r``)."""
    t0 = time.perf_counter()
    counts: Counter = Counter()
    for text in split["texts"]:
        counts.update(tokenize(text))
    r = split["reducers"]
    parts: list[dict[str, int]] = [{} for _ in range(r)]
    for word, n in counts.items():
        parts[partition(word, r)][word] = n
    context.log.info(f"split {split['split']}: {len(split['files'])} files, {sum(counts.values())} words, "
                     f"{len(counts)} distinct in {time.perf_counter() - t0:.2f} s")
    for j, part in enumerate(parts):  # every bucket, even an empty one: m x r outputs in all
        yield dg.Output({"split": split["split"], "bucket": j, "counts": part}, f"part_{j}",
                        metadata={"distinct": len(part)})


@dg.op
def reduce_bucket(context: dg.OpExecutionContext, partitions: list) -> dict:
    """Merge one bucket's partitions, one from every mapper (the shuffle's read side)."""
    buckets = {p["bucket"] for p in partitions}
    if len(buckets) != 1:
        raise dg.Failure(f"a reducer got partitions of buckets {sorted(buckets)}")
    merged: Counter = Counter()
    for p in partitions:
        merged.update(p["counts"])
    j = buckets.pop()
    context.log.info(f"bucket {j}: {len(merged)} distinct words from {len(partitions)} mappers")
    return {"bucket": j, "n_mappers": len(partitions), "counts": dict(merged)}


@dg.op
def merge_counts(context: dg.OpExecutionContext, reduced: list) -> dict:
    """Fan-in: the reducers' disjoint results merged into the total word counts."""
    counts: dict[str, int] = {}
    for part in sorted(reduced, key=lambda p: p["bucket"]):
        overlap = counts.keys() & part["counts"].keys()
        if overlap:
            raise dg.Failure(f"bucket {part['bucket']} repeats words of another bucket: {sorted(overlap)[:5]}")
        counts.update(part["counts"])
    top = Counter(counts).most_common(20)
    result = {"app": "word_count", "n_reducers": len(reduced), "n_mappers": max((p["n_mappers"] for p in reduced), default=0),
              "n_words": sum(counts.values()), "n_distinct": len(counts), "top": top, "counts": counts}
    context.add_output_metadata({"n_words": result["n_words"], "n_distinct": result["n_distinct"],
                                 "n_reducers": len(reduced), "top": dg.MetadataValue.json(top)})
    context.log.info(f"{result['n_words']} words, {result['n_distinct']} distinct, from {len(reduced)} reducers")
    return result


@dg.graph
def word_count():
    """Word count (Marvel §4.2): m mappers shuffle CRC-32-partitioned counts to r reducers."""
    parts = split_corpus().map(map_words)  # MAX_REDUCERS dynamic outputs, the first r emitted
    reduced = [reduce_bucket.alias(f"reduce_bucket_{j}")(parts[j].collect()) for j in range(MAX_REDUCERS)]
    merge_counts(reduced)  # reducers past r are skipped; the fan-in takes the ones that ran
