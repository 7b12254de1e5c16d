"""What :class:`~asgard.resources.cassandra.node.CassandraNode` keeps on record in its directory:
the launch record and NUMA placement a later process restarts it from, and the measured cost of
its restarts and live changes (what the tuner charges for a change). :class:`NodeRecords` is the
node's ``records``, built from its :class:`~asgard.resources.cassandra.node_spec.NodeSpec`.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..numa import InstancePlan
from .node_spec import NodeSpec


class NodeRecords:
    """The node's launch record, placement and measurement logs, in ``spec.workdir``."""

    def __init__(self, spec: NodeSpec, kind: str):
        self.spec = spec
        # the node's class name, on record: a TunerNode is restarted by the tuner's tooling only
        self.kind = kind

    # --- placement (NUMA plan) -------------------------------------------------------------
    @property
    def placement_file(self) -> Path:
        return self.spec.workdir / "placement.json"

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
        return self.spec.workdir / "launch.json"

    def launch_record(self) -> dict[str, Any]:
        """The constructor arguments that shape the instance's configuration: a ring member
        rebuilt with the defaults would render another token and seed, and restart outside its ring."""
        spec = self.spec
        record = {"kind": self.kind, "index": spec.index, "nodes": spec.nodes, "seed": spec.seed,
                  "ring_position": spec.ring_position, "heap": spec.heap, "numa_node": spec.numa_node,
                  "version": spec.version, "native_port": spec.native_port, "authenticate": spec.authenticate,
                  "fast_start": spec.fast_start, "system_properties": spec.system_properties, "patches": spec.patches}
        if spec.seeds:  # a member of a ring across hosts: where and in which ring it runs
            record.update(seeds=spec.seeds, datacenter=spec.datacenter, rack=spec.rack, ring_ca=spec.ring_ca,
                          replication_factor=spec.replication_factor, address=spec.address, netns=spec.netns)
        return record

    def save_launch(self) -> None:
        """Before a start: the launch record and the placement (none: no placement file)."""
        import json

        self.launch_file.write_text(json.dumps(self.launch_record(), sort_keys=True))
        if self.spec.placement is not None:
            self.placement_file.write_text(json.dumps(self.spec.placement.to_dict()))
        else:
            self.placement_file.unlink(missing_ok=True)

    # --- measured restart cost ----------------------------------------------------------
    @property
    def restart_log(self) -> Path:
        return self.spec.workdir / "restarts.jsonl"

    def record_restart(self, seconds: float, **detail: Any) -> None:
        self._append_record(self.restart_log, seconds=round(seconds, 3), **{
            k: round(v, 3) if isinstance(v, float) else v for k, v in detail.items() if v is not None})

    def _append_record(self, log: Path, **fields: Any) -> None:
        """One JSON line (when, this instance, ``fields``) appended to one of its measurement logs."""
        import json

        self.spec.workdir.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            f.write(json.dumps({"at": time.time(), "endpoint": self.spec.endpoint, **fields}) + "\n")

    def restart_seconds(self, recent: int = 5) -> float | None:
        """Median stop-to-ready seconds of this instance's last ``recent`` restarts (None: never
        restarted by the project)."""
        return _recent_median(self.restart_log, "seconds", recent)

    # --- measured live-change cost ------------------------------------------------------
    @property
    def live_change_log(self) -> Path:
        return self.spec.workdir / "live_changes.jsonl"

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
