"""Drop this file into your Airflow dags folder: the paper's three applications as DAGs
(asgard_video_analytics, asgard_lightgbm_forest, asgard_word_count) and the retune DAG that keeps
Cassandra fit for their upcoming runs (asgard_retune_cassandra). Needs the XCom backend:
AIRFLOW__CORE__XCOM_BACKEND=asgard_airflow.CassandraXComBackend.
"""
from asgard.pipelines.airflow_apps import APPS, make_app_dag
from asgard_airflow.retune import make_retune_dag

apps = [make_app_dag(app) for app in APPS]
for _dag in apps:
    globals()[_dag.dag_id] = _dag
asgard_retune_cassandra = make_retune_dag(apps)
