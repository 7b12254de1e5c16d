"""The errors of an output's Asgard settings (``Out(metadata={"asgard/...": ...})``), raised
before anything of the output is written; :mod:`.io_manager` and :mod:`.placement` raise them."""
from __future__ import annotations

from typing import Any

from dagster import OutputContext


def _output_name(context: OutputContext) -> str:
    if context.has_asset_key:
        return f"asset {context.asset_key.to_user_string()}"
    return f"output '{context.name}' of step '{context.step_key}'"


class OutputSettingError(ValueError):
    """An output's metadata sets an Asgard option to a value it cannot take.

    Attributes:
        output: which output (step and name, or asset).
        key: the metadata key (``asgard/codec``).
        value: the value given.
        allowed: the values it can take.
    """

    def __init__(self, output: str, key: str, value: Any, allowed: list[str], done: str = "nothing was written"):
        self.output, self.key, self.value, self.allowed = output, key, value, allowed
        super().__init__(f"{output} sets metadata {key!r} to {value!r}, which it cannot take: use one of {allowed} "
                         f"({done})")


class PlacementCannotServeError(OutputSettingError):
    """An output's metadata, or its IO manager's ``placement`` field, forces a placement its
    readers cannot use (``producer-local`` where they may run on other hosts, :mod:`.placement`).
    Raised when the run's first step starts to store an output, before anything is written.

    Attributes:
        output: which output (the op and output name).
        key: the metadata key (``asgard/placement``), or ``placement`` for the IO manager's field.
        value: the value given.
        why: why it cannot serve (the executor, the queues of the producer and its readers).
        what_to_do: how to make it serve, or to let it go.
        allowed: the values that serve here.
    """

    def __init__(self, output: str, key: str, value: Any, why: str, what_to_do: str):
        self.output, self.key, self.value, self.why, self.what_to_do = output, key, value, why, what_to_do
        self.allowed = ["auto", "ring"]
        where = f"sets metadata {key!r}" if "/" in key else f"is stored by an IO manager whose field {key!r} is"
        ValueError.__init__(self, f"{output} {where} {value!r}, which cannot serve: {why}. "
                            f"{what_to_do} (nothing was written)")
