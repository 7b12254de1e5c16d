"""Airflow's XCom semantics, kept by the asgard backend (issue 36, part 7).

Most tests call Airflow's real XCom class (``CassandraXComBackend``: ``set``, ``serialize_value``,
``deserialize_value``, ``purge``) in this process, on the local Cassandra node and on the local
backend; the settings come from ``AIRFLOW__ASGARD__*`` as in a task, read again per test
(``read_settings.cache_clear()``). The list/tuple types and ``airflow tasks clear`` go through
real ``airflow dags test`` runs (the fixtures of tests/test_airflow_xcom.py).
"""
from __future__ import annotations

import collections
import dataclasses
import enum
import inspect
import json
import re
import subprocess
import threading
import time
import uuid
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import asgard_airflow.xcom as xcom
from asgard.resources.stores.base import ObjectKey

from .test_airflow_xcom import BIN, KEYSPACE, _reference, airflow_home, dags_test, store, xcom_rows  # noqa: F401

X = xcom.CassandraXComBackend
THRESHOLD = 1024


@pytest.fixture(params=["cassandra", "local"])
def backend(request, monkeypatch, tmp_path):
    """The settings a task would have (one backend each), read again by the next call."""
    for name in [n for n in __import__("os").environ if n.startswith("AIRFLOW__ASGARD__")]:
        monkeypatch.delenv(name)
    settings = {"BACKEND": request.param, "THRESHOLD_BYTES": str(THRESHOLD), "TTL_SECONDS": "3600"}
    if request.param == "cassandra":
        request.getfixturevalue("cassandra_node")
        settings["KEYSPACE"] = KEYSPACE
    else:
        settings["ROOT"] = str(tmp_path / "objects")
    for name, value in settings.items():
        monkeypatch.setenv(f"AIRFLOW__ASGARD__{name}", value)
    configure = lambda **more: [monkeypatch.setenv(f"AIRFLOW__ASGARD__{k.upper()}", str(v))  # noqa: E731
                                for k, v in more.items()] and xcom.read_settings.cache_clear()
    xcom.read_settings.cache_clear()
    where = {"dag_id": f"semantics_{uuid.uuid4().hex[:8]}", "run_id": "manual__1", "task_id": "produce",
             "key": "return_value"}
    yield SimpleNamespace(name=request.param, where=where, configure=configure, store=lambda: xcom.configured_store())
    for dag_id, run_id in ((where["dag_id"], where["run_id"]), ("NO_DAG_ID", "NO_RUN_ID")):  # values and markers
        xcom.configured_store().purge_scope(xcom.scope_for_run(dag_id, run_id))
        xcom.configured_store().delete(xcom.run_marker_key(dag_id, run_id))
    xcom.read_settings.cache_clear()


class Rows(list):
    """A list subclass: JSON would hand back a plain list."""


def push(value, mapped_length=None, **where):
    """What ``set`` sends Airflow as the row (as JSON, as the execution API carries it)."""
    xcom._mapping.length = mapped_length  # what set() records from Airflow's _mapped_length
    try:
        return json.loads(json.dumps(X.serialize_value(value, **where)))
    finally:
        xcom._mapping.length = None


def pull(row):
    return X.deserialize_value(SimpleNamespace(value=row))


def stored(backend, ref, item=None) -> ObjectKey:
    return ObjectKey(ref["scope"], ref["path"] + ("" if item is None else f"/{item}"))


# --- the type a value was pushed with ------------------------------------------------------------
def test_values_come_back_with_their_type_and_what_serde_carries_as_json(backend):
    big = "x" * (2 * THRESHOLD)
    cases = [[1, 2.5, big], (1, "a", big), {"a": (1, 2), "b": {3, 4}, "c": big}, [(1, 2), [3, {"d": None}], big],
             big, {"nested": [True, False, None, big]}]
    for value in cases:
        ref = push(value, **backend.where, map_index=-1)
        assert xcom.is_reference(ref) and ref["format"] == "json", (value, ref)
        got = pull(ref)
        assert type(got) is type(value) and got == value
        # plain UTF-8 JSON in the store, in Airflow's own serialization: any JSON parser reads it
        parsed, result = backend.store().get(stored(backend, ref))
        assert result.manifest.serializer == "json"
        raw = backend.store().open_stream(stored(backend, ref))[0].read()  # the bytes as stored
        from airflow.sdk.serde import serialize

        assert json.loads(raw.decode("utf-8")) == parsed == json.loads(json.dumps(serialize(value)))
    # what Airflow's serde refuses is pickled, and comes back exactly: bytes, arrays, NaN, frames
    frame = pd.DataFrame({"t": pd.date_range("2026-01-01", periods=512, freq="h", tz="Europe/Paris"),
                          "c": pd.Categorical(["a", "b"] * 256), "v": np.arange(512.0)})
    for value in (b"\x01" * 4096, np.arange(1000.0), [float("nan")] * 400, frame):
        ref = push(value, **backend.where)
        assert ref["format"] == "pickle", type(value)
        got = pull(ref)
        assert type(got) is type(value)
        assert got.equals(value) if isinstance(value, pd.DataFrame) else np.array_equal(got, value) if isinstance(
            value, np.ndarray) else (got == value or repr(got) == repr(value))


