"""The Airflow XCom backend (asgard_airflow) through real ``airflow dags test`` runs.

One AIRFLOW_HOME with a SQLite metadata database per session (``airflow db migrate`` once); each
test runs a DAG from tests/airflow_dags in a subprocess against the real Cassandra node (keyspace
asgard_airflow_test) or Redis, then reads Airflow's xcom table and the store itself. A server
that cannot be reached fails the test (the fixtures start the project's servers if they are down).
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asgard.resources.stores.base import ObjectKey
from asgard.resources.stores.registry import open_store
from asgard.resources.stores.serde import CODECS

REPO = Path(__file__).resolve().parent.parent
DAGS = REPO / "tests" / "airflow_dags"
BIN = Path(sys.executable).parent
KEYSPACE = "asgard_airflow_test"
OTHER_PREFIX = "asgard-airflow-test"  # the Redis key prefix and the S3 key prefix of these tests
THRESHOLD = 64 * 1024
TTL = 3600
SIGNING_KEY = "airflow-test-signing-key-0123456789abcdef"


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory, cassandra_node):
    home = tmp_path_factory.mktemp("airflow_home")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__XCOM_BACKEND": "asgard_airflow.CassandraXComBackend",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__ASGARD__KEYSPACE": KEYSPACE,
        "AIRFLOW__ASGARD__THRESHOLD_BYTES": str(THRESHOLD),
        "AIRFLOW__ASGARD__TTL_SECONDS": str(TTL),
        "PYTHONPATH": os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
    }
    for name in list(env):  # nothing of the caller's own Airflow or asgard settings
        if name.startswith("AIRFLOW__ASGARD__") and name not in (
                "AIRFLOW__ASGARD__KEYSPACE", "AIRFLOW__ASGARD__THRESHOLD_BYTES", "AIRFLOW__ASGARD__TTL_SECONDS"):
            del env[name]
    out = subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    yield {"home": home, "env": env, "db": home / "airflow.db"}
    # the suite's stored values go with it, through the CLI under test (every run it wrote)
    _asgard(env, "airflow", "purge", "--older-than", "0s")


def _asgard(env: dict, *args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "asgard.cli", *args], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, f"asgard {' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def dags_test(home: dict, dag_id: str, conf: dict | None = None, extra_env: dict | None = None):
    """Run ``airflow dags test``: ``(return code, output, run_id)``."""
    cmd = [str(BIN / "airflow"), "dags", "test", dag_id]
    if conf is not None:
        cmd += ["-c", json.dumps(conf)]
    out = subprocess.run(cmd, env={**home["env"], **(extra_env or {})}, capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    match = re.search(r"DagRun Finished: dag_id=[^,]+, logical_date=[^,]+, run_id=([^,]+),", text)
    assert match, f"no finished run in the output of {' '.join(cmd)}:\n{text[-5000:]}"
    return out.returncode, text, match.group(1)


def xcom_rows(home: dict, dag_id: str, run_id: str) -> dict:
    """``{(task_id, map_index, key): raw value text}`` of one run, straight from Airflow's xcom table."""
    with sqlite3.connect(home["db"]) as db:
        rows = db.execute("SELECT task_id, map_index, key, value FROM xcom WHERE dag_id = ? AND run_id = ?",
                          (dag_id, run_id)).fetchall()
    # SQLite hands back a JSON number's text as an int: the JSON text either way
    return {(t, m, k): v if isinstance(v, str) else json.dumps(v) for t, m, k, v in rows}


def task_states(home: dict, dag_id: str, run_id: str) -> dict:
    with sqlite3.connect(home["db"]) as db:
        rows = db.execute("SELECT task_id, map_index, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
                          (dag_id, run_id)).fetchall()
    return {(t, m): s for t, m, s in rows}


@pytest.fixture(scope="session")
def store(cassandra_node):
    return open_store("cassandra", keyspace=KEYSPACE)


def _reference(raw: str) -> dict:
    value = json.loads(raw)
    assert isinstance(value, dict) and value.get("__asgard_xcom__") == 1, raw[:500]
    return value


