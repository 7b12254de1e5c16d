"""The applications and the retune DAG as the tests run them (word count with 2 reducers), plus a
watched DAG on a 10-minute timetable and a probe that reports the upcoming runs. The retune and
the probe watch the paper's three applications (the columnar ETL is here to be run, not watched)."""
from __future__ import annotations

import json

import pendulum
from airflow.sdk import dag, task

from asgard.pipelines.airflow_apps import APPS, dag_id_for, make_app_dag
from asgard_airflow.retune import make_retune_dag

apps = [make_app_dag(app, reducers=2) for app in APPS]
for _dag in apps:
    globals()[_dag.dag_id] = _dag


@dag(dag_id="asgard_every_10", schedule="*/10 * * * *", start_date=pendulum.datetime(2026, 1, 1), catchup=False)
def asgard_every_10():
    @task
    def tick() -> int:
        return 1

    tick()


every_10 = asgard_every_10()
SEED_APPS = ("video_analytics", "lightgbm_forest", "word_count")
seed_apps = [d for d in apps if d.dag_id in {dag_id_for(a) for a in SEED_APPS}]
watched = seed_apps + [every_10]
# no schedule: only the tests run it, as dry runs; a scheduler in a test never reconfigures the shared node
retune = make_retune_dag(watched, dag_id="asgard_retune_test", schedule=None)


@dag(dag_id="asgard_upcoming_probe", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False)
def asgard_upcoming_probe():
    @task(multiple_outputs=False)
    def probe() -> dict:
        from asgard_airflow.upcoming import TaskReader, upcoming_runs

        mix = upcoming_runs(watched, TaskReader(), window=pendulum.duration(minutes=30))
        history = TaskReader().history(seed_apps[2])
        print("ASGARD-UPCOMING " + json.dumps(mix.as_dict(), sort_keys=True))
        print("ASGARD-HISTORY " + json.dumps({"run_id": history["run_id"], "durations": len(history["durations"]),
                                               "rows": len(history["rows"])}))
        return mix.as_dict()

    probe()


asgard_upcoming_probe()
