"""``LocalIOManager``: the same store mechanism on the local filesystem (a baseline)."""
from __future__ import annotations

from asgard.resources.paths import asgard_home
from asgard.resources.stores.settings import LOCAL

from ..io_manager import StoreIOManager
from ..settings import described


class LocalIOManager(StoreIOManager):
    """Op outputs as chunked files under ``base_dir`` (default ``$ASGARD_HOME/objects``).

    Example::

        defs = Definitions(jobs=[...], resources={"io_manager": LocalIOManager(base_dir="/tmp/outputs")})
    """

    base_dir: str = described(LOCAL["root"])

    def connection_settings(self) -> tuple[str, dict]:
        return "local", {"root": self.base_dir or str(asgard_home() / "objects")}