def test_large_value_goes_to_cassandra_small_stays_inline(airflow_home, store):
    rc, out, run_id = dags_test(airflow_home, "asgard_big_small")
    assert rc == 0, out[-5000:]
    assert "ASGARD-CHECK big ok" in out  # the 8 MiB array arrived downstream intact (checked in the task)
    rows = xcom_rows(airflow_home, "asgard_big_small", run_id)
    # the small value is Airflow's own JSON, in the row
    assert json.loads(rows[("produce_small", -1, "return_value")]) == {"rows": 3, "name": "small"}
    # the large one: only a reference, and the documented key layout exactly
    raw = rows[("produce_big", -1, "return_value")]
    assert len(raw) < 1500, len(raw)
    ref = _reference(raw)
    scope, path = f"airflow/asgard_big_small/{run_id}", ref["path"]
    # every push its own object: <task>/<map index>/<key>/<push>, the push 32 time-ordered hex digits
    assert ref["scope"] == scope and re.fullmatch(r"produce_big/-1/return_value/[0-9a-f]{32}", path), path
    assert ref["uri"] == f"cassandra://127.0.0.1:9042/{KEYSPACE}.objects/{scope}/{path}"
    assert ref["backend"] == "cassandra" and ref["codec"] == "none" and ref["bytes"] > 8 * 1024 * 1024
    assert ref["format"] == "pickle"  # an array: what JSON cannot carry
    assert (ref["dag_id"], ref["run_id"], ref["task_id"], ref["map_index"], ref["key"]) == (
        "asgard_big_small", run_id, "produce_big", -1, "return_value")
    created, expires = (time.mktime(time.strptime(ref[k][:19], "%Y-%m-%dT%H:%M:%S")) for k in ("created_at", "expires_at"))
    assert expires - created == TTL
    assert store.list_paths(scope) == [path]
    import numpy as np

    value, got = store.get(ObjectKey(scope, path))
    assert np.array_equal(value, np.arange(1024 * 1024, dtype=np.float64))
    assert ref["checksum"] == f"crc32:{got.manifest.checksum}" and ref["bytes"] == got.manifest.size
    assert f"asgard_big_small/{run_id}" in store.list_paths("airflow-runs")  # purge's index of runs

    # what the UI shows for the row: the reference, never a fetch of 8 MiB
    # (Airflow 3's API stringifies the row's JSON: run in Airflow's environment, not this process's)
    shown = subprocess.run([sys.executable, "-c", "import json, sys\nfrom airflow.serialization.stringify import "
                            "stringify\nprint(stringify(json.loads(sys.stdin.read())))"], input=raw,
                           env=airflow_home["env"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert ref["uri"] in shown.stdout and len(shown.stdout) < 2000


def test_codec_auto_chooses_per_value_and_the_reference_says_which(airflow_home, store):
    """``[asgard] codec = auto``: the 8 MiB array is stored with the codec chosen for it, its
    reference names that codec, and the downstream task reads it back intact."""
    from asgard.resources.stores import ObjectKey

    rc, out, run_id = dags_test(airflow_home, "asgard_big_small", extra_env={"AIRFLOW__ASGARD__CODEC": "auto"})
    assert rc == 0, out[-5000:]
    assert "ASGARD-CHECK big ok" in out
    ref = _reference(xcom_rows(airflow_home, "asgard_big_small", run_id)[("produce_big", -1, "return_value")])
    assert ref["codec"] in CODECS, ref
    assert store.read_manifest(ObjectKey(ref["scope"], ref["path"])).codec == ref["codec"]
    assert (ref["stored_bytes"] < ref["bytes"]) == (ref["codec"] != "none"), ref


def test_mapped_outputs_and_fan_in(airflow_home, store):
    rc, out, run_id = dags_test(airflow_home, "asgard_mapped")
    assert rc == 0, out[-5000:]
    assert "ASGARD-CHECK fan-in ok 4 parts" in out
    rows = xcom_rows(airflow_home, "asgard_mapped", run_id)
    scope = f"airflow/asgard_mapped/{run_id}"
    for i in range(4):
        ref = _reference(rows[("make", i, "return_value")])
        assert (ref["scope"], ref["path"].rpartition("/")[0], ref["map_index"]) == (scope, f"make/{i}/return_value", i)
    assert json.loads(rows[("fan_in", -1, "return_value")]) == 4
    assert [p.rpartition("/")[0] for p in store.list_paths(scope)] == [f"make/{i}/return_value" for i in range(4)]


@pytest.mark.parametrize("mode, error, words, ttl", [
    ("chunk", "XComValueCorruptError", ["is corrupt in the store", "crc32"], TTL),
    ("delete", "XComValueMissingError", ["is not in the store", "purged or deleted before its expiry"], TTL),
    ("expire", "XComValueMissingError", ["is not in the store", "expired at", "ttl_seconds is too short"], 2),
])
def test_damaged_value_fails_the_reading_task(airflow_home, mode, error, words, ttl):
    rc, out, run_id = dags_test(airflow_home, "asgard_tamper", conf={"mode": mode},
                                extra_env={"AIRFLOW__ASGARD__TTL_SECONDS": str(ttl)})
    assert rc != 0, out[-5000:]
    assert f"ASGARD-MEDDLE mode={mode}" in out
    states = task_states(airflow_home, "asgard_tamper", run_id)
    assert states[("produce", -1)] == "success" and states[("consume", -1)] == "failed", states
    assert "ASGARD-CHECK consume ok" not in out
    line = next(l for l in out.splitlines() if l.startswith(f"asgard_airflow.errors.{error}: "))
    assert f"XCom 'return_value' of task 'produce' in run '{run_id}' of DAG 'asgard_tamper'" in line
    for word in words:
        assert word in line, line


def test_unsigned_rewrite_is_refused_with_a_signing_key(airflow_home):
    """The signing key comes from an Airflow connection; an intruder's rewrite without it is refused."""
    secret = {
        "AIRFLOW__ASGARD__CONN_ID": "asgard_store",
        "AIRFLOW_CONN_ASGARD_STORE": json.dumps({"conn_type": "generic", "extra": {"signing_key": SIGNING_KEY}}),
    }
    rc, out, run_id = dags_test(airflow_home, "asgard_tamper", conf={"mode": "none"}, extra_env=secret)
    assert rc == 0 and "ASGARD-CHECK consume ok" in out, out[-5000:]  # signed and verified
    assert _reference(xcom_rows(airflow_home, "asgard_tamper", run_id)[("produce", -1, "return_value")])["signed"]

    rc, out, run_id = dags_test(airflow_home, "asgard_tamper", conf={"mode": "unsigned"}, extra_env=secret)
    assert rc != 0, out[-5000:]
    assert task_states(airflow_home, "asgard_tamper", run_id)[("consume", -1)] == "failed"
    line = next(l for l in out.splitlines() if l.startswith("asgard_airflow.errors.XComValueTamperedError: "))
    assert f"task 'produce' in run '{run_id}'" in line and "no signature" in line, line
    assert SIGNING_KEY not in out


def test_value_over_the_limit_fails_before_writing(airflow_home, store):
    rc, out, run_id = dags_test(airflow_home, "asgard_too_large",
                                extra_env={"AIRFLOW__ASGARD__MAX_OBJECT_BYTES": str(1024 * 1024)})
    assert rc != 0, out[-5000:]
    line = next(l for l in out.splitlines() if l.startswith("asgard_airflow.errors.XComValueTooLargeError: "))
    assert f"task 'produce' in run '{run_id}'" in line and "over the store's limit of 1,048,576 bytes" in line
    assert "nothing was written" in line and "AIRFLOW__ASGARD__MAX_OBJECT_BYTES" in line
    assert store.list_paths(f"airflow/asgard_too_large/{run_id}") == []
    assert xcom_rows(airflow_home, "asgard_too_large", run_id) == {}


def test_mapped_instances_read_only_their_element(airflow_home, store):
    """A large list that .expand() maps over is stored per element: each mapped instance reads its own."""
    rc, out, run_id = dags_test(airflow_home, "asgard_expand")
    assert rc == 0 and "ASGARD-CHECK whole ok" in out, out[-5000:]
    ref = _reference(xcom_rows(airflow_home, "asgard_expand", run_id)[("make_list", -1, "return_value")])
    assert ref["items"] == 4 and ref["path"].startswith("make_list/-1/return_value/")
    scope = f"airflow/asgard_expand/{run_id}"
    assert store.list_paths(scope) == [f"{ref['path']}/{i}" for i in range(4)]
    reads = {}  # (task, map index) -> the XCom keys it read, from each task's part of the output
    for part in out.split("[DAG TEST] starting task_id=")[1:]:
        task_id, index = re.match(r"(\w+) map_index=(-?\d+)", part).groups()
        reads[(task_id, int(index))] = re.findall(r"Read XCom '([^']+)' of task 'make_list'", part)
    for i in range(4):
        assert reads[("use", i)] == [f"return_value[{i}]"], reads
    assert sorted(reads[("whole", -1)]) == [f"return_value[{i}]" for i in range(4)]


def test_unreachable_store_and_bad_settings_fail_the_task_clearly(airflow_home):
    rc, out, run_id = dags_test(airflow_home, "asgard_too_large",
                                extra_env={"AIRFLOW__ASGARD__BACKEND": "redis", "AIRFLOW__ASGARD__PORT": "1"})
    assert rc != 0
    line = next(l for l in out.splitlines() if l.startswith("asgard_airflow.errors.XComStoreUnavailableError: "))
    assert f"task 'produce' in run '{run_id}'" in line and "cannot be stored: Redis is unreachable at 127.0.0.1:1" in line
    rc, out, run_id = dags_test(airflow_home, "asgard_too_large", extra_env={"AIRFLOW__ASGARD__TTL_SECONDS": "0"})
    assert rc != 0
    line = next(l for l in out.splitlines() if l.startswith("asgard_airflow.errors.XComBackendConfigError: "))
    assert "[asgard] ttl_seconds = 0: every stored XCom value needs a lifetime" in line


def test_purge_selection_rules():
    from asgard_airflow.cli import parse_older_than, select_runs

    now = 1_800_000_000.0
    assert parse_older_than("7d", now) == now - 7 * 86400 and parse_older_than("90s", now) == now - 90
    assert parse_older_than("2026-01-01") == parse_older_than("2026-01-01T00:00:00+00:00")
    import click

    with pytest.raises(click.BadParameter, match="neither a duration"):
        parse_older_than("soon")
    runs = [{"dag_id": d, "run_id": r, "scope": f"airflow/{d}/{r}", "written_at": t}
            for d, r, t in (("a", "r1", now - 10), ("a", "r2", now - 1000), ("b", "r1", now - 1000))]
    live = {("a", "r1")}
    pick = lambda **kw: [(r["dag_id"], r["run_id"]) for r in select_runs(runs, live, **{  # noqa: E731
        "dag_id": None, "run_id": None, "cutoff": None, "orphans": False, **kw})]
    assert pick() == [("a", "r2"), ("b", "r1")]  # no filter: only runs Airflow no longer has
    assert pick(dag_id="a") == [("a", "r1"), ("a", "r2")]  # a filter: whether or not Airflow has them
    assert pick(cutoff=now - 100) == [("a", "r2"), ("b", "r1")]
    assert pick(dag_id="a", orphans=True) == [("a", "r2")]
    assert pick(run_id="r1") == [("a", "r1"), ("b", "r1")]


def test_retry_purges_the_first_try_value(airflow_home, store):
    rc, out, run_id = dags_test(airflow_home, "asgard_retry")
    assert rc == 0, out[-5000:]
    assert "ASGARD-FIRST-TRY fails on purpose" in out  # try 1 pushed 'big' (512 KiB: stored) and failed
    rows = xcom_rows(airflow_home, "asgard_retry", run_id)
    assert rows == {("flaky", -1, "return_value"): '"second try"'}
    # Airflow cleared try 1's XComs before try 2, through the backend's purge: the object is gone too
    assert store.list_paths(f"airflow/asgard_retry/{run_id}") == []


@pytest.mark.parametrize("backend, server, option, scheme", [
    ("redis", "redis_server", "key_prefix", "redis://"),
    ("s3", "minio_server", "prefix", "s3://"),
])
def test_other_backends_through_the_same_class(airflow_home, request, backend, server, option, scheme):
    request.getfixturevalue(server)  # started if down; fails if it cannot be
    other_env = {"AIRFLOW__ASGARD__BACKEND": backend, f"AIRFLOW__ASGARD__{option.upper()}": OTHER_PREFIX}
    rc, out, run_id = dags_test(airflow_home, "asgard_big_small", extra_env=other_env)
    assert rc == 0 and "ASGARD-CHECK big ok" in out, out[-5000:]
    ref = _reference(xcom_rows(airflow_home, "asgard_big_small", run_id)[("produce_big", -1, "return_value")])
    assert ref["backend"] == backend and ref["uri"].startswith(scheme), ref["uri"]
    other = open_store(backend, **{option: OTHER_PREFIX})
    scope = f"airflow/asgard_big_small/{run_id}"
    assert [p.rpartition("/")[0] for p in other.list_paths(scope)] == ["produce_big/-1/return_value"]
    _asgard({**airflow_home["env"], **other_env}, "airflow", "purge", "--run-id", run_id)
    assert other.list_paths(scope) == [] and other.list_paths("airflow-runs") == []


def test_db_clean_then_purge_leaves_nothing(airflow_home, store):
    env = airflow_home["env"]
    rc, out, run_id = dags_test(airflow_home, "asgard_mapped")
    assert rc == 0, out[-5000:]
    scope = f"airflow/asgard_mapped/{run_id}"
    assert len(store.list_paths(scope)) == 4
    # while Airflow has the run, the default purge keeps it
    kept = _asgard(env, "airflow", "purge")
    assert scope not in kept.stdout and len(store.list_paths(scope)) == 4
    before = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 60))
    clean = subprocess.run([str(BIN / "airflow"), "db", "clean", "--clean-before-timestamp", before, "--skip-archive",
                            "-y"], env=env, capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-3000:]
    assert xcom_rows(airflow_home, "asgard_mapped", run_id) == {}
    assert len(store.list_paths(scope)) == 4  # what `airflow db clean` leaves behind
    purged = _asgard(env, "airflow", "purge")
    assert f"purged {scope} (4 objects)" in purged.stdout, purged.stdout
    assert store.list_paths(scope) == []
    assert f"asgard_mapped/{run_id}" not in store.list_paths("airflow-runs")
