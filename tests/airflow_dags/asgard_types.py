"""A list and a tuple that downstream tasks ``.expand()`` over, stored element by element (as
JSON): each mapped instance gets its element, and a task taking both whole gets a real list and
a real tuple, as the tasks returned them (tests/test_airflow_xcom_semantics.py). Over the
threshold too, a namedtuple and an enum come back as Airflow's serde brings them back inline (a
tuple, the value), and a data frame with zoned timestamps, pickled, loads under Airflow's default
``allowed_deserialization_classes``."""
from __future__ import annotations

import collections
import enum
import json

import pendulum
from airflow.sdk import dag, task

PAD = 40 * 1024  # 3 x 40 KiB: over the tests' 64 KiB threshold


@dag(dag_id="asgard_types", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False)
def asgard_types():
    @task(multiple_outputs=False)
    def make_list():
        return [{"i": i, "pad": "d" * PAD} for i in range(3)]

    @task
    def make_tuple():
        return tuple(("pair", i, "t" * PAD) for i in range(3))

    @task
    def use_dict(item) -> int:
        assert type(item) is dict and len(item["pad"]) == PAD, type(item)
        print("ASGARD-CHECK use_dict ok")
        return item["i"]

    @task
    def use_pair(pair) -> int:
        assert type(pair) is tuple and pair[0] == "pair", type(pair)
        print("ASGARD-CHECK use_pair ok")
        return pair[1]

    @task
    def whole(items, pairs) -> int:
        assert type(items) is list and type(pairs) is tuple, (type(items), type(pairs))
        assert [d["i"] for d in items + [{"i": 3}]] == [0, 1, 2, 3]
        items.append({"i": 4})
        assert json.loads(json.dumps(items))[-1] == {"i": 4}
        assert pairs + (("pair", 3),) == tuple(("pair", i, "t" * PAD) for i in range(3)) + (("pair", 3),)
        print("ASGARD-CHECK types ok")
        return len(items)

    @task
    def make_kinds():
        Named = collections.namedtuple("Named", "name pad")
        Size = enum.StrEnum("Size", {"BIG": "b" * 2 * PAD})
        return {"named": Named("named", "n" * 2 * PAD), "size": Size.BIG}

    @task
    def make_frame():
        import numpy as np
        import pandas as pd

        # random values: over the threshold in any form (Airflow's would be its Parquet, in hex)
        return pd.DataFrame({"t": pd.date_range("2026-01-01", periods=8192, freq="h", tz="Europe/Paris"),
                             "v": np.random.default_rng(0).random(8192)})

    @task
    def use_kinds(kinds, frame):
        named = kinds["named"]
        assert type(named) is tuple and named[0] == "named" and kinds["size"] == "b" * 2 * PAD, type(named)
        assert str(frame["t"].dt.tz) == "Europe/Paris" and len(frame) == 8192, frame.dtypes
        print("ASGARD-CHECK stored kinds ok")

    use_kinds(make_kinds(), make_frame())
    items, pairs = make_list(), make_tuple()
    use_dict.expand(item=items)
    use_pair.expand(pair=pairs)
    whole(items, pairs)


asgard_types()
