"""An IO manager's connection: one nested resource, the way dagster-aws nests ``S3Resource`` in
``S3PickleIOManager`` (``CassandraIOManager(cassandra=CassandraResource(keyspace=...))``).

The resource's fields given flat on the IO manager (``CassandraIOManager(keyspace=...)``, the form
of earlier releases) are refused with :class:`FlatConnectionFieldsError`, which says what to write
instead: Dagster itself ignores a keyword that is not a field, so they would otherwise connect to
the defaults without a word.
"""
from __future__ import annotations

from typing import Any, ClassVar

from dagster import ConfigurableResource, DagsterInvalidDefinitionError

from .io_manager import StoreIOManager


class FlatConnectionFieldsError(DagsterInvalidDefinitionError):
    """An IO manager got connection fields flat (``CassandraIOManager(keyspace=...)``): they are
    fields of its nested resource (``CassandraIOManager(cassandra=CassandraResource(keyspace=...))``)."""


class ConnectionIOManager(StoreIOManager):
    """A :class:`StoreIOManager` whose connection settings are one nested resource (the field
    ``connection_field``, a ``resource_class``), which opens the store (``get_store``)."""

    connection_field: ClassVar[str]
    resource_class: ClassVar[type[ConfigurableResource]]

    def __init__(self, **data: Any):
        flat = [k for k in data if k in self.resource_class.model_fields and k not in type(self).model_fields]
        if flat:
            raise FlatConnectionFieldsError(self._flat_fields_message(flat, data.get(self.connection_field)))
        super().__init__(**data)

    @classmethod
    def _flat_fields_message(cls, flat: list[str], nested: Any) -> str:
        name, field, resource = cls.__name__, cls.connection_field, cls.resource_class.__name__
        moved = ", ".join(f"{k}=..." for k in flat)
        also = (f" (you gave {field}= too: put {', '.join(flat)} inside it)" if nested is not None else "")
        return (f"{name} takes its connection as one nested {resource}: write "
                f"{name}({field}={resource}({moved}), ...), not {name}({moved}, ...){also}. "
                f"Connection fields given flat on the IO manager were removed; its own fields "
                f"({', '.join(StoreIOManager.model_fields)}) stay on it.")

    def connection(self) -> ConfigurableResource:
        """The nested resource, or without one the resource's defaults (the local server). In a run
        its EnvVar fields hold their values; outside one they stay EnvVars, read where the resource
        opens a store."""
        nested = getattr(self, self.connection_field)
        return nested if nested is not None else self.resource_class()

    def connection_settings(self) -> tuple[str, dict]:
        return self.resource_class.backend, self.connection().connection_kwargs()
