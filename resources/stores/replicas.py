"""How many copies the ring keeps of one object's chunks (issue 37, the replication lever per edge).

The store's ``replicas`` setting (``asgard/replicas`` on a Dagster output): ``store`` keeps the
keyspace's factor; ``1`` keeps one copy (an intermediate its run can re-make by re-running its
step); ``auto`` keeps one where a single step reads the object and the store's factor where several
do, each reading the replica nearest its host. Only a store with a replication factor of its own
(Cassandra) has a count to give; S3, Redis and files keep their own copies.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import StoreConfigError

STORE_REPLICAS, ONE_REPLICA, AUTO_REPLICAS = "store", "1", "auto"
REPLICA_SETTINGS = (STORE_REPLICAS, ONE_REPLICA, AUTO_REPLICAS)


@dataclass(frozen=True)
class ReplicasChoice:
    #: copies of the chunks: 1, or None for the store's factor
    replicas: int | None
    reason: str = ""


def check_replicas(setting) -> str:
    """The setting as its canonical text (an int 1 is ``"1"``); anything else is a typed error."""
    text = str(setting).strip().lower() if not isinstance(setting, bool) else repr(setting)
    if text not in REPLICA_SETTINGS:
        raise StoreConfigError(f"replicas {setting!r} is not one of {', '.join(REPLICA_SETTINGS)}: 'store' keeps the "
                               "keyspace's replication factor, '1' one copy, 'auto' one for an object a single step reads")
    return text


def no_count_to_give() -> StoreConfigError:
    """What a store that keeps its own copies (S3, Redis, files) says to ``replicas = 1``."""
    return StoreConfigError("replicas '1': this store keeps its own copies of an object and has no count to give; "
                            "leave replicas at 'store' (or 'auto') for it")


def choose_replicas(requested, factor: int | None, readers: int | None, keep_reason: str | None = None,
                    caller: bool = False) -> ReplicasChoice:
    """The copies of one object: ``requested`` (a setting) against the store's ``factor`` (None: a
    store that keeps its own copies), the steps that will read it (``readers``, where the caller
    knows them) and ``keep_reason``, where the caller knows it must outlive its run (an asset)."""
    requested = check_replicas(requested)
    if requested == STORE_REPLICAS:
        return ReplicasChoice(None, "chosen by the caller: the store's factor" if caller else "")
    if factor is None:
        if requested == ONE_REPLICA:
            raise no_count_to_give()
        return ReplicasChoice(None, "")
    if factor <= 1:
        return ReplicasChoice(None, f"the store keeps {factor} copy already" if requested == ONE_REPLICA or caller
                              else "")
    if requested == ONE_REPLICA:
        return ReplicasChoice(1, f"{'chosen by the caller' if caller else 'the replicas setting'}: 1 copy of {factor}")
    if keep_reason:
        return ReplicasChoice(None, f"auto: {keep_reason}: the store's {factor} copies")
    if readers is None:
        return ReplicasChoice(None, f"auto: the caller did not say how many steps read it: the store's {factor} copies")
    if readers <= 1:
        return ReplicasChoice(1, f"auto: one step reads it, and re-running its producer re-makes it: 1 copy of {factor}")
    return ReplicasChoice(None, f"auto: {readers} reads, each from the copy nearest its host: the store's {factor} copies")
