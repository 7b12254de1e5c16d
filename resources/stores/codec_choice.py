"""The codec of one output, chosen from what it costs here (``codec="auto"``).

A codec pays when the time it saves moving fewer bytes through the store, once for the write and
once per reader, is more than the time it spends compressing once and decompressing per reader.
Both sides are measured, not assumed: the codecs' ratio and speed on a sample of the output itself
(:func:`try_codecs`), and the store's throughput as this machine last saw it for the bytes it
stores (:class:`ThroughputRecord`, kept across processes because each step of a run is a process of its
own). Until a store has been measured, its throughput is the assumption named below.
Each codec's writes are then checked against the model: a put with a codec the choice made is
timed, and the ratio of its seconds to the model's (:attr:`Throughput.write_factors`) scales that
codec's write in the next choices: a codec whose puts cost more here than its trial and the
store's throughput add up to stops winning on the model's word, for as long as the store's
throughput stays near the figure its puts were weighed at.

    choice = choose_codec(frames, readers=3, throughput=record.read(store_id))
    choice.codec, choice.reason   # "lz4", "lz4 ratio 3.1 on a 256 KiB sample: 41 ms against 97 ms ..."

The trial runs for a few milliseconds and keeps each codec's fastest repeat, so it sees a codec with
a core to itself. The store's throughput, observed over real puts and gets, already carries the
machine's contention; the codec's work is scaled to the same conditions: by the share of a core it
gets now (:func:`cpu_share`, the cores over the tasks wanting one, read around the trial). On a busy
machine, with runs, the store and its replicas on the same cores, a heavier codec then loses to a
lighter one or none. A store not yet measured here is assumed as fast as on an idle machine, so
it is scaled alike: until a put is seen, the load does not tip the choice.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from .serde import get_codec

MiB = 1024 * 1024
#: outputs under this size are stored as they are: a trial would cost more than it can save
AUTO_MIN_BYTES = 1 * MiB
#: bytes of an output a trial compresses (enough for lz4's and zstd's windows to see its structure)
SAMPLE_BYTES = 256 * 1024
#: times each codec compresses and decompresses the sample (the fastest counts)
TRIAL_REPEATS = 3
#: the codecs a trial weighs against storing the bytes as they are
CANDIDATES = ("lz4", "zstd", "blosc-lz4")
#: a sample's parts start and end on this many bytes, so blosc-lz4's 8-byte shuffle sees the
#: columns' values as its puts do (an output's frames start aligned: AlignedPickleSerializer)
SAMPLE_ALIGN = 8
#: a codec must save this share of the time over storing as is, and over any lighter codec that pays, to be
#: chosen: below it the choice would follow noise (assumption: the spread of repeated 16 MiB puts here, 5-8%,
#: docs/results/bench-io.txt)
MARGIN = 0.10
#: a codec's put may take this many times its model at most, or this share of it at least, in the
#: record: one put stalled by a restart must not rule a codec out for good
WRITE_FACTOR_BOUNDS = (0.25, 8.0)
#: seconds of puts or gets that move the record's average all the way to what they saw: each one
#: counts by its seconds, so a 10 ms put of a small table barely moves what decides a 1 s put
#: (the cloud day of 2026-11-28: one 1.88x put of the customers table set lz4's factor for every
#: orders partition after it). Assumption: about one data-heavy step's store time there (1-2 s a put)
RECORD_HORIZON_S = 4.0
#: a codec's factor corrects the model it was seen against: once the store's write figure has moved
#: past this many times the one its puts were weighed at, it counts as 1 again (the cloud day of
#: 2026-11-29: blosc-lz4's puts, seen at 2.9x a model of the assumed 436 MB/s, kept it out of every
#: choice after the store measured 96 MB/s, where lz4's factor was learnt again at about 1)
FACTOR_BASE_SPAN = 1.5
#: a store's raw-byte MB/s until measured here (assumption: loopback Cassandra, 16 MiB objects,
#: write 435.8 / read 824.7 MB/s, docs/results/bench-io.txt)
ASSUMED_WRITE_MB_S, ASSUMED_READ_MB_S = 435.8, 824.7


@dataclass(frozen=True)
class CpuShare:
    """The share of a core a codec's work gets (at most 1): ``cores`` this process may run on over
    ``runnable``, the tasks wanting a core while it was tried."""

    runnable: float
    cores: int

    @property
    def share(self) -> float:
        return min(1.0, self.cores / max(1.0, self.runnable))

    def describe(self) -> str:
        return f"codecs at {self.share:.2f} of a core ({self.runnable:.1f} runnable tasks on {self.cores} cores)"


def _procs_running() -> int | None:
    """The tasks running or runnable on this machine now (``procs_running`` in /proc/stat, this one
    included); None where there is no /proc."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"procs_running "):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def cpu_share(samples: list[int] | None = None) -> CpuShare:
    """The share of a core a codec gets here now: the cores over the runnable tasks, the median of
    ``samples`` (``procs_running`` read around the trial's repeats). Not the load average: it
    trails by a minute, and a step's choice is about the next second. Without samples (no /proc),
    the 1-minute load average is the figure there is."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if samples:
        runnable = float(sorted(samples)[len(samples) // 2])
    else:
        try:
            runnable = os.getloadavg()[0]
        except OSError:  # no load average on this platform either: as if idle
            runnable = 1.0
    return CpuShare(max(1.0, runnable), cores)


@dataclass(frozen=True)
class CodecTrial:
    """A codec on a sample: ``ratio`` raw/compressed bytes, speeds in MB/s of raw bytes."""

    codec: str
    ratio: float
    compress_mb_s: float
    decompress_mb_s: float


@dataclass(frozen=True)
class Throughput:
    """A store's MB/s for raw bytes, and whether it was measured here (else assumed);
    ``write_factors``: by codec, a put's seconds over what the model expected, as seen here."""

    write_mb_s: float = ASSUMED_WRITE_MB_S
    read_mb_s: float = ASSUMED_READ_MB_S
    measured: bool = False
    write_factors: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CodecChoice:
    """The codec chosen for one output, the seconds each candidate was expected to take (the write
    and every read), and why, in a line for the output's metadata; ``model_write_seconds``: the
    chosen codec's compression and write as the model has them, which its put is checked against."""

    codec: str
    reason: str
    expected_seconds: dict[str, float]
    model_write_seconds: float | None = None
    model_write_mb_s: float | None = None  # the store's write figure in the record when the model was made