Named = collections.namedtuple("Named", "name pad")


class Size(enum.IntEnum):
    BIG = 10 ** 6


@dataclasses.dataclass
class Point:
    x: int
    pad: str


class Opaque:
    """No serializer of Airflow's: serde refuses it, the backend pickles it."""

    def __init__(self, pad: str):
        self.pad = pad

    def __eq__(self, other):
        return type(other) is Opaque and other.pad == self.pad


class Shell:
    """A pickle that runs a command when loaded."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def _as_airflow_has_it(value):
    """What Airflow's own BaseXCom hands back for ``value``: its serde, through the row's JSON."""
    from airflow.sdk.bases.xcom import BaseXCom

    return BaseXCom.deserialize_value(SimpleNamespace(value=json.loads(json.dumps(BaseXCom.serialize_value(value)))))


@pytest.fixture
def allow(monkeypatch):
    """Set ``[core] allowed_deserialization_classes`` as a worker's environment would."""
    from airflow.sdk import serde

    def forget():  # serde caches the patterns and each class name's answer, for a process's life
        for cached in (serde._get_patterns, serde._get_regexp_patterns, serde._match_glob, serde._match_regexp):
            cached.cache_clear()

    def set_patterns(patterns: str):
        monkeypatch.setenv("AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES", patterns)
        forget()

    yield set_patterns
    monkeypatch.delenv("AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES")
    forget()


def test_a_stored_value_comes_back_as_airflow_brings_back_an_inline_one(backend, allow):
    """Whatever its size: a namedtuple as a tuple, an enum as its value, a dict subclass as a dict,
    int keys as strings, a list subclass as a list, a dataclass under the allow list."""
    allow(f"airflow.* {__name__}.*")
    big = "x" * (2 * THRESHOLD)
    for value in (Named("a", big), [Size.BIG, big], collections.defaultdict(int, a=1, pad=big), {1: big},
                  Rows([big]), Point(1, big)):
        ref = push(value, **backend.where)
        assert xcom.is_reference(ref) and ref["format"] == "json", (value, ref)
        small = json.loads(json.dumps(X.serialize_value(_shrunk(value), **backend.where)))
        assert not xcom.is_reference(small)  # its small twin stays in Airflow's row
        got, expected = pull(ref), _as_airflow_has_it(value)
        assert type(got) is type(expected) and got == expected, (value, got, expected)
        assert type(pull(small)) is type(expected), value


def _shrunk(value):
    """``value`` with its padding cut to a character: under the threshold."""
    if isinstance(value, Named):
        return Named(value.name, "x")
    if isinstance(value, Point):
        return Point(value.x, "x")
    if isinstance(value, dict):
        return type(value)(*([value.default_factory] if isinstance(value, collections.defaultdict) else []),
                           {k: "x" if isinstance(v, str) else v for k, v in value.items()})
    return type(value)("x" if isinstance(v, str) else v for v in value)


def test_the_allow_list_bounds_what_a_stored_value_imports(backend, allow, tmp_path):
    """``[core] allowed_deserialization_classes`` (default ``airflow.*``), stored or inline: a
    dataclass stored as serde's JSON fails as Airflow's serde fails it; a pickled class outside
    it fails typed before anything is built; a pickle that would run a command runs nothing."""
    from asgard_airflow.errors import XComClassNotAllowedError

    allow("airflow.*")
    big = "x" * (2 * THRESHOLD)
    point = push(Point(1, big), **backend.where)
    with pytest.raises(ImportError, match=f"{__name__}.Point was not found in allow list"):
        pull(point)
    opaque = push(Opaque(big), **backend.where)
    assert opaque["format"] == "pickle"
    with pytest.raises(XComClassNotAllowedError, match=f"imports {__name__}.Opaque, which .* does not allow") as e:
        pull(opaque)
    assert isinstance(e.value, ImportError) and e.value.classname == f"{__name__}.Opaque"
    assert "AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES" in str(e.value)
    marker = tmp_path / "ran"
    shell = push([Shell(marker), big], **backend.where)
    with pytest.raises(XComClassNotAllowedError, match="imports posix.system"):
        pull(shell)
    assert not marker.exists()
    allow(f"airflow.* {__name__}.Point {__name__}.Opaque")
    assert pull(point) == Point(1, big) and pull(opaque) == Opaque(big)
    with pytest.raises(XComClassNotAllowedError):  # allowing classes allows no function
        pull(shell)
    assert not marker.exists()


