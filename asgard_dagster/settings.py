"""The client's settings (:mod:`asgard.resources.stores.settings`) as described Dagster config fields."""
from __future__ import annotations

from pydantic import Field
from pydantic.fields import FieldInfo

from asgard.resources.stores.settings import Setting


def described(setting: Setting, also: str = "") -> FieldInfo:
    """A config field with the setting's default and description (``also``: what Dagster adds)."""
    default = list(setting.default) if isinstance(setting.default, tuple) else setting.default
    return Field(default=default, description=f"{setting.description} {also}".strip())
