"""A fast path that steps aside says so: once per process and reason at WARNING, and counted.

The early, direct and fast-read paths (:mod:`.early`, :mod:`.direct`, :mod:`.transport`) each
hand a request to the next one in the chain (early -> direct -> the driver's session) when they
cannot take it. Some of those hand-offs are the design working (a thread that finds the direct
connection busy, a session with request-init listeners); others mean the process is running
slower than it should (a driver upgrade that changed a private name, a node that refuses the
direct connection's login). Every one is counted here by ``(path, reason)``; the reasons that
mean "slower than it should" are logged at WARNING the first time in a process, so a driver
upgrade cannot make requests silently slower. ``asgard bench io`` prints the counts
(``fallbacks``).
"""
from __future__ import annotations

import collections
import logging
import os
import threading

log = logging.getLogger("asgard.resources.stores.cql")


class ProcessCounts:
    """Counts by ``(kind, name)`` key for this process: a forked step starts its own (the parent's
    counts are not its), and reads none of its parent's."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts: collections.Counter = collections.Counter()
        self._pid = os.getpid()

    def add(self, key: tuple[str, str]) -> bool:
        """Count ``key`` once; True if it is its first time in this process."""
        with self._lock:
            if os.getpid() != self._pid:
                self._pid = os.getpid()
                self._counts.clear()
            self._counts[key] += 1
            return self._counts[key] == 1

    def as_dict(self) -> dict[str, int]:
        """``{"kind: name": n}``, sorted."""
        with self._lock:
            if os.getpid() != self._pid:
                return {}
            return {f"{kind}: {name}": n for (kind, name), n in sorted(self._counts.items())}

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


_counts = ProcessCounts()


def step_aside(path: str, reason: str, detail: object = None, warn: bool = True) -> None:
    """Record that ``path`` ("early", "direct", "fast_read") handed a request on because of
    ``reason`` (a short, fixed phrase: it is the key). ``warn``: log it at WARNING the first time
    in this process (with ``detail``, e.g. the exception); otherwise at DEBUG only."""
    first = _counts.add((path, reason))
    if warn and first:
        log.warning("the %s path stepped aside (%s): requests go the next way, correct but slower%s. "
                    "Logged once per process; counted in asgard.resources.stores.cql.fallbacks.counts()",
                    path, reason, f": {detail!r}" if detail is not None else "")
    else:
        log.debug("the %s path stepped aside (%s)%s", path, reason, f": {detail!r}" if detail is not None else "")


def counts() -> dict[str, int]:
    """``{"path: reason": n}`` for this process since it started (or since :func:`reset`)."""
    return _counts.as_dict()


def reset() -> None:
    _counts.reset()
