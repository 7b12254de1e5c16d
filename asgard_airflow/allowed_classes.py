"""What a stored pickle may import when a task reads an XCom value: Airflow's own rule for
deserialization, ``[core] allowed_deserialization_classes`` (and ``_regexp``, and classes registered
with ``airflow.sdk.serde.allow_class``), as its serde applies it to a JSON value's classes, plus the
built-in and data-library types that a pickle of plain data, arrays, frames and Arrow tables names.

Values Airflow's serde carries are stored as JSON and read back through serde itself; a pickle
holds what serde refuses (bytes, arrays, data frames, objects without a serializer). A class
outside both lists fails the read with :class:`~asgard_airflow.errors.XComClassNotAllowedError`
(an ``ImportError``, as serde's own) before anything is built from it.
"""
from __future__ import annotations

import functools
import importlib
import types
from typing import Any

#: built-in and standard-library names a pickle of plain data uses (never eval, exec, system, ...;
#: builtins.getattr, which pickles name a class's method with, the unpickler answers itself)
SAFE_GLOBALS = frozenset(
    [("builtins", n) for n in ("bytes", "bytearray", "complex", "frozenset", "set", "list", "dict", "tuple",
                               "slice", "range", "int", "float", "str", "bool", "object")]
    + [("copyreg", "_reconstructor"), ("collections", "OrderedDict"), ("collections", "defaultdict"),
       ("collections", "deque"), ("collections", "Counter"), ("decimal", "Decimal"), ("fractions", "Fraction"),
       ("uuid", "UUID"), ("zoneinfo", "ZoneInfo._unpickle"), ("zoneinfo._zoneinfo", "ZoneInfo._unpickle")]
    + [("datetime", n) for n in ("datetime", "date", "time", "timedelta", "timezone")])
#: where the data libraries' value types live (a class of theirs is allowed if defined in one, or
#: in ``pandas`` itself: pandas names its public classes' module so)
DATA_MODULES = ("numpy", "pandas.core.frame", "pandas.core.series", "pandas.core.generic", "pandas.core.indexes",
                "pandas.core.arrays", "pandas.core.dtypes", "pandas.core.internals", "pandas.core.sparse",
                "pandas._libs.internals", "pandas._libs.arrays", "pandas._libs.tslibs", "pandas._libs.interval",
                "pandas._libs.sparse", "pandas._libs.missing", "pandas._libs.lib", "pandas.arrays", "pyarrow.lib")
#: their modules that read or write files, run expressions or load code: never from a stored value
UNSAFE_MODULES = ("numpy.lib._npyio", "numpy.lib.npyio", "numpy.lib._datasource", "numpy.f2py", "numpy.testing",
                  "numpy.ctypeslib", "numpy.distutils", "numpy._core.memmap", "numpy.core.memmap")
#: the functions those pickles rebuild values with, by name prefix (numpy's _reconstruct, pandas's
#: _unpickle_block and _new_Index, pyarrow's _restore_array, Cython's __pyx_unpickle_*) or suffix
#: (pandas's _nat_unpickle)
RECONSTRUCTORS = ("_reconstruct", "_frombuffer", "_unpickle", "__pyx_unpickle", "_new_", "_restore", "_mareconstruct")
#: numpy's scalar rebuilder, and pyarrow's type and container factories its pickles call
FACTORIES = frozenset(("scalar", "type_for_alias", "py_buffer", "schema", "field", "chunked_array", "array", "table",
                       "record_batch", "list_", "large_list", "list_view", "large_list_view", "fixed_size_list",
                       "struct", "map_", "dictionary", "timestamp", "time32", "time64", "date32", "date64",
                       "duration", "month_day_nano_interval", "decimal32", "decimal64", "decimal128", "decimal256",
                       "binary", "large_binary", "string", "large_string", "binary_view", "string_view",
                       "fixed_size_binary", "run_end_encoded", "union", "sparse_union", "dense_union"))


def _resolve(module: str, name: str) -> Any:
    """What pickle's ``find_class`` would import, without calling anything (None if absent)."""
    try:
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj
    except (ImportError, AttributeError):
        return None


@functools.cache
def _data_library_value(module: str, name: str) -> bool:
    """A numpy, pandas or pyarrow value type, or a function their pickles rebuild values with."""
    if not module.startswith(("numpy", "pandas", "pyarrow")):
        return False
    obj = _resolve(module, name)
    home = getattr(obj, "__module__", None) or ""
    if obj is None or not (home == "pandas" or home.startswith(DATA_MODULES)) or home.startswith(UNSAFE_MODULES):
        return False
    if isinstance(obj, type):
        return _value_class(obj, home)
    if not callable(obj):  # a constant (pandas.NA): a value, never called
        return not isinstance(obj, types.ModuleType)
    last = name.rsplit(".", 1)[-1]
    return last.startswith(RECONSTRUCTORS) or last.endswith("_unpickle") or name in FACTORIES


def _value_class(cls: type, home: str) -> bool:
    # numpy's and pyarrow's modules also define files, memory maps and streams (np.memmap, pa.OSFile
    # open a path): of theirs, only arrays, dtypes, scalars, types, schemas, tables and buffers
    if home.startswith("numpy"):
        import numpy as np

        return issubclass(cls, (np.ndarray, np.dtype, np.generic)) and not issubclass(cls, np.memmap)
    if home.startswith("pyarrow"):
        import pyarrow as pa

        return issubclass(cls, (pa.DataType, pa.Field, pa.Schema, pa.Array, pa.ChunkedArray, pa.Table,
                                pa.RecordBatch, pa.Scalar, pa.Buffer))
    import pandas as pd

    # pandas names its public classes' module "pandas"; of those, only frames, indexes and their values
    return home != "pandas" or issubclass(cls, (pd.core.generic.NDFrame, pd.Index, pd.api.extensions.ExtensionArray,
                                                pd.api.extensions.ExtensionDtype, pd.Timestamp, pd.Timedelta,
                                                pd.Period, pd.Interval, pd.offsets.BaseOffset))


def airflow_allows(classname: str) -> bool:
    """Airflow's own check of a class name (serde's ``_match`` and ``allow_class`` registry)."""
    from airflow.sdk.serde import _extra_allowed, _match  # private: tests/test_orchestrator_contract.py

    return _match(classname) or classname in _extra_allowed


def allowed_global(module: str, name: str) -> bool:
    """Whether a stored XCom pickle may import ``module.name``."""
    return ((module, name) in SAFE_GLOBALS or _data_library_value(module, name)
            or airflow_allows(f"{module}.{name}"))
