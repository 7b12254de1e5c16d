"""An IO manager's connection: one nested resource, the way dagster-aws nests ``S3Resource`` in
``S3PickleIOManager``. For one release the resource's fields may still be given flat on the IO
manager; they are deprecated, and giving both forms is an error.
"""
from __future__ import annotations

import warnings
from typing import Any, ClassVar, Optional, get_args

from dagster import ConfigurableResource, DagsterInvalidDefinitionError
from pydantic import Field, create_model
from pydantic.fields import FieldInfo

from .io_manager import StoreIOManager


class ConnectionFieldsConflictError(DagsterInvalidDefinitionError):
    """An IO manager got its nested connection resource and deprecated flat connection fields too."""


class ConnectionIOManager(StoreIOManager):
    """A :class:`StoreIOManager` whose connection settings are one nested resource (the field
    ``connection_field``, a ``resource_class``), which opens the store (``get_store``)."""

    connection_field: ClassVar[str]
    resource_class: ClassVar[type[ConfigurableResource]]

    def __init__(self, **data: Any):
        super().__init__(**data)
        flat = self.flat_connection_fields()
        if not flat:
            return
        name, field, resource = type(self).__name__, self.connection_field, self.resource_class.__name__
        moved = ", ".join(f"{k}=..." for k in flat)
        if getattr(self, field) is not None:
            raise ConnectionFieldsConflictError(
                f"{name} got both {field}={resource}(...) and the connection fields {', '.join(flat)}: keep "
                f"{field}= and give those inside it ({field}={resource}({moved})), not on {name}.")
        # stacklevel 2: the warning names the line that built the IO manager
        warnings.warn(
            f"{name}({moved}) is deprecated: give the connection as {name}({field}={resource}({moved})); "
            f"flat connection fields will be removed in the next release.", DeprecationWarning, stacklevel=2)

    def flat_connection_fields(self) -> list[str]:
        """The deprecated flat connection fields that are given (away from their defaults)."""
        fields = type(self).model_fields
        return [k for k in self.resource_class.model_fields if getattr(self, k) != fields[k].default]

    def connection(self) -> ConfigurableResource:
        """The nested resource; without one, a resource made of the deprecated flat fields (those
        unset at the resource's defaults, which reach the local server). In a run its EnvVar fields
        hold their values; outside one they stay EnvVars, read where the resource opens a store."""
        nested = getattr(self, self.connection_field)
        if nested is not None:
            return nested
        return self.resource_class(**{k: getattr(self, k) for k in self.flat_connection_fields()})

    def connection_settings(self) -> tuple[str, dict]:
        return self.resource_class.backend, self.connection().connection_kwargs()


def with_flat_connection_fields(resource_class: type[ConfigurableResource], field: str) -> type[ConnectionIOManager]:
    """A :class:`ConnectionIOManager` base whose connection is ``field``, a ``resource_class``, and
    which also takes each field of ``resource_class`` flat (optional, deprecated): the resource
    stays the one place that defines connection settings."""
    flat = {
        name: (Optional[info.annotation],
               Field(default=_flat_default(info),
                     description=f"Deprecated: give it in {field}={resource_class.__name__}(...). "
                     f"{info.description or ''}".rstrip()))
        for name, info in resource_class.model_fields.items()
    }
    base = create_model(f"{resource_class.__name__}FlatFields", __base__=ConnectionIOManager,
                        __module__=__name__, **flat)
    base.connection_field, base.resource_class = field, resource_class
    return base


def _flat_default(info: FieldInfo) -> Any:
    """None (not given), unless None is a value of the resource's field other than its default
    (S3's ``endpoint_url=None``: AWS itself): then the resource's default, so a given None counts."""
    takes_none = type(None) in get_args(info.annotation)
    return info.default if takes_none and info.default is not None else None
