"""The paper's applications as Airflow DAGs, over the same code as the Dagster jobs: each task
calls the very op function of :mod:`asgard.pipelines` (a Dagster op invoked directly, with a
bare op context for its log lines), and every value between tasks goes through the XCom
backend (large ones to Cassandra, a reference in Airflow's table). Tasks returning a dict say
``multiple_outputs=False`` (Airflow would infer True from ``-> dict`` and store every key besides
the whole dict), and an op's named outputs are pushed one key each (:func:`push_outputs`).

* ``video_analytics`` (scatter): ``split_video`` -> ``extract_frame.expand`` -> ``classify.expand``
  -> ``collect`` -> ``summarize``;
* ``lightgbm_forest`` (broadcast): ``prepare_digits`` -> ``pca`` -> ``train_booster.partial(pca_train)
  .expand(seed=trainer_seeds)`` -> ``combine_forest`` -> ``evaluate``;
* ``word_count`` (shuffle): ``split_corpus`` -> ``map_words.expand`` (one XCom key per bucket) ->
  ``reduce_bucket_<j>`` (one task per bucket, reading its key of every mapper) -> ``merge_counts``;
* ``etl_columnar`` (scatter, broadcast, fan-in of Arrow tables): ``generate`` (the orders'
  partitions as its value, the customers under the key ``customers``) -> ``filter_orders.expand``
  -> ``join_customers.partial(customers).expand`` -> ``aggregate.expand`` -> ``merge_aggregates``;
  its param ``tables = "pandas"`` passes DataFrames instead, for an XCom backend on Airflow's
  serde (common-io's), which has no Arrow serializer.
* ``log_analytics`` (scatter of CSV text, then Arrow tables): ``land_logs`` -> ``parse_logs.expand`` ->
  ``traffic_by_path.expand`` -> ``merge_traffic``; with ``tables = "pandas"`` the log files travel as
  ``str`` (Airflow's serde has no ``bytes``) and the tables as DataFrames.

The fan-out and data size are the DAG's params (``fanout``, ``scale``; word count's reducers are
fixed when the DAG is made, as Airflow's task list is):

    from asgard.pipelines.airflow_apps import make_app_dag
    dag = make_app_dag("word_count", reducers=2)     # dag_id asgard_word_count
    # airflow dags test asgard_word_count -c '{"fanout": 3, "scale": 0.25}'
"""
from __future__ import annotations

import inspect
from typing import Any

from airflow.sdk import DAG, Param, task

APPS = ("video_analytics", "lightgbm_forest", "word_count", "etl_columnar", "log_analytics")
#: the apps whose tables may travel as pandas DataFrames (the ``tables`` param)
TABLE_APPS = ("etl_columnar", "log_analytics")
#: the op whose output is the app's result (as in asgard.pipelines.jobs)
FINAL_TASK = {"video_analytics": "summarize", "lightgbm_forest": "evaluate", "word_count": "merge_counts",
              "etl_columnar": "merge_aggregates", "log_analytics": "merge_traffic"}
DEFAULTS = {"video_analytics": {"fanout": 6, "scale": 1.0}, "lightgbm_forest": {"fanout": 6, "scale": 20},
            "word_count": {"fanout": 4, "scale": 1.0}, "etl_columnar": {"fanout": 4, "scale": 1.0},
            "log_analytics": {"fanout": 4, "scale": 1.0}}


def dag_id_for(app: str) -> str:
    return f"asgard_{app}"


def _task(**kwargs):
    """Airflow's ``@task``, its return value not logged: Airflow logs a task's return value whole
    by default, and the repr of a log partition (128 MiB of CSV) held a task on the hosts' workers
    in its supervisor for minutes (the log line, not the XCom)."""
    return task(show_return_value_in_logs=False, **kwargs)


def call_op(op_def, *args, **kwargs) -> Any:
    """Run a Dagster op's function as a plain call: the value, or ``{output name or mapping key:
    value}`` for an op that yields several (a generator op)."""
    import dagster as dg

    params = inspect.signature(op_def.compute_fn.decorated_fn).parameters
    if "context" in params:
        args = (dg.build_op_context(),) + args
    result = op_def(*args, **kwargs)
    if not inspect.isgenerator(result):
        return result
    out = {}
    for item in result:
        out[getattr(item, "mapping_key", None) or item.output_name] = item.value
    return out


