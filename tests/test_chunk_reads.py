"""How each edge's chunks are read (issue 37, consistency per edge; resources/stores/cql/store.py
``chunk_reads``), in real Dagster runs on the multiprocess executor against the local node: an
output's ``asgard/chunk_reads`` sets its readers', an input's own wins, an edge that says nothing
reads at the store's setting, each input's metadata says how and why, and a value that is not a
choice fails the reading step with a typed error before anything is read. The reads at ONE and
their fall-back on a ring: tests/test_cassandra_ring.py."""
from __future__ import annotations

import pytest
from dagster import execute_job, reconstructable

from .chunk_reads_jobs import chunk_reads_job, misnamed_chunk_reads_job, values
from .forkserver_steps import forkserver_with_this_environment

pytestmark = pytest.mark.usefixtures("forked_steps")


def _input_metadata(result, step: str) -> dict:
    [event] = [e for e in result.all_events if e.event_type_value == "LOADED_INPUT" and e.step_key == step]
    return {k: getattr(v, "value", v) for k, v in event.event_specific_data.metadata.items()}


def test_each_edge_reads_its_chunks_as_its_output_or_input_says(cassandra_node, dagster_instance):
    forkserver_with_this_environment()
    with execute_job(reconstructable(chunk_reads_job), instance=dagster_instance) as result:
        assert result.success
        totals = {s: result.output_for_node(s) for s in ("total_inherits", "total_overrides", "total_plain")}
        read = {s: _input_metadata(result, s) for s in totals}
    assert totals == pytest.approx({"total_inherits": values(1).sum(), "total_overrides": values(1).sum(),
                                    "total_plain": values(2).sum()})
    assert read["total_inherits"]["chunk_reads"] == "nearest-one", read["total_inherits"]
    assert read["total_inherits"]["chunk_reads_reason"] == "asked for this read"
    # one node: every chunk it has, at ONE as at the store's level
    assert read["total_inherits"]["chunk_read_fallbacks"] == 0
    assert read["total_overrides"]["chunk_reads"] == "quorum", read["total_overrides"]
    assert read["total_plain"]["chunk_reads"] == "quorum", read["total_plain"]
    # nothing said: the store's auto, on one node of this host
    assert read["total_plain"]["chunk_reads_reason"] == ("auto: every member runs on this host: no link between "
                                                         "hosts to save")


def test_a_chunk_reads_that_is_no_choice_fails_the_reading_step_with_a_typed_error(cassandra_node, dagster_instance):
    forkserver_with_this_environment()
    with execute_job(reconstructable(misnamed_chunk_reads_job), instance=dagster_instance,
                     raise_on_error=False) as result:
        assert not result.success
        [failure] = [e for e in result.all_events if e.is_step_failure]
        error = failure.event_specific_data.error
    assert failure.step_key == "total_misnamed"
    text = error.to_string()
    assert "OutputSettingError" in text, text
    assert "input 'data' of op 'total_misnamed' sets metadata 'asgard/chunk_reads' to 'fastest'" in text, text
    assert "['quorum', 'nearest-one', 'auto']" in text, text
