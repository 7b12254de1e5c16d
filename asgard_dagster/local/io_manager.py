"""``LocalIOManager``: the same store mechanism on the local filesystem (a baseline)."""
from __future__ import annotations

from pydantic import Field

from asgard.resources.paths import asgard_home
from asgard.resources.stores.local import LocalObjectStore

from ..io_manager import StoreIOManager


class LocalIOManager(StoreIOManager):
    """Op outputs as chunked files under ``base_dir`` (default ``$ASGARD_HOME/objects``).

    Example::

        defs = Definitions(jobs=[...], resources={"io_manager": LocalIOManager(base_dir="/tmp/outputs")})
    """

    base_dir: str = Field(default="", description="Directory for stored outputs; empty uses $ASGARD_HOME/objects.")

    def open_store(self, **store_kwargs) -> LocalObjectStore:
        return LocalObjectStore(self.base_dir or str(asgard_home() / "objects"), **store_kwargs)
