"""Typed errors of the Airflow XCom backend.

Each is an :class:`XComStoreError` (it knows the DAG, run, task, map index and XCom key, and the
object's ``uri``), raised from the store's own error for the same failure (its ``__cause__``).
The message says which task's XCom, where, and what to do.
"""
from __future__ import annotations

from asgard.resources.stores.errors import StoreConfigError, StoreError, StoreUnavailableError


def describe(where: dict) -> str:
    """``XCom 'return_value' of task 'produce' (map index 3) in run 'manual__...' of DAG 'd'``."""
    index = where.get("map_index", -1)
    mapped = f" (map index {index})" if index is not None and index >= 0 else ""
    return (f"XCom {where.get('key')!r} of task {where.get('task_id')!r}{mapped} in run {where.get('run_id')!r} "
            f"of DAG {where.get('dag_id')!r}")


class XComStoreError(StoreError):
    """A stored XCom value cannot be written or read. ``where`` names the DAG, run, task, map
    index and key; ``uri`` the object in the store."""

    def __init__(self, message: str, where: dict, uri: str = ""):
        self.where, self.uri = dict(where), uri
        self.dag_id, self.run_id = where.get("dag_id"), where.get("run_id")
        self.task_id, self.map_index, self.key = where.get("task_id"), where.get("map_index"), where.get("key")
        super().__init__(message)


RERUN = "Clear the producing task (and its downstream tasks) so that it runs again and pushes a fresh value."


class XComValueMissingError(XComStoreError):
    """The Airflow row refers to an object the store no longer has: expired, purged, never written."""

    def __init__(self, where: dict, uri: str, why: str):
        super().__init__(f"{describe(where)} is not in the store: no object at {uri} ({why}). {RERUN}", where, uri)


class XComValueCorruptError(XComStoreError):
    """The stored object fails its checksums, or is not the object the Airflow row recorded."""

    def __init__(self, where: dict, uri: str, detail: str):
        super().__init__(
            f"{describe(where)} is corrupt in the store at {uri}: {detail.rstrip('.')}. It was refused before being "
            f"unpickled. {RERUN}", where, uri)


class XComValueTamperedError(XComStoreError):
    """With a signing key: the stored object's signature does not verify, or it is unsigned.
    ``key_id``: the id of the key this worker verifies with."""

    def __init__(self, where: dict, uri: str, detail: str, key_id: str = ""):
        self.key_id = key_id
        super().__init__(
            f"{describe(where)} was refused before being unpickled: {detail.rstrip('.')}. {RERUN}", where, uri)


class XComValueTooLargeError(XComStoreError):
    """A value is over the store's ``max_object_bytes``: refused before anything was written.
    ``size``: its serialized bytes; ``limit``: the setting."""

    def __init__(self, where: dict, uri: str, size: int, limit: int):
        self.size, self.limit = size, limit
        super().__init__(
            f"{describe(where)} is {size:,} bytes serialized, over the store's limit of {limit:,} bytes; "
            "nothing was written. Raise [asgard] max_object_bytes (AIRFLOW__ASGARD__MAX_OBJECT_BYTES), or return "
            "smaller pieces (e.g. map the work with .expand() so that each task returns its part).", where, uri)


class XComClassNotAllowedError(XComStoreError, ImportError):
    """A stored (pickled) value names a class or function that ``[core] allowed_deserialization_classes``
    does not allow (:mod:`asgard_airflow.allowed_classes`): refused before anything was built from it,
    an ``ImportError`` as Airflow's serde raises for a JSON value's class. ``classname``: what it names."""

    def __init__(self, where: dict, uri: str, classname: str):
        self.classname = classname
        super().__init__(
            f"{describe(where)} at {uri} imports {classname}, which [core] allowed_deserialization_classes does not "
            "allow; it was refused before being unpickled. If you trust the class, add it (or a glob of its module) "
            "to AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES on the workers; or return a value Airflow serializes "
            "(a dataclass, a pydantic model, a class with serialize/deserialize).", where, uri)


class XComStoreUnavailableError(XComStoreError):
    """The store's server cannot be reached while a task writes or reads an XCom value. ``backend``
    and ``hint`` are the store's (:class:`~asgard.resources.stores.errors.StoreUnavailableError`)."""

    def __init__(self, where: dict, cause: StoreUnavailableError, writing: bool):
        self.backend, self.hint = cause.backend, cause.hint
        verb = "stored" if writing else "read"
        super().__init__(
            f"{describe(where)} cannot be {verb}: {str(cause).rstrip('.')}. The [asgard] settings "
            "(AIRFLOW__ASGARD__BACKEND, __CONTACT_POINTS, __HOST, __PORT, ...) say where the store is; the task "
            "can be retried once it answers.", where, getattr(cause, "where", ""))


class XComBackendConfigError(StoreConfigError):
    """The ``[asgard]`` settings (or the connection they name) cannot be used."""


def _task_name(task) -> str:
    return f"task {getattr(task, 'task_id', '?')!r} of DAG {getattr(task, 'dag_id', None)!r}"


class XComTaskSettingError(XComBackendConfigError):
    """A task's ``params["asgard"]`` sets an option to a value it cannot take
    (:mod:`asgard_airflow.task_settings`); raised before anything of its value is written.

    Attributes:
        dag_id, task_id: the task.
        key: the option (``codec``, ``placement``, ``replicas``).
        value: the value given.
        allowed: the values it can take.
    """

    def __init__(self, task, key: str, value, allowed: list):
        self.dag_id, self.task_id = getattr(task, "dag_id", None), getattr(task, "task_id", None)
        self.key, self.value, self.allowed = key, value, list(allowed)
        super().__init__(f"{_task_name(task)} sets params['asgard'] {key} to {value!r}, which it cannot take: use one "
                         f"of {self.allowed} (nothing was written)")


class XComPlacementCannotServeError(XComTaskSettingError):
    """``producer-local`` (a task's ``params["asgard"]``, or ``[asgard] placement``) for a task
    whose downstream tasks may run on other hosts: they could not read the copy.

    Attributes (besides :class:`XComTaskSettingError`'s):
        source: where the placement came from.
        why: why it cannot serve (the executor, the tasks' queues).
        what_to_do: how to make it serve, or to let it go.
    """

    def __init__(self, task, source: str, why: str, what_to_do: str):
        self.dag_id, self.task_id = getattr(task, "dag_id", None), getattr(task, "task_id", None)
        self.key, self.value, self.allowed = "placement", "producer-local", ["auto", "ring"]
        self.source, self.why, self.what_to_do = source, why, what_to_do
        XComBackendConfigError.__init__(self, f"{_task_name(task)} is placed producer-local ({source}), which cannot "
                                              f"serve: {why}. {what_to_do} (nothing was written)")


__all__ = [
    "XComStoreError", "XComValueMissingError", "XComValueCorruptError", "XComValueTamperedError",
    "XComValueTooLargeError", "XComClassNotAllowedError", "XComStoreUnavailableError", "XComBackendConfigError",
    "XComTaskSettingError", "XComPlacementCannotServeError", "describe",
]