@pytest.mark.parametrize("kind", [list, tuple])
def test_a_mapped_over_value_taken_whole_is_a_real_list_or_tuple(backend, kind):
    value = kind({"i": i, "pad": "p" * THRESHOLD} for i in range(12))
    ref = push(value, mapped_length=len(value), **backend.where)
    assert ref["items"] == 12 and ref["python_type"] == f"builtins.{kind.__name__}" and ref["format"] == "json"
    assert backend.store().list_paths(ref["scope"]) == sorted(f"{ref['path']}/{i}" for i in range(12))
    got = pull(ref)
    assert type(got) is kind and got == value
    if kind is list:  # what a StoredSequence refused
        assert got + [1] == list(value) + [1]
        got.append(1)
    json.dumps(got)


def test_a_mapped_instance_reads_only_its_element_through_airflows_expand_input(backend, monkeypatch):
    """Airflow 3.3 resolves a mapped instance's input by reading the whole row and indexing it; the
    backend hands its expand input a lazy sequence, and every other reader the list."""
    from airflow.sdk.definitions._internal.expandinput import DictOfListsExpandInput
    from airflow.sdk.definitions.xcom_arg import PlainXComArg

    value = [bytes([i]) * (2 * THRESHOLD) for i in range(6)]
    ref = push(value, mapped_length=6, **backend.where)
    reads = []
    real = xcom._fetch
    monkeypatch.setattr(xcom, "_fetch", lambda store, key: (reads.append(key.path), real(store, key))[1])
    upstream = SimpleNamespace(task_id="produce", is_mapped=False, get_closest_mapped_task_group=lambda: None)
    ti = SimpleNamespace(map_index=4, _upstream_map_indexes=None, xcom_pull=lambda **_: pull(ref))
    resolved, _ = DictOfListsExpandInput({"part": PlainXComArg(operator=upstream)}).resolve({"ti": ti})
    assert resolved == {"part": value[4]} and reads == [f"{ref['path']}/4"]
    reads.clear()
    assert pull(ref) == value and sorted(reads) == sorted(f"{ref['path']}/{i}" for i in range(6))


def test_contract_airflow_private_names_the_backend_uses():
    """Fails when Airflow renames or drops what the backend relies on."""
    from airflow.sdk.bases.xcom import BaseXCom
    from airflow.sdk.execution_time import task_runner

    # set() learns that downstream tasks map over the value from this private keyword
    assert "_mapped_length" in inspect.signature(BaseXCom.set).parameters
    assert "_mapped_length" in inspect.signature(BaseXCom.aset).parameters
    assert "_mapped_length=mapped_length" in inspect.getsource(task_runner._xcom_push)
    # a mapped instance's expand input resolves (and so deserializes) the whole row, then indexes it
    codes = xcom._expand_resolvers()
    assert len(codes) == 2
    from airflow.sdk.definitions._internal import expandinput

    source = inspect.getsource(expandinput.DictOfListsExpandInput)
    assert "v.resolve(context)" in source and "value[found_index]" in source


# --- placeholders, keys, pushes ----------------------------------------------------------------
def test_a_value_serialized_alone_is_stored_under_placeholder_names(backend):
    value = ["y" * (2 * THRESHOLD), (1, 2)]
    ref = json.loads(json.dumps(X.serialize_value(value)))
    assert (ref["scope"], ref["dag_id"], ref["run_id"], ref["task_id"], ref["key"]) == (
        "airflow/NO_DAG_ID/NO_RUN_ID", "NO_DAG_ID", "NO_RUN_ID", "NO_TASK_ID", "NO_KEY")
    assert re.fullmatch(r"NO_TASK_ID/-1/NO_KEY/[0-9a-f]{32}", ref["path"])
    assert pull(ref) == value
    assert "NO_DAG_ID/NO_RUN_ID" in backend.store().list_paths("airflow-runs")  # `asgard airflow purge` finds it
    # two such values are two objects
    assert json.loads(json.dumps(X.serialize_value(value)))["path"] != ref["path"]


