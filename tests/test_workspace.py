"""workspace.yaml loads in Dagster with the three applications and the demo job."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_definitions_validate_passes():
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.run([str(dagster), "definitions", "validate", "-w", "workspace.yaml"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Validation successful for code location asgard" in proc.stdout + proc.stderr


def test_definitions_hold_the_apps_on_cassandra_and_the_purge_sensor():
    from asgard_dagster import CassandraIOManager
    from asgard.pipelines.definitions import defs

    names = {job.name for job in defs.resolve_all_job_defs()}
    assert {"video_analytics__cassandra", "lightgbm_forest__cassandra", "word_count__cassandra",
            "fan_out_fan_in"} <= names
    assert isinstance(defs.resources["io_manager"], CassandraIOManager)
    assert defs.resolve_sensor_def("asgard_purge_succeeded_runs") is not None
