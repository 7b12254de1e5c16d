"""What the Airflow tuning and apps tests share: an AIRFLOW_HOME with a SQLite metadata database
and the DAGs of tests/airflow_dags_apps, ``airflow`` CLI calls, and reads of Airflow's tables."""
from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DAGS = REPO / "tests" / "airflow_dags_apps"
BIN = Path(sys.executable).parent
KEYSPACE = "asgard_airflow_tune_test"
THRESHOLD = 64 * 1024
TTL = 3600


def make_home(home: Path, **extra: str) -> dict:
    """An AIRFLOW_HOME (``airflow db migrate`` run) whose XComs go to the real Cassandra node."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")},
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__XCOM_BACKEND": "asgard_airflow.CassandraXComBackend",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__ASGARD__KEYSPACE": KEYSPACE,
        "AIRFLOW__ASGARD__THRESHOLD_BYTES": str(THRESHOLD),
        "AIRFLOW__ASGARD__TTL_SECONDS": str(TTL),
        "PYTHONPATH": os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
        **extra,
    }
    out = airflow(env, "db", "migrate", timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return {"home": home, "env": env, "db": home / "airflow.db"}


def purge(home: dict) -> None:
    """Remove every value the home's runs stored, through the CLI (``asgard airflow purge``)."""
    out = subprocess.run([sys.executable, "-m", "asgard.cli", "airflow", "purge", "--older-than", "0s"],
                         env=home["env"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


def airflow(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=timeout)


def dags_test(home: dict, dag_id: str, conf: dict | None = None) -> tuple[int, str, str]:
    """``airflow dags test``: ``(return code, output, run_id)``."""
    args = ["dags", "test", dag_id] + (["-c", json.dumps(conf)] if conf is not None else [])
    out = airflow(home["env"], *args, timeout=900)
    text = out.stdout + out.stderr
    match = re.search(r"DagRun Finished: dag_id=[^,]+, logical_date=[^,]+, run_id=([^,]+),", text)
    assert match, f"no finished run in the output of airflow {' '.join(args)}:\n{text[-5000:]}"
    return out.returncode, text, match.group(1)


def query(home: dict, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(home["db"]) as db:
        return db.execute(sql, args).fetchall()


def xcom_rows(home: dict, dag_id: str, run_id: str) -> dict:
    """``{(task_id, map_index, key): parsed JSON value}`` of one run, from Airflow's xcom table."""
    rows = query(home, "SELECT task_id, map_index, key, value FROM xcom WHERE dag_id = ? AND run_id = ?",
                 dag_id, run_id)
    return {(t, m, k): json.loads(v) if isinstance(v, str) else v for t, m, k, v in rows}


def rendered_fields(home: dict, dag_id: str, run_id: str) -> dict:
    """``{task_id: rendered fields}`` of one run (map index -1), from Airflow's
    rendered_task_instance_fields table: what the UI's Rendered Template tab shows."""
    rows = query(home, "SELECT task_id, rendered_fields FROM rendered_task_instance_fields "
                 "WHERE dag_id = ? AND run_id = ? AND map_index = -1", dag_id, run_id)
    return {t: json.loads(v) if isinstance(v, str) else v for t, v in rows}


def raw_sizes(home: dict, dag_id: str, run_id: str) -> dict:
    """``{(task_id, map_index, key): bytes of the row's JSON}``: what Airflow's database holds."""
    rows = query(home, "SELECT task_id, map_index, key, length(CAST(value AS BLOB)) FROM xcom "
                 "WHERE dag_id = ? AND run_id = ?", dag_id, run_id)
    return {(t, m, k): n for t, m, k, n in rows}


def is_reference(value) -> bool:
    return isinstance(value, dict) and value.get("__asgard_xcom__") == 1
