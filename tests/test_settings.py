"""Each store setting is declared once (asgard.resources.stores.settings) and reaches users through
both adapters: a Dagster resource field and an Airflow ``[asgard]`` option for every one."""
from __future__ import annotations

import inspect

import pytest

from asgard.resources.stores.settings import BACKEND_SETTINGS, STORAGE

pytestmark = pytest.mark.fast

DAGSTER_RESOURCES = {"cassandra": ("asgard_dagster.cassandra", "CassandraResource"),
                     "redis": ("asgard_dagster.redis", "RedisResource"),
                     "s3": ("asgard_dagster.s3", "S3StoreResource"),
                     "local": ("asgard_dagster.local", "LocalIOManager")}
#: a Dagster field that names a setting otherwise (public before the settings were declared once)
DAGSTER_NAMES = {("local", "root"): "base_dir"}
STORES = {"cassandra": ("asgard.resources.stores.cql", "CassandraObjectStore"),
          "redis": ("asgard.resources.stores.redis", "RedisObjectStore"),
          "s3": ("asgard.resources.stores.s3", "S3ObjectStore"),
          "local": ("asgard.resources.stores.local", "LocalObjectStore")}


def _class(where):
    import importlib

    return getattr(importlib.import_module(where[0]), where[1])


@pytest.mark.parametrize("backend", sorted(BACKEND_SETTINGS))
def test_every_connection_setting_is_a_described_dagster_field_with_the_declared_default(backend):
    fields = _class(DAGSTER_RESOURCES[backend]).model_fields
    for setting in BACKEND_SETTINGS[backend]:
        name = DAGSTER_NAMES.get((backend, setting.name), setting.name)
        assert name in fields, f"{DAGSTER_RESOURCES[backend][1]} lacks the {backend} setting {setting.name!r}"
        default = list(setting.default) if isinstance(setting.default, tuple) else setting.default
        assert fields[name].default == default and fields[name].description.startswith(setting.description)


def test_every_storage_setting_is_a_described_field_of_every_io_manager():
    from asgard_dagster import CassandraIOManager, LocalIOManager
    from asgard_dagster.redis import RedisIOManager
    from asgard_dagster.s3 import S3IOManager

    for manager in (CassandraIOManager, RedisIOManager, S3IOManager, LocalIOManager):
        fields = manager.model_fields
        for setting in STORAGE:
            assert setting.name in fields, f"{manager.__name__} lacks {setting.name!r}"
            assert fields[setting.name].default == setting.default
            assert fields[setting.name].description.startswith(setting.description)


@pytest.mark.parametrize("backend", sorted(STORES))
def test_the_stores_take_their_defaults_from_the_declaration(backend):
    params = inspect.signature(_class(STORES[backend]).__init__).parameters
    for setting in BACKEND_SETTINGS[backend]:
        if setting.name in params and params[setting.name].default is not inspect.Parameter.empty:
            assert params[setting.name].default == setting.default, (backend, setting.name)
    base = inspect.signature(_class(("asgard.resources.stores.base", "ObjectStore")).__init__).parameters
    for name in ("ttl_seconds", "codec", "max_object_bytes", "concurrency"):
        assert base[name].default == STORAGE[name].default


def test_a_setting_parses_its_text_or_says_which_setting_is_wrong():
    from asgard.resources.stores.errors import StoreConfigError

    cassandra = BACKEND_SETTINGS["cassandra"]
    assert cassandra["contact_points"].parse(" 10.0.0.5, 10.0.0.6 ") == ["10.0.0.5", "10.0.0.6"]
    assert cassandra["port"].parse("9142") == 9142 and cassandra["durable_writes"].parse("True") is True
    with pytest.raises(StoreConfigError, match="port = 'ninety' is not a number"):
        cassandra["port"].parse("ninety")
    with pytest.raises(StoreConfigError, match="ssl_verify_hostname = 'maybe': say true or false"):
        cassandra["ssl_verify_hostname"].parse("maybe")


def _non_default_text(setting) -> tuple[str, object]:
    """A text for the setting that is not its default, and the value it parses to."""
    if setting.kind == "int":
        return str((setting.default or 0) + 7), (setting.default or 0) + 7
    if setting.kind == "float":
        return "12.5", 12.5
    if setting.kind == "bool":
        return ("false", False) if setting.default else ("true", True)
    if setting.kind == "list":
        return "10.0.0.5, 10.0.0.6", ["10.0.0.5", "10.0.0.6"]
    return "chosen_value", "chosen_value"


@pytest.mark.parametrize("backend", sorted(BACKEND_SETTINGS))
def test_every_setting_is_an_airflow_option_and_every_secret_comes_from_the_environment(backend, monkeypatch):
    """``AIRFLOW__ASGARD__<NAME>`` for each setting the client declares reaches the store's arguments."""
    from asgard_airflow import settings as airflow_settings

    expected = {}
    for setting in [*BACKEND_SETTINGS[backend], *STORAGE]:
        text, value = ("secret-" + setting.name, "secret-" + setting.name) if setting.secret else \
            _non_default_text(setting)
        if setting.name == "ttl_seconds":
            text, value = "3600", 3600
        monkeypatch.setenv(f"AIRFLOW__ASGARD__{setting.name.upper()}", text)
        expected["chunk_size" if setting.name == "chunk_size_bytes" else setting.name] = value
    monkeypatch.setenv("AIRFLOW__ASGARD__BACKEND", backend)
    airflow_settings.read_settings.cache_clear()
    try:
        kwargs = airflow_settings.read_settings().store_kwargs()
    finally:
        airflow_settings.read_settings.cache_clear()
    assert kwargs == expected
