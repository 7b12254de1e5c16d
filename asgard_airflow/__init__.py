"""asgard for Airflow 3: an XCom backend that keeps large task results in the asgard store
(Cassandra; Redis, S3 or a local directory through the same class), and ``asgard airflow purge``.

    [core]
    xcom_backend = asgard_airflow.CassandraXComBackend

Settings and layout: :mod:`asgard_airflow.xcom`. Airflow is imported only when the backend is
(``import asgard_airflow`` alone does not need it).
"""
from __future__ import annotations

__all__ = ["CassandraXComBackend"]


def __getattr__(name: str):
    if name == "CassandraXComBackend":
        from .xcom import CassandraXComBackend

        return CassandraXComBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
