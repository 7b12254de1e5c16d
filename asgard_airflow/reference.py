"""What marks an XCom row's value as a reference to an object the backend stored (its own module:
the backend writes references, the topology analyzer reads their sizes)."""
from __future__ import annotations

from typing import Any

#: the key that marks an Airflow xcom row's value as a reference to a stored object
REFERENCE_MARKER = "__asgard_xcom__"
REFERENCE_VERSION = 1


def is_reference(value: Any) -> bool:
    return isinstance(value, dict) and value.get(REFERENCE_MARKER) is not None
