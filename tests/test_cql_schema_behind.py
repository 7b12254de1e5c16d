"""A replica whose schema is behind its coordinator's refuses a request with INCOMPATIBLE_SCHEMA
(a rolling retune's first run met it in CI, its put at LOCAL_QUORUM failing the run): the store
sends such a request again (resources/stores/cql/retry.py); any other failure is not taken for it."""
from __future__ import annotations

import pytest
from cassandra import ConsistencyLevel, ReadFailure, WriteFailure, WriteTimeout
from cassandra.cluster import NoHostAvailable

from asgard.resources.stores.cql.errors import is_replica_schema_behind

pytestmark = pytest.mark.fast  # the driver's own exception classes, no server

#: what Cassandra 5.0.9 answered in CI (tests/test_rolling_retune.py, 2026-11-29)
SEEN = "Operation failed - received 1 responses and 1 failures: INCOMPATIBLE_SCHEMA from /127.0.0.16:7000"


def _failure(kind, message: str):
    return kind(message, consistency=ConsistencyLevel.LOCAL_QUORUM, required_responses=2, received_responses=1,
                failures=1, error_code_map={"127.0.0.16": 3})


def test_a_write_or_read_a_replica_refused_for_its_schema_is_sent_again():
    assert is_replica_schema_behind(_failure(WriteFailure, SEEN))
    assert is_replica_schema_behind(_failure(ReadFailure, SEEN))
    assert is_replica_schema_behind(NoHostAvailable("all failed", {"127.0.0.15": _failure(WriteFailure, SEEN)}))


def test_other_failures_are_not_taken_for_a_schema_behind():
    other = "Operation failed - received 1 responses and 1 failures: UNKNOWN from /127.0.0.16:7000"
    assert not is_replica_schema_behind(_failure(WriteFailure, other))
    assert not is_replica_schema_behind(WriteTimeout("timed out", consistency=ConsistencyLevel.LOCAL_QUORUM,
                                                     required_responses=2, received_responses=1, write_type=0))
    assert not is_replica_schema_behind(NoHostAvailable("all failed", {"127.0.0.15": _failure(WriteFailure, SEEN),
                                                                       "127.0.0.16": _failure(WriteFailure, other)}))
    assert not is_replica_schema_behind(NoHostAvailable("none", {}))