@pytest.mark.parametrize("key", ["", None])
def test_an_empty_key_gets_airflows_value_error(key):
    from airflow.models.xcom import XComModel

    with pytest.raises(ValueError) as theirs:
        XComModel.set(key=key, value=1, dag_id="d", task_id="t", run_id="r")
    with pytest.raises(ValueError) as ours:
        X.set(key, 1, dag_id="d", task_id="t", run_id="r")
    assert str(ours.value) == str(theirs.value) == f"XCom key must be a non-empty string. Received: {key!r}"
    import asyncio

    with pytest.raises(ValueError, match="XCom key must be a non-empty string"):
        asyncio.run(X.aset(key, 1, dag_id="d", task_id="t", run_id="r"))


def test_each_push_is_a_new_object_and_purge_deletes_exactly_its_own(backend):
    first = push("a" * (2 * THRESHOLD), **backend.where)
    second = push("b" * (2 * THRESHOLD), **backend.where)
    listed = push([b"c" * THRESHOLD] * 3, mapped_length=3, **backend.where)
    assert len({first["path"], second["path"], listed["path"]}) == 3
    assert pull(first) == "a" * (2 * THRESHOLD) and pull(second) == "b" * (2 * THRESHOLD)  # the older row still reads
    X.purge(SimpleNamespace(value=first))
    with pytest.raises(xcom.XComValueMissingError, match="purged or deleted before its expiry"):
        pull(first)
    assert pull(second) == "b" * (2 * THRESHOLD)
    X.purge(SimpleNamespace(value=listed))
    assert backend.store().list_paths(first["scope"]) == [second["path"]]


def test_threshold_minus_one_never_offloads(backend):
    backend.configure(threshold_bytes=-1)
    value = {"big": "z" * (1 << 20), "t": (1, 2)}
    row = push(value, **backend.where)
    assert not xcom.is_reference(row) and pull(row) == value
    with pytest.raises(TypeError, match="Cannot serialize"):  # as Airflow's own table refuses bytes
        push(b"\x00" * 100, **backend.where)
    assert backend.store().list_paths(xcom.scope_for_run(backend.where["dag_id"], "manual__1")) == []
    assert f"{backend.where['dag_id']}/manual__1" not in backend.store().list_paths("airflow-runs")


def test_the_size_guard_refuses_before_anything_is_written(backend):
    backend.configure(max_object_bytes=64 * 1024)
    scope = xcom.scope_for_run(backend.where["dag_id"], "manual__1")
    value = [b"s" * 2048, b"s" * 2048, b"l" * (128 * 1024)]  # the last element is over the limit
    with pytest.raises(xcom.XComValueTooLargeError, match="over the store's limit of 65,536 bytes; nothing was written"):
        push(value, mapped_length=3, **backend.where)
    with pytest.raises(xcom.XComValueTooLargeError):
        push({"whole": "w" * (128 * 1024)}, **backend.where)
    assert backend.store().list_paths(scope) == []
    assert f"{backend.where['dag_id']}/manual__1" not in backend.store().list_paths("airflow-runs")


def test_signed_pickles_and_json(backend):
    backend.configure(signing_key="semantics-test-key-0123456789abcdef")
    for value, fmt in ((np.ones(4096), "pickle"), (["q" * (2 * THRESHOLD)], "json")):
        ref = push(value, **backend.where)
        assert ref["format"] == fmt and ref["signed"]
        assert backend.store().read_manifest(stored(backend, ref)).signature is not None
        assert np.array_equal(pull(ref), value) if fmt == "pickle" else pull(ref) == value


# --- fan-in -----------------------------------------------------------------------------------------
def _mapped_rows(backend, n, size):
    return [push(bytes([i]) * size, **backend.where, map_index=i) for i in range(n)]


def _in_flight(monkeypatch):
    """Instrument the store reads: the most at once, and every object read."""
    state = {"now": 0, "most": 0, "paths": []}
    lock, real = threading.Lock(), xcom._fetch

    def fetch(store, key):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            state["paths"].append(key.path)
        try:
            time.sleep(0.02)  # a server's round trip, so that overlapping reads overlap
            return real(store, key)
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(xcom, "_fetch", fetch)
    return state


def test_a_fan_in_reads_the_mapped_values_concurrently_and_bounded(backend, monkeypatch):
    rows = _mapped_rows(backend, 16, 64 * 1024)
    state = _in_flight(monkeypatch)
    got = [pull(row) for row in rows]  # what Airflow's lazy sequence does: one row at a time, in order
    assert got == [bytes([i]) * (64 * 1024) for i in range(16)]
    assert 2 <= state["most"] <= 8 + 1, state  # the read-ahead window, and the row being read
    assert sorted(state["paths"]) == sorted(r["path"] for r in rows)  # each object read once

    backend.configure(object_concurrency=1)  # one at a time: what the bench compares with
    state.update(most=0, paths=[])
    assert [pull(row) for row in rows] == got and state["most"] == 1