def sample_of(frames: list[memoryview]) -> memoryview:
    """Up to ``SAMPLE_BYTES`` of the output, from each frame in proportion to its size: a table's
    columns compress unlike each other (a joined Arrow table's largest column, random doubles,
    held 1.0x where the whole took lz4 1.46x and zstd 1.87x), so one frame misjudges the whole."""
    views = [memoryview(f).cast("B") for f in frames]
    total = sum(v.nbytes for v in views)
    if total <= SAMPLE_BYTES:
        return memoryview(b"".join(views))
    parts = []
    for view in views:
        take = view.nbytes * SAMPLE_BYTES // total // SAMPLE_ALIGN * SAMPLE_ALIGN
        start = (view.nbytes - take) // 2 // SAMPLE_ALIGN * SAMPLE_ALIGN  # the middle: a file's header is not its body
        parts.append(view[start : start + take])
    return memoryview(b"".join(parts))


def try_codecs(sample: memoryview, candidates: tuple[str, ...] = CANDIDATES,
               runnable: list[int] | None = None) -> list[CodecTrial]:
    """Compress and decompress ``sample`` with each codec, timed on this machine; ``runnable``, if
    given, gets the machine's runnable tasks, read before each repeat."""
    trials = []
    for name in candidates:
        codec = get_codec(name)
        codec.decompress(codec.compress(b"warm"), 4)  # the library imported and ready: not timed
        packing, unpacking = [], []
        for _ in range(TRIAL_REPEATS):  # the fastest of a few: a busy machine's pauses are not the codec's
            if runnable is not None and (now := _procs_running()) is not None:
                runnable.append(now)  # this process included: the codec competes for a core with the rest
            t0 = time.perf_counter()
            packed = codec.compress(sample)
            t1 = time.perf_counter()
            codec.decompress(packed, sample.nbytes)
            packing.append(t1 - t0)
            unpacking.append(time.perf_counter() - t1)
        mb = sample.nbytes / MiB
        trials.append(CodecTrial(name, sample.nbytes / max(1, len(packed)), mb / max(min(packing), 1e-6),
                                 mb / max(min(unpacking), 1e-6)))
    return trials


def expected_seconds(size: int, readers: int, throughput: Throughput, trial: CodecTrial | None) -> float:
    """Seconds the output costs: one write and ``readers`` reads through the store, plus, with a
    codec, one compression and ``readers`` decompressions."""
    mb = size / MiB
    if trial is None:
        return mb / throughput.write_mb_s + readers * mb / throughput.read_mb_s
    stored = mb / trial.ratio
    return (mb / trial.compress_mb_s + stored / throughput.write_mb_s
            + readers * (stored / throughput.read_mb_s + mb / trial.decompress_mb_s))


