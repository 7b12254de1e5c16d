"""What :class:`~asgard.resources.cassandra.node.CassandraNode` keeps on record in its directory:
the launch record and NUMA placement a later process restarts it from, and the measured cost of
its restarts and live changes (what the tuner charges for a change).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..numa import Binding, InstancePlan
from ..process import ServerError

if TYPE_CHECKING:
    from .node import CassandraNode


class NodeRecords:
    """The node's launch record, placement and measurement logs; mixed into CassandraNode."""

    # --- placement (NUMA plan) -------------------------------------------------------------
    @property
    def placement_file(self) -> Path:
        return self.workdir / "placement.json"

    def binding(self) -> Binding | None:
        if self.placement is not None:
            return self.placement.binding
        return super().binding()

    def launched_placement(self) -> InstancePlan | None:
        """The plan the running instance was launched with (None: launched without one)."""
        import json

        try:
            return InstancePlan.from_dict(json.loads(self.placement_file.read_text()))
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    # --- launch record: what a later process needs to restart this instance as it runs ---------
    @property
    def launch_file(self) -> Path:
        return self.workdir / "launch.json"

    def launch_record(self) -> dict[str, Any]:
        """The constructor arguments that shape the instance's configuration: a ring member
        rebuilt with the defaults would render another token and seed, and restart outside its ring."""
        record = {"kind": type(self).__name__, "index": self.index, "nodes": self.nodes, "seed": self.seed,
                  "ring_position": self.ring_position, "heap": self.heap, "numa_node": self.numa_node,
                  "version": self.version, "native_port": self.native_port, "authenticate": self.authenticate,
                  "fast_start": self.fast_start, "system_properties": self.system_properties, "patches": self.patches}
        if self.seeds:  # a member of a ring across hosts: where and in which ring it runs
            record.update(seeds=self.seeds, datacenter=self.datacenter, rack=self.rack, ring_ca=self.ring_ca,
                          replication_factor=self.replication_factor, address=self.address, netns=self.netns)
        return record

    @classmethod
    def launched(cls, index: int, workdir: Path | None = None) -> "CassandraNode":
        """Instance ``index`` as it was last started (its ``launch.json`` and NUMA placement), so that
        a restart from another process (the retune job) keeps its ring, token, heap and pinning.

        An instance started before launch records existed is taken as a standalone node (what
        ``CassandraNode(index)`` is); :class:`~asgard.resources.cassandra.cluster.RingMemberError` is raised
        by the ring discovery when such an instance is one of several members."""
        import json

        probe = cls(index=index, workdir=workdir)
        try:
            record = json.loads(probe.launch_file.read_text())
        except FileNotFoundError:
            return probe
        kind = record.pop("kind", cls.__name__)
        if kind != cls.__name__:  # e.g. the tuner's TunerNode: another cluster name, its own tooling
            raise ServerError(f"{probe.name} was launched as a {kind}, not a {cls.__name__}: restart it with the "
                              "tooling that started it (a TunerNode: `asgard tune`)")
        placement = probe.launched_placement()
        record.pop("index", None)
        if placement is not None:  # heap and NUMA node come with the placement
            record.pop("heap", None)
            record.pop("numa_node", None)
        return cls(index=index, workdir=workdir, placement=placement, **record)

    # --- measured restart cost ----------------------------------------------------------
    @property
    def restart_log(self) -> Path:
        return self.workdir / "restarts.jsonl"

    def record_restart(self, seconds: float, **detail: Any) -> None:
        self._append_record(self.restart_log, seconds=round(seconds, 3), **{
            k: round(v, 3) if isinstance(v, float) else v for k, v in detail.items() if v is not None})

    def _append_record(self, log: Path, **fields: Any) -> None:
        """One JSON line (when, this instance, ``fields``) appended to one of its measurement logs."""
        import json

        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            f.write(json.dumps({"at": time.time(), "endpoint": self.endpoint, **fields}) + "\n")

    def restart_seconds(self, recent: int = 5) -> float | None:
        """Median stop-to-ready seconds of this instance's last ``recent`` restarts (None: never
        restarted by the project)."""
        return _recent_median(self.restart_log, "seconds", recent)

    # --- measured live-change cost ------------------------------------------------------
    @property
    def live_change_log(self) -> Path:
        return self.workdir / "live_changes.jsonl"

    def record_live_change(self, seconds: float, slowdown: float | None) -> None:
        """A live change (nodetool, ALTER TABLE/KEYSPACE) applied to this instance: how long it
        took, and the fraction of the store's throughput lost meanwhile (None: not probed)."""
        self._append_record(self.live_change_log, seconds=round(seconds, 3),
                            slowdown=None if slowdown is None else round(slowdown, 4))

    def live_change_cost(self, recent: int = 5) -> tuple[float | None, float | None]:
        """(seconds, slowdown): medians over this instance's last ``recent`` measured live changes;
        None for what was never measured."""
        return (_recent_median(self.live_change_log, "seconds", recent),
                _recent_median(self.live_change_log, "slowdown", recent))


def _recent_median(log: Path, field: str, recent: int) -> float | None:
    """Median of ``field`` over the last ``recent`` records of a JSON-lines log that has it."""
    import json
    import statistics

    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return None
    values = []
    for line in lines:
        try:
            value = json.loads(line).get(field)
        except (ValueError, AttributeError):
            continue  # a line torn by a crash mid-write
        if isinstance(value, (int, float)):
            values.append(float(value))
    return statistics.median(values[-recent:]) if values else None
