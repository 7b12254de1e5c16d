"""Whether a member may go down: the one rule both reconfiguration paths wait on before a member
goes down, that no member holds hints for any member but that one.

The loopback ring (:meth:`~.cluster.CassandraCluster.wait_hints_delivered`) reads the members'
hint files from their directories; the hosts' agents (:class:`~.host_agent.HostAgent`) ask each member
over CQL (``system_views.pending_hints``, what ``nodetool listpendinghints`` reads). Neither source
is to be trusted right after a member came back up:

* a member keeps a down member's hints in memory and moves them to their file every
  ``hints_flush_period``: a file read sees them within one period;
* ``pending_hints`` lists only files closed and queued for dispatch (``HintsStore.hasFiles`` in
  5.0), not the file still being written, so it reads empty while hints are pending. The file is
  closed by Cassandra's dispatch trigger (every :data:`HINTS_DISPATCH_TRIGGER_SECONDS`) once its
  target is seen alive.

So each path gives its source and the time from which that source is complete, and
:func:`wait_no_pending_hints` trusts an empty answer only from that time on; the agents' source
also only once it has read empty for a whole flush period and dispatch-trigger period in a row
(a member marked down and up again without a restart leaves no newer gossip generation, but its
file is closed, and so listed, within that time).
"""
from __future__ import annotations

import time
from typing import Callable

from ..process import ServerError

#: Cassandra's HintsDispatchTrigger period (fixed in HintsService): a live target's hints file is
#: closed, and so listed by pending_hints, within this many seconds
HINTS_DISPATCH_TRIGGER_SECONDS = 10.0
#: from a member's gossip generation (its gossip start) until its peers see it alive (assumption:
#: 1-2 s seen here; 5 s kept)
SEEN_ALIVE_MARGIN_SECONDS = 5.0


class HintsPendingError(ServerError):
    """Hints to a member were not delivered within the bound: taking the next member down would
    leave some partitions without a complete replica."""


def view_trusted_after(last_start: float, flush_seconds: float) -> float:
    """Wall-clock time from which an empty ``pending_hints`` means no hints, for a ring whose most
    recent member start (gossip generation, epoch seconds) was ``last_start``: the buffered hints
    reach their file within a flush period, and the file is listed once the dispatch trigger has
    closed it (the target seen alive)."""
    return last_start + SEEN_ALIVE_MARGIN_SECONDS + flush_seconds + HINTS_DISPATCH_TRIGGER_SECONDS


def wait_no_pending_hints(read_pending: Callable[[], dict[str, list[str]]], trusted_from: float,
                          timeout: float, going_down: str, target_of: Callable[[str], str] = str,
                          quiet_seconds: float = 0.0, sleep: float = 0.5) -> tuple[float, int]:
    """Block until ``read_pending()`` (``{holder: [target of each pending hint file]}``, the
    member going down left out of the targets) is empty at a wall-clock time at or after
    ``trusted_from``, and has read empty for ``quiet_seconds`` in a row. Returns ``(seconds waited, hint files pending when it began)``;
    :class:`HintsPendingError` after ``timeout``. ``target_of``: the member a listed entry is
    for (an address), for the message."""
    t0 = time.monotonic()
    first = None
    empty_since = None
    while True:
        pending = read_pending()
        first = sum(map(len, pending.values())) if first is None else first
        empty_since = None if pending else (time.monotonic() if empty_since is None else empty_since)
        if (empty_since is not None and time.time() >= trusted_from
                and time.monotonic() - empty_since >= quiet_seconds):
            return time.monotonic() - t0, first
        if time.monotonic() - t0 > timeout:
            targets = sorted({target_of(t) for ts in pending.values() for t in ts})
            raise HintsPendingError(
                f"hints for {targets} still pending after {timeout:.0f}s ({pending}): taking {going_down} down "
                "now would leave partitions without a complete replica. Check the receiving members' logs "
                "(HintsDispatcher), or run `nodetool repair`, then retry." if pending else
                f"the hints source is not complete yet after {timeout:.0f}s (a member came back up moments ago, or "
                f"it has not read empty for {quiet_seconds:.0f}s in a row; "
                f"trusted from {time.strftime('%H:%M:%S', time.localtime(trusted_from))}): {going_down} stays "
                "up. Retry once the ring has settled.")
        time.sleep(sleep)
