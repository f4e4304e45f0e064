"""The search objective and outcome on the wire, where other parts read them: the deployer's
validation of EndpointSpec.objective, and `evertune events tail`'s line for search.completed."""

from __future__ import annotations

import pytest

from evertune.apps.cli.events import format_event
from evertune.deployer import validation as v
from evertune.errors import InvalidArgument
from evertune.infra.events import EventKind, new_event
from evertune.v1 import endpoint_pb2, events_pb2
from tests.deployer.helpers import spec


def test_an_unset_objective_is_stored_as_goodput_and_a_set_one_kept() -> None:
    unset = spec("ep-1", tenant="t")
    assert not unset.objective
    assert v.endpoint_spec_proto(v.endpoint_def(unset)).objective == endpoint_pb2.SEARCH_OBJECTIVE_GOODPUT
    voice = spec("ep-1", tenant="t")
    voice.objective = endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT
    assert v.endpoint_def(voice).objective == "p50_ttft"
    assert v.endpoint_spec_proto(v.endpoint_def(voice)).objective == endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT


def test_an_unknown_objective_is_a_one_line_error_naming_the_field() -> None:
    bad = spec("ep-1", tenant="t")
    bad.objective = 7  # type: ignore[assignment]
    with pytest.raises(InvalidArgument, match=r"^spec\.objective: unknown value 7 "):
        v.endpoint_def(bad)


def test_events_tail_prints_the_outcome_and_the_summary_of_search_completed() -> None:
    done = events_pb2.SearchCompleted(
        search_id="search-1",
        outcome=events_pb2.SEARCH_OUTCOME_INFEASIBLE,
        trials=3,
        summary="Infeasible: no candidate meets p99 TTFT 50 ms at 10 rps; closest misses by 12%.",
    )
    event = new_event(EventKind.SEARCH_COMPLETED, endpoint="ep", source="searcher", payload_message=done)
    line = format_event(event)
    assert "search=search-1 outcome=infeasible trials=3 | Infeasible: no candidate meets" in line