class _Pipeline:
    """A module of :mod:`asgard.pipelines`, imported by the first task that reads one of its ops:
    a parse of the DAG file (the dag processor's, every 30 s by default) then imports no Dagster,
    about 1.3 of its 4.6 s here."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        import importlib

        if attr.startswith("__"):  # copy's and pickle's probes: no import for them
            raise AttributeError(attr)
        return getattr(importlib.import_module(f"asgard.pipelines.{self._name}"), attr)


def push_outputs(outputs: dict) -> None:
    """Push each of an op's named outputs as its own XCom key (``task["key"]`` downstream), and
    nothing else: ``multiple_outputs=True`` would store the whole dict again as ``return_value``."""
    from airflow.sdk import get_current_context

    ti = get_current_context()["ti"]
    for key, value in outputs.items():
        ti.xcom_push(key, value)


def _video(dag: DAG) -> None:
    va = _Pipeline("video_analytics")

    @_task()
    def split_video(params=None) -> list:
        chunks = call_op(va.split_video, config=va.VideoConfig(fanout=int(params["fanout"]),
                                                                scale=float(params["scale"])))
        return [chunks[k] for k in sorted(chunks)]  # one list element per chunk: each mapped task reads its own

    @_task(multiple_outputs=False)
    def extract_frame(chunk: dict) -> dict:
        return call_op(va.extract_frame, chunk)

    @_task(multiple_outputs=False)
    def classify(frame: dict) -> dict:
        return call_op(va.classify, frame)

    @_task(multiple_outputs=False)
    def collect(classifications) -> dict:
        return call_op(va.collect, list(classifications))

    @_task(multiple_outputs=False)
    def summarize(collected: dict) -> dict:
        return call_op(va.summarize, collected)

    summarize(collect(classify.expand(frame=extract_frame.expand(chunk=split_video()))))


def _forest(dag: DAG) -> None:
    lf = _Pipeline("lightgbm_forest")

    @_task()
    def prepare_digits(params=None) -> None:
        out = call_op(lf.prepare_digits, config=lf.ForestConfig(fanout=int(params["fanout"]),
                                                                 scale=float(params["scale"])))
        seeds = [out[k] for k in sorted(k for k in out if k.startswith("trainer_"))]
        push_outputs({"train": out["train"], "test": out["test"], "seeds": seeds})

    @_task()
    def pca(train: dict) -> None:
        push_outputs(call_op(lf.pca, train))

    @_task(multiple_outputs=False)
    def train_booster(seed: dict, pca_train: dict) -> dict:
        return call_op(lf.train_booster, seed, pca_train)

    @_task()
    def trainer_seeds(seeds: list) -> list:
        return list(seeds)  # Airflow maps over a task's return value only, not over one of its keys

    @_task(multiple_outputs=False)
    def combine_forest(models) -> dict:
        return call_op(lf.combine_forest, list(models))

    @_task(multiple_outputs=False)
    def evaluate(forest: dict, pca_model: dict, test: dict) -> dict:
        return call_op(lf.evaluate, forest, pca_model, test)

    prepared = prepare_digits()
    fitted = pca(prepared["train"])
    models = train_booster.partial(pca_train=fitted["pca_train"]).expand(seed=trainer_seeds(prepared["seeds"]))
    evaluate(combine_forest(models), fitted["pca_model"], prepared["test"])


def _word_count(dag: DAG, reducers: int) -> None:
    wc = _Pipeline("word_count")

    @_task()
    def split_corpus(params=None) -> list:
        splits = call_op(wc.split_corpus, config=wc.WordCountConfig(
            fanout=int(params["fanout"]), reducers=reducers, scale=float(params["scale"])))
        return [splits[k] for k in sorted(splits)]

    @_task()
    def map_words(split: dict) -> None:
        push_outputs(call_op(wc.map_words, split))  # part_0 ... part_<r-1>: one XCom key per bucket

    @_task(multiple_outputs=False)
    def merge_counts(reduced: list) -> dict:
        return call_op(wc.merge_counts, list(reduced))

    parts = map_words.expand(split=split_corpus())
    reduced = []
    for j in range(reducers):
        @_task(task_id=f"reduce_bucket_{j}", multiple_outputs=False)
        def reduce_bucket(partitions) -> dict:
            return call_op(wc.reduce_bucket, list(partitions))

        reduced.append(reduce_bucket(parts[f"part_{j}"]))
    merge_counts(reduced)


def _carried(value: Any, params: dict | None) -> Any:
    """A task's tables as the run's ``tables`` param says they travel: Arrow, or pandas DataFrames
    (Airflow's serde has no Arrow serializer: a stock backend carries DataFrames, as parquet in JSON),
    and its files as bytes, or then str (nor has it one for bytes)."""
    if (params or {}).get("tables") != "pandas":
        return value
    import pyarrow as pa

    if isinstance(value, list):
        return [_carried(v, params) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    return value.to_pandas() if isinstance(value, pa.Table) else value


def _arrow(value: Any) -> Any:
    """A value read from XCom as the ops take it: Arrow tables (DataFrames converted back)."""
    import pandas as pd
    import pyarrow as pa

    if isinstance(value, list):
        return [_arrow(v) for v in value]
    return pa.Table.from_pandas(value, preserve_index=False) if isinstance(value, pd.DataFrame) else value


def _file_bytes(value: Any) -> Any:
    """A file read from XCom as the ops take it: bytes (text carried as ``str`` encoded back)."""
    return value.encode() if isinstance(value, str) else value


def _etl(dag: DAG) -> None:
    etl = _Pipeline("etl_columnar")

    @_task()
    def generate(params=None) -> list:
        out = call_op(etl.generate, config=etl.EtlConfig(fanout=int(params["fanout"]), scale=float(params["scale"])))
        push_outputs({"customers": _carried(out.pop("customers"), params)})
        return [_carried(out[k], params) for k in sorted(out)]  # one element per partition: each mapped task reads its own

    @_task(multiple_outputs=False)
    def filter_orders(orders, params=None):
        return _carried(call_op(etl.filter_orders, _arrow(orders)), params)

    @_task(multiple_outputs=False)
    def join_customers(orders, customers, params=None):
        return _carried(call_op(etl.join_customers, _arrow(orders), _arrow(customers)), params)

    @_task(multiple_outputs=False)
    def aggregate(joined, params=None):
        return _carried(call_op(etl.aggregate, _arrow(joined)), params)

    @_task(multiple_outputs=False)
    def merge_aggregates(parts) -> dict:
        return call_op(etl.merge_aggregates, _arrow(list(parts)))

    generated = generate()
    filtered = filter_orders.expand(orders=generated)
    joined = join_customers.partial(customers=generated["customers"]).expand(orders=filtered)
    merge_aggregates(aggregate.expand(joined=joined))


def _logs(dag: DAG) -> None:
    la = _Pipeline("log_analytics")

    @_task()
    def land_logs(params=None) -> list:
        out = call_op(la.land_logs, config=la.LogConfig(fanout=int(params["fanout"]), scale=float(params["scale"])))
        return [_carried(out[k], params) for k in sorted(out)]  # one element per partition

    @_task(multiple_outputs=False)
    def parse_logs(raw, params=None):
        return _carried(call_op(la.parse_logs, _file_bytes(raw)), params)

    @_task(multiple_outputs=False)
    def traffic_by_path(logs, params=None):
        return _carried(call_op(la.traffic_by_path, _arrow(logs)), params)

    @_task(multiple_outputs=False)
    def merge_traffic(parts) -> dict:
        return call_op(la.merge_traffic, _arrow(list(parts)))

    merge_traffic(traffic_by_path.expand(logs=parse_logs.expand(raw=land_logs())))


def make_app_dag(app: str, reducers: int = 4, schedule: Any = None, dag_id: str | None = None, **dag_kwargs) -> DAG:
    """The DAG of ``app`` (``dag_id`` ``asgard_<app>``); ``fanout``/``scale`` are its params."""
    import pendulum

    if app not in APPS:
        raise KeyError(f"unknown app {app!r}; known: {', '.join(APPS)}")
    if app == "word_count" and not 1 <= reducers <= 8:
        raise ValueError(f"word_count needs 1 <= reducers <= 8 (the pipeline's MAX_REDUCERS), got {reducers}")
    defaults = DEFAULTS[app]
    params = {"fanout": Param(defaults["fanout"], type="integer", minimum=1, description="the fan-out degree"),
              "scale": Param(defaults["scale"], type="number", exclusiveMinimum=0, description="the data size")}
    if app in TABLE_APPS:
        params["tables"] = Param("arrow", enum=["arrow", "pandas"], description="how tables travel between tasks: "
                                 "Arrow (the project's XCom backend) or pandas DataFrames (what Airflow's serde, and "
                                 "so a stock XCom backend, carries)")
    dag_kwargs.setdefault("start_date", pendulum.datetime(2026, 1, 1, tz="UTC"))
    dag_kwargs.setdefault("catchup", False)
    with DAG(dag_id or dag_id_for(app), schedule=schedule, params=params, tags=["asgard", app],
             doc_md=(__doc__ or "").split("\n\n")[1], **dag_kwargs) as dag:
        if app == "video_analytics":
            _video(dag)
        elif app == "lightgbm_forest":
            _forest(dag)
        elif app == "etl_columnar":
            _etl(dag)
        elif app == "log_analytics":
            _logs(dag)
        else:
            _word_count(dag, reducers)
    return dag