def under_load(trial: CodecTrial, share: float) -> CodecTrial:
    """``trial``'s speeds as a codec gets them with ``share`` of a core."""
    return CodecTrial(trial.codec, trial.ratio, trial.compress_mb_s * share, trial.decompress_mb_s * share)


def choose_codec(frames: list[memoryview], readers: int, throughput: Throughput,
                 share: CpuShare | None = None) -> CodecChoice:
    """The codec that makes the output cheapest here, "none" unless one saves over ``MARGIN``, and a
    heavier codec only where it saves ``MARGIN`` over a lighter one; the codecs' work at ``share`` of a
    core (measured around the trial when not given)."""
    size = sum(f.nbytes for f in frames)
    if size < AUTO_MIN_BYTES:
        return CodecChoice("none", f"{size} bytes, under {AUTO_MIN_BYTES // MiB} MiB: stored as is", {})
    runnable: list[int] = []
    base_write_mb_s = throughput.write_mb_s
    sample = sample_of(frames)
    trials = try_codecs(sample, runnable=runnable)
    share = share or cpu_share(runnable)
    trials = [under_load(t, share.share) for t in trials]
    if not throughput.measured:  # assumed from an idle machine: as loaded as the codecs now
        throughput = replace(throughput, write_mb_s=throughput.write_mb_s * share.share,
                             read_mb_s=throughput.read_mb_s * share.share)
    readers = max(1, readers)
    costs = {"none": expected_seconds(size, readers, throughput, None)}
    writes = {t.codec: expected_seconds(size, 0, throughput, t) for t in trials}  # the model's, unscaled
    factors = {t.codec: throughput.write_factors.get(t.codec, 1.0) for t in trials}
    # a codec's write at what its puts took here against the model (1 until one is seen)
    costs.update({t.codec: expected_seconds(size, readers, throughput, t) + (factors[t.codec] - 1) * writes[t.codec]
                  for t in trials})
    best = min(trials, key=lambda t: costs[t.codec])
    # from the lightest codec (CPU a byte, as the trial timed them) to the heaviest, each must save MARGIN
    # over the lighter pick before it: the CPU a heavier one adds is the model's least certain term (a
    # snapshot of a busy machine's share of a core flipped land_logs between lz4 and zstd run to run)
    pick: CodecTrial | None = None
    for t in sorted(trials, key=lambda t: 1 / t.compress_mb_s + readers / t.decompress_mb_s):
        if costs[t.codec] < (1 - MARGIN) * costs[pick.codec if pick else "none"]:
            pick = t
    source = "measured here" if throughput.measured else "assumed, not yet measured here"
    seen = [f"{c} puts {f:.2f}x the model" for c, f in sorted(throughput.write_factors.items()) if c in factors]
    store = (f"store {throughput.write_mb_s:.0f}/{throughput.read_mb_s:.0f} MB/s write/read ({source}), "
             f"{share.describe()}" + (f", {', '.join(seen)} here" if seen else ""))
    if pick is not None:
        heavier = (f"; {best.codec} {costs[best.codec] * 1000:.0f} ms, not {MARGIN:.0%} better than the lighter "
                   f"{pick.codec}" if best is not pick else "")
        return CodecChoice(pick.codec, f"{pick.codec} ratio {pick.ratio:.2f} on a {sample.nbytes // 1024} KiB sample: "
                           f"{costs[pick.codec] * 1000:.0f} ms against {costs['none'] * 1000:.0f} ms as is, for 1 "
                           f"write and {readers} read(s) at {store}{heavier}", costs, writes[pick.codec],
                           base_write_mb_s)
    return CodecChoice("none", f"best codec {best.codec} (ratio {best.ratio:.2f}) would take "
                       f"{costs[best.codec] * 1000:.0f} ms against {costs['none'] * 1000:.0f} ms as is, for 1 write "
                       f"and {readers} read(s) at {store}: not {MARGIN:.0%} better", costs)


