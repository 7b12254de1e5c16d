"""What a stored XCom pickle may import (asgard_airflow/allowed_classes.py): every data value the
pipelines pass (numpy, pandas, Arrow, the standard library's) loads under Airflow's default allow
list, and what would read or write files or run code is refused before it is called."""
from __future__ import annotations

import collections
import datetime
import decimal
import os
import uuid
import zoneinfo

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from asgard.resources.stores.errors import DisallowedGlobalError
from asgard.resources.stores.serde import AlignedPickleSerializer
from asgard_airflow.allowed_classes import allowed_global

pytestmark = pytest.mark.fast

PARIS = zoneinfo.ZoneInfo("Europe/Paris")
VALUES = {
    "array": np.arange(10.0), "objects": np.array(["a", None], dtype=object), "times": np.array(["2026-01-01"], "M8[ns]"),
    "scalar": np.float32(1), "masked": np.ma.masked_array([1, 2], mask=[0, 1]),
    "structured": np.zeros(3, dtype=[("a", "i4"), ("b", "f8")]),
    "frame": pd.DataFrame({"i": [1, 2], "s": ["x", "y"], "t": pd.to_datetime(["2026", "2027"]),
                           "tz": pd.to_datetime(["2026", "2027"]).tz_localize(PARIS), "c": pd.Categorical(["u", "v"]),
                           "p": pd.period_range("2026", periods=2, freq="M"),
                           "iv": pd.arrays.IntervalArray.from_breaks([0, 1, 2]), "n": pd.array([1, None], "Int64"),
                           "td": pd.to_timedelta([1, 2], unit="s"), "sp": pd.arrays.SparseArray([0, 1]),
                           "arrow": pd.array(["x", "y"], dtype="string[pyarrow]"), "b": pd.array([True, None], "boolean")}),
    "multi_index": pd.DataFrame({"a": [1, 2]}, index=pd.MultiIndex.from_tuples([(1, "a"), (2, "b")])),
    "series": pd.Series([1.0, 2.0], name="s"), "stamp": pd.Timestamp("2026-01-01", tz=PARIS), "nat": pd.NaT,
    "na": pd.NA, "offset": pd.offsets.Day(2), "days": pd.date_range("2026", periods=3, tz="UTC"),
    "table": pa.table({"i": [1, 2], "s": ["x", "y"], "l": [[1], [2, 3]], "st": [{"x": 1}, {"x": 2}],
                       "d": pa.array(["a", "b"]).dictionary_encode(), "ts": pa.array([1, 2], pa.timestamp("ms", "UTC")),
                       "dec": pa.array([decimal.Decimal("1.1"), None], pa.decimal128(5, 2)),
                       "m": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64())), "bin": [b"x", b"y"],
                       "date": pa.array([datetime.date(2026, 1, 1), None]), "dur": pa.array([1, 2], pa.duration("s"))}),
    "batch": pa.record_batch({"a": [1]}), "chunked": pa.chunked_array([[1, 2], [3]]), "schema": pa.schema([("a", pa.int32())]),
    "buffer": pa.py_buffer(b"abc"), "arrow_scalar": pa.scalar(1),
    "stdlib": [b"x", bytearray(b"y"), complex(1, 2), {1, 2}, frozenset([3]), range(3), slice(1, 2),
               datetime.datetime(2026, 1, 1, tzinfo=PARIS), datetime.timedelta(1), decimal.Decimal("1.1"),
               collections.OrderedDict(a=1), collections.defaultdict(list, a=[1]), collections.deque([1]),
               uuid.UUID(int=1), float("nan")],
}


def _roundtrip(value):
    frames = [memoryview(bytes(f)) for f in AlignedPickleSerializer().dumps(value)]
    return AlignedPickleSerializer().loads(frames, allowed_global)


@pytest.mark.parametrize("name", list(VALUES))
def test_data_values_load_under_the_default_allow_list(name):
    value = VALUES[name]
    got = _roundtrip(value)
    assert type(got) is type(value)
    if isinstance(value, (pd.DataFrame, pd.Series, pa.Table, pa.RecordBatch, pa.ChunkedArray, pa.Schema)):
        assert got.equals(value)


class Runs:
    def __init__(self, call, *args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


@pytest.mark.parametrize("call,args", [
    (os.system, ("true",)), (eval, ("1",)), (getattr, (pd.DataFrame, "to_pickle")), (getattr, (np.ndarray, "tofile")),
    (pd.read_pickle, ("/dev/null",)), (np.load, ("/dev/null",)), (pa.OSFile, ("/dev/null",)),
    (pa.memory_map, ("/dev/null",)), (np.memmap, ("/dev/null",)), (pd.read_csv, ("/dev/null",)),
], ids=lambda x: getattr(x, "__name__", None) if callable(x) else None)
def test_what_reads_files_or_runs_code_is_refused_before_it_is_called(call, args):
    with pytest.raises(DisallowedGlobalError) as refused:
        _roundtrip(Runs(call, *args))
    assert refused.value.classname.endswith(args[-1] if call is getattr else call.__name__)