def test_a_single_mapped_read_reads_nothing_ahead_and_a_replaced_object_is_refused(backend, monkeypatch):
    rows = _mapped_rows(backend, 6, 4096)
    state = _in_flight(monkeypatch)
    assert pull(rows[3]) == bytes([3]) * 4096 and state["paths"] == [rows[3]["path"]]  # one instance, one read
    # an object read ahead is handed out only if it is the one its row records
    store = backend.store()
    store.put(stored(backend, rows[4]), b"forged")
    assert pull(rows[0]) and pull(rows[1]) and pull(rows[2]) and pull(rows[3])
    with pytest.raises(xcom.XComValueCorruptError, match="not the one Airflow's row recorded"):
        pull(rows[4])


def test_local_backend_through_the_xcom_class(monkeypatch, tmp_path):
    """``[asgard] backend = local``: objects under ``root``, read back through the class."""
    for name in [n for n in __import__("os").environ if n.startswith("AIRFLOW__ASGARD__")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AIRFLOW__ASGARD__BACKEND", "local")
    monkeypatch.setenv("AIRFLOW__ASGARD__ROOT", str(tmp_path / "objects"))
    monkeypatch.setenv("AIRFLOW__ASGARD__THRESHOLD_BYTES", "100")
    xcom.read_settings.cache_clear()
    try:
        ref = push(np.arange(50_000), dag_id="d", run_id="r", task_id="t", key="k", map_index=-1)
        assert ref["backend"] == "local" and ref["uri"].startswith(f"file://{tmp_path / 'objects'}"), ref["uri"]
        assert np.array_equal(pull(ref), np.arange(50_000))
        X.purge(SimpleNamespace(value=ref))
        with pytest.raises(xcom.XComValueMissingError):
            pull(ref)
    finally:
        xcom.read_settings.cache_clear()


# --- through real Airflow runs ---------------------------------------------------------------------
def test_list_and_tuple_mapped_over_keep_their_types_in_a_dag_run(airflow_home, store):
    rc, out, run_id = dags_test(airflow_home, "asgard_types")
    assert rc == 0 and "ASGARD-CHECK types ok" in out and "ASGARD-CHECK stored kinds ok" in out, out[-5000:]
    assert out.count("ASGARD-CHECK use_dict ok") == 3 and out.count("ASGARD-CHECK use_pair ok") == 3
    rows = xcom_rows(airflow_home, "asgard_types", run_id)
    listed, pairs = (_reference(rows[(t, -1, "return_value")]) for t in ("make_list", "make_tuple"))
    assert (listed["items"], listed["python_type"], listed["format"]) == (3, "builtins.list", "json")
    assert (pairs["items"], pairs["python_type"], pairs["format"]) == (3, "builtins.tuple", "json")
    element = store.open_stream(ObjectKey(pairs["scope"], pairs["path"] + "/1"))[0].read()  # as any JSON reader sees it
    assert json.loads(element)["__data__"][:2] == ["pair", 1]


def test_airflow_tasks_clear_purges_the_cleared_tasks_values(airflow_home, store):
    """``airflow tasks clear``, then the cleared task runs again: Airflow deletes its old XComs
    through the backend's purge before it runs, and the new value is a new object."""
    env = airflow_home["env"]
    rc, out, run_id = dags_test(airflow_home, "asgard_big_small")
    assert rc == 0, out[-5000:]
    old = _reference(xcom_rows(airflow_home, "asgard_big_small", run_id)[("produce_big", -1, "return_value")])
    scope = old["scope"]
    assert old["path"] in store.list_paths(scope)
    cleared = subprocess.run([str(BIN / "airflow"), "tasks", "clear", "asgard_big_small", "-t", "^produce_big$", "-y"],
                             env=env, capture_output=True, text=True, timeout=300)
    assert cleared.returncode == 0, cleared.stdout[-3000:] + cleared.stderr[-3000:]
    assert old["path"] in store.list_paths(scope)  # clearing resets the state; the purge comes with the rerun
    rerun = subprocess.run([str(BIN / "airflow"), "tasks", "test", "asgard_big_small", "produce_big", run_id],
                           env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    paths = store.list_paths(scope)
    assert old["path"] not in paths, paths  # purged: exactly the cleared task's object
    new = [p for p in paths if p.startswith("produce_big/-1/return_value/")]
    assert len(new) == 1 and new[0] != old["path"], paths
