"""The XCom backend's ``[asgard]`` settings: the client's declarations
(:mod:`asgard.resources.stores.settings`) read from Airflow's configuration and a connection.

Every setting of the chosen backend and every storage setting is an ``[asgard]`` option
(``AIRFLOW__ASGARD__<NAME>``); a secret one (``username``, ``password``, ``signing_key``, the AWS
keys) comes from the environment or the connection ``conn_id`` (login, password, extra), never from
``airflow.cfg``. Read once per process, as common-io's backend reads its own: a task reads them at
every push and pull; ``read_settings.cache_clear()`` reads them again.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace

from asgard.resources.stores.base import ObjectStore
from asgard.resources.stores.errors import StoreConfigError
from asgard.resources.stores.registry import BACKENDS, shared_store
from asgard.resources.stores.settings import BACKEND_SETTINGS, STORAGE, Setting

from .errors import XComBackendConfigError

SECTION = "asgard"
#: the backend's own settings, beside the store's
THRESHOLD = Setting("threshold_bytes", "int", 64 * 1024,
                    "Values up to this many bytes (as Airflow's JSON) stay in Airflow's own table; -1: every value.")
OBJECT_CONCURRENCY = Setting("object_concurrency", "int", 8,
                             "Objects (list elements, a fan-in's values) read or written at once per task.")
#: where a connection's host goes, per backend
_HOST_SETTING = {"cassandra": "contact_points", "redis": "host", "s3": "endpoint_url", "local": "root"}
#: a connection's login and password, as each backend names them
_LOGIN = {"s3": ("aws_access_key_id", "aws_secret_access_key")}


@dataclass(frozen=True)
class Settings:
    backend: str
    threshold_bytes: int
    object_concurrency: int
    store_options: tuple  # sorted (name, value) pairs: the backend's and the storage settings
    secrets: tuple  # sorted (name, value) pairs; never logged

    def store_kwargs(self) -> dict:
        kwargs = {name: list(value) if isinstance(value, tuple) else value for name, value in self.store_options}
        kwargs.update(dict(self.secrets))
        chunk = kwargs.pop("chunk_size_bytes", 0)
        if chunk:
            kwargs["chunk_size"] = chunk
        return kwargs

    def option(self, name: str):
        """A setting's value: as configured, else its declared default."""
        given = dict(self.store_options)
        if name in given:
            return given[name]
        group = BACKEND_SETTINGS[self.backend]
        return (group[name] if name in group else STORAGE[name]).default


def _text(conf, name: str) -> str | None:
    value = conf.get(SECTION, name, fallback=None)
    value = value.strip() if isinstance(value, str) else value
    return value or None


def _parsed(setting: Setting, text: str):
    try:
        return setting.parse(text)
    except StoreConfigError as exc:
        raise XComBackendConfigError(f"[{SECTION}] {exc} (AIRFLOW__ASGARD__{setting.name.upper()})") from None


def _number(conf, setting: Setting, least: int) -> int:
    text = _text(conf, setting.name)
    value = setting.default if text is None else _parsed(setting, text)
    if value < least:
        raise XComBackendConfigError(f"[{SECTION}] {setting.name} must be {least} or more, got {value}")
    return value


def _from_connection(conn_id: str, backend: str) -> dict:
    """Login, password, host and port, and any setting in the extra, of an Airflow connection: the
    task's own way to reach it (supervisor, secrets backends, ``AIRFLOW_CONN_*``)."""
    from airflow.sdk import Connection

    try:
        conn = Connection.get(conn_id)
    except Exception as exc:  # the SDK raises its own not-found type, and others for a backend it cannot reach
        raise XComBackendConfigError(
            f"[{SECTION}] conn_id = {conn_id!r}: the connection cannot be read ({type(exc).__name__}: {exc}). "
            f"Create it (`airflow connections add {conn_id} ...` or AIRFLOW_CONN_{conn_id.upper()}), or unset conn_id."
        ) from exc
    group, out = BACKEND_SETTINGS[backend], {}
    user, password = _LOGIN.get(backend, ("username", "password"))
    if conn.login and user in group:
        out[user] = conn.login
    if conn.password and password in group:
        out[password] = conn.password
    for name, value in (conn.extra_dejson or {}).items():
        if name in group or name in STORAGE:
            out[name] = value
    if conn.host:
        host = _HOST_SETTING[backend]
        out.setdefault(host, conn.host.split(",") if group[host].kind == "list" else conn.host)
    if conn.port and "port" in group:
        out.setdefault("port", int(conn.port))
    return out


@functools.cache
def read_settings() -> Settings:
    """The ``[asgard]`` settings as Airflow's configuration gives them (airflow.cfg, ``AIRFLOW__ASGARD__*``)."""
    from airflow.sdk.configuration import conf

    backend = (_text(conf, "backend") or "cassandra").lower()
    if backend not in BACKENDS:
        raise XComBackendConfigError(f"[{SECTION}] backend = {backend!r} is not one of {', '.join(BACKENDS)} "
                                     "(AIRFLOW__ASGARD__BACKEND)")
    declared = [*BACKEND_SETTINGS[backend], *STORAGE]
    options, secrets = {}, {}
    for setting in declared:
        if not setting.secret:
            text = _text(conf, setting.name)
            if text is not None:
                options[setting.name] = _parsed(setting, text)
    conn_id = _text(conf, "conn_id")
    if conn_id:
        secret = {s.name for s in declared if s.secret}
        for name, value in _from_connection(conn_id, backend).items():
            (secrets if name in secret else options)[name] = value
    for setting in declared:  # the environment wins over the connection: an operator's override
        value = os.environ.get(f"AIRFLOW__ASGARD__{setting.name.upper()}") if setting.secret else None
        if value:
            secrets[setting.name] = value
    for ours, theirs in zip(("username", "password"), _LOGIN.get(backend, ())):  # S3's keys as a login
        value = os.environ.get(f"AIRFLOW__ASGARD__{ours.upper()}")
        if value and theirs not in secrets:
            secrets[theirs] = value
    if "ttl_seconds" in options and options["ttl_seconds"] <= 0:
        raise XComBackendConfigError(
            f"[{SECTION}] ttl_seconds = {options['ttl_seconds']}: every stored XCom value needs a lifetime (seconds, "
            "over 0). Keep it longer than a DAG run may wait before a downstream task or a retry reads it.")
    return Settings(backend, _number(conf, THRESHOLD, -1), _number(conf, OBJECT_CONCURRENCY, 1),
                    tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items())),
                    tuple(sorted(secrets.items())))


def configured_store(settings: Settings | None = None, signed: bool = True) -> ObjectStore:
    """The process's one store for the ``[asgard]`` settings (the client's cache). ``signed=False``
    opens it without the signing key (tests use it to play an intruder)."""
    settings = settings or read_settings()
    if not signed:
        settings = replace(settings, secrets=tuple(p for p in settings.secrets if p[0] != "signing_key"))
    return shared_store(settings.backend, **settings.store_kwargs())
