"""A node that is stopping answers "Server is shutting down" (Overloaded, code 1001); a starting
one answers IsBootstrapping. The driver raises either bare, not inside NoHostAvailable, where it
re-prepared a statement the restarted node had forgotten: CI's ride-through run failed so, a
step's head read during the node's second restart. The store sends such a request again within
the ride-through (resources/stores/cql/retry.py), and past it fails typed."""
from __future__ import annotations

import threading

import pytest
from cassandra.cluster import _NOT_SET, ResponseFuture
from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage, SyntaxException

from asgard.resources.stores.cql.connection import Connection, Endpoint
from asgard.resources.stores.cql.errors import is_reconnecting
from asgard.resources.stores.cql.retry import Requests
from asgard.resources.stores.errors import StoreUnavailableError

pytestmark = pytest.mark.fast  # the driver's own classes and its re-prepare step, no server

#: what Cassandra 5.0 answered in CI (tests/test_cassandra_runtime.py, 2026-11-30)
SHUTTING_DOWN = "Server is shutting down"


def _reprepare_failed_with(answer) -> BaseException:
    """What the driver's ResponseFuture raises when the node answers its re-prepare with ``answer``."""
    future = ResponseFuture.__new__(ResponseFuture)  # the state _execute_after_prepare and result() touch
    future._final_exception, future._final_result, future._timer, future._metrics = None, _NOT_SET, None, None
    future._callback_lock, future._event, future._errbacks, future._errors = threading.Lock(), threading.Event(), [], {}
    future._execute_after_prepare("127.0.0.2:9042", None, None, answer)
    with pytest.raises(Exception) as raised:
        future.result()
    return raised.value


class _NodeRestarting:
    """A session whose node answers ``answers`` first (exceptions the driver raised), then a row."""

    def __init__(self, *answers: BaseException):
        self.answers, self.calls = list(answers), 0

    def execute(self, statement, params=None, timeout=None):
        self.calls += 1
        if self.answers:
            raise self.answers.pop(0)
        return ["row"]


def _requests(ride_through_seconds: float) -> Requests:
    return Requests(Connection(Endpoint(("127.0.0.2",), 9042, None, None, None, connect_timeout=0.1,
                                        request_timeout=1.0, ride_through_seconds=ride_through_seconds)))


def test_the_driver_raises_a_failed_re_prepare_bare():
    raised = _reprepare_failed_with(OverloadedErrorMessage(0x1001, SHUTTING_DOWN, None))
    assert type(raised) is OverloadedErrorMessage and SHUTTING_DOWN in str(raised)
    assert is_reconnecting(raised)
    assert is_reconnecting(_reprepare_failed_with(IsBootstrappingErrorMessage(0x1002, "bootstrapping", None)))


def test_a_request_the_stopping_node_refused_is_sent_again_until_it_answers():
    session = _NodeRestarting(_reprepare_failed_with(OverloadedErrorMessage(0x1001, SHUTTING_DOWN, None)),
                              _reprepare_failed_with(IsBootstrappingErrorMessage(0x1002, "bootstrapping", None)))
    assert _requests(10.0).execute(session, "SELECT ...") == ["row"]
    assert session.calls == 3


def test_past_the_ride_through_it_fails_typed_and_other_errors_are_not_resent():
    stopping = [_reprepare_failed_with(OverloadedErrorMessage(0x1001, SHUTTING_DOWN, None)) for _ in range(100)]
    with pytest.raises(StoreUnavailableError) as raised:
        _requests(0.3).execute(_NodeRestarting(*stopping), "SELECT ...")
    assert isinstance(raised.value.__cause__, OverloadedErrorMessage)
    syntax = _reprepare_failed_with(SyntaxException(0x2000, "line 1: no viable alternative", None))
    assert not is_reconnecting(syntax)
    session = _NodeRestarting(syntax)
    with pytest.raises(SyntaxException):
        _requests(10.0).execute(session, "SELECT ...")
    assert session.calls == 1