class ThroughputRecord:
    """A store's MB/s of stored bytes as this machine's processes saw it, in a small JSON file (each
    step is a process of its own, so one process rarely measures enough itself): a moving average of
    puts and gets, each of ``AUTO_MIN_BYTES`` or more stored and weighted by its seconds
    (``RECORD_HORIZON_S``), by store (backend and endpoint); and each codec's write factor with the
    store's write figure it was seen against (``FACTOR_BASE_SPAN``)."""

    def __init__(self, path: Path | None = None):
        self.path = path or default_record_path()
        self._lock = threading.Lock()
        self._cache: dict | None = None

    def read(self, store_id: str) -> Throughput:
        entry = self._load().get(store_id)
        if not entry:
            return Throughput()
        write_mb_s = entry.get("write_mb_s", ASSUMED_WRITE_MB_S)
        bases = entry.get("write_factor_bases", {})
        factors = {codec: f for codec, f in entry.get("write_factors", {}).items()
                   if self._same_base(bases.get(codec), write_mb_s)}
        if "write_mb_s" not in entry and "read_mb_s" not in entry:
            return Throughput(write_factors=factors)
        return Throughput(write_mb_s, entry.get("read_mb_s", ASSUMED_READ_MB_S), True, factors)

    @staticmethod
    def _same_base(base: float | None, write_mb_s: float) -> bool:
        """Whether a factor seen against a store writing ``base`` MB/s still corrects a model of
        ``write_mb_s`` (a factor kept before bases were recorded: yes)."""
        return base is None or 1 / FACTOR_BASE_SPAN <= write_mb_s / base <= FACTOR_BASE_SPAN

    def read_mib_s(self, store_id: str) -> float | None:
        """The store's measured reads (MiB/s of raw bytes through the store), None before any."""
        return (self._load().get(store_id) or {}).get("read_mb_s")

    def observe_codec(self, store_id: str, codec: str, model_seconds: float, seconds: float,
                      base_write_mb_s: float | None = None) -> None:
        """Fold one put with ``codec``, which the model expected to take ``model_seconds`` (its
        compression and write, at a store writing ``base_write_mb_s``) and took ``seconds``, into the
        codec's factor; a codec not seen yet, or seen against another base, starts from the model's
        own word (1), so its first put weighs only its seconds."""
        self.observe_put(store_id, 0, 0.0, codec, model_seconds, seconds, base_write_mb_s)

    def observe_put(self, store_id: str, size: int, seconds: float, codec: str | None = None,
                    model_seconds: float = 0.0, codec_seconds: float = 0.0,
                    base_write_mb_s: float | None = None) -> None:
        """Fold one put of ``size`` stored bytes in ``seconds`` into the store's writes and, with a
        ``codec`` the model weighed, into its factor (:meth:`observe_codec`): one rewrite of the file."""
        measures = size >= AUTO_MIN_BYTES and seconds > 0
        weighs = codec is not None and model_seconds > 0 and codec_seconds > 0
        if not (measures or weighs):
            return
        with self._lock:
            data = self._load(fresh=True)
            entry = data.setdefault(store_id, {})
            if measures:
                self._fold(entry, "write", size, seconds)
            if weighs:
                low, high = WRITE_FACTOR_BOUNDS
                now = min(high, max(low, codec_seconds / model_seconds))
                factors, bases = entry.setdefault("write_factors", {}), entry.setdefault("write_factor_bases", {})
                same = base_write_mb_s is None or self._same_base(bases.get(codec), base_write_mb_s)
                factors[codec] = self._averaged(factors.get(codec, 1.0) if same else 1.0, now, codec_seconds)
                if base_write_mb_s is not None:
                    bases[codec] = base_write_mb_s
            self._save(data)

    @staticmethod
    def _averaged(old: float | None, now: float, seconds: float) -> float:
        """``now``, seen over ``seconds``, folded into the moving average ``old`` (``now`` itself
        for the first)."""
        weight = min(1.0, seconds / RECORD_HORIZON_S)
        return now if old is None else (1 - weight) * old + weight * now

    def observe(self, store_id: str, kind: str, size: int, seconds: float) -> None:
        """Fold one put (``kind`` "write") or get ("read") of ``size`` stored bytes into the record."""
        if size < AUTO_MIN_BYTES or seconds <= 0:
            return
        with self._lock:
            data = self._load(fresh=True)
            self._fold(data.setdefault(store_id, {}), kind, size, seconds)
            self._save(data)

    def _fold(self, entry: dict, kind: str, size: int, seconds: float) -> None:
        field = f"{kind}_mb_s"
        entry[field] = self._averaged(entry.get(field), size / MiB / seconds, seconds)

    def _load(self, fresh: bool = False) -> dict:
        if self._cache is None or fresh:
            try:
                self._cache = json.loads(self.path.read_text())
            except (OSError, ValueError):  # none yet, or another process's write half-read: start over
                self._cache = {}
        return self._cache

    def _save(self, data: dict) -> None:
        # written whole and renamed: a reader never sees half a file
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".throughput-")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)


_record: ThroughputRecord | None = None


def throughput_record() -> ThroughputRecord:
    """The process's record (its file found when first used, not at import)."""
    global _record
    if _record is None:
        _record = ThroughputRecord()
    return _record


def default_record_path() -> Path:
    """``$ASGARD_HOME/cache/throughput.json``, else the user's cache folder."""
    home = os.environ.get("ASGARD_HOME")
    base = Path(home) / "cache" if home else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "asgard"
    return base / "throughput.json"
