"""The events a search publishes, built from its record (`search_events.py`, pure)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from evertune.domain.gate_result import GateResult
from evertune.infra.events import EventKind
from evertune.searcher.orchestrate import TrialResult
from evertune.searcher.records import SearchRecord
from evertune.searcher.search_events import Winner, completed_payload, search_event_id, started_payload
from evertune.searcher.strategy import Figures
from evertune.v1 import endpoint_pb2, events_pb2, jobs_pb2
from evertune.v1 import search_service_pb2 as pb


def _record() -> SearchRecord:
    search = pb.Search(
        id="search-1",
        endpoint="ep",
        profile_id="profile-1",
        hardware_classes=["sim-cpu", "cpu"],
        trial_budget=6,
        trigger="profile.ready",
        outcome=events_pb2.SEARCH_OUTCOME_WINNER,
        trials_completed=5,
        modeled_candidates=98,
    )
    return SearchRecord(search=search, request_id="r", objective="p50_ttft", summary="Winner: ...")


def _trial(trial_id: str, *, simulated: bool) -> TrialResult:
    return TrialResult(
        trial_id=trial_id,
        candidate_key="k",
        ok=True,
        passed=True,
        figures=Figures(goodput_rps=3.0, ttft_p50_ms=90.0, meets_slo=True),
        gates=(GateResult(name="slo", passed=True, value=0.95, threshold=0.9),),
        simulated=simulated,
        metrics=jobs_pb2.TrialMetrics(goodput_rps=3.0),
    )


def test_an_event_id_is_one_per_kind_and_search() -> None:
    started = search_event_id(EventKind.SEARCH_STARTED, "search-1")
    assert started == search_event_id(EventKind.SEARCH_STARTED, "search-1")
    assert started != search_event_id(EventKind.SEARCH_COMPLETED, "search-1")
    assert started != search_event_id(EventKind.SEARCH_STARTED, "search-2")


def test_started_says_what_is_searched() -> None:
    started = started_payload(_record(), candidates=12)
    assert (started.search_id, started.profile_id, started.candidates) == ("search-1", "profile-1", 12)
    assert list(started.hardware_classes) == ["sim-cpu", "cpu"] and started.trial_budget == 6
    assert started.trigger == "profile.ready"


@pytest.mark.parametrize("simulated", [True, False])
def test_completed_carries_the_winner_and_the_baseline_with_their_gates(simulated: bool) -> None:
    config = endpoint_pb2.EngineConfig(model="tiny", max_num_seqs=8)
    winner = Winner(config=config, trial=_trial("t-win", simulated=simulated), hardware_class="sim-cpu")
    completed = completed_payload(
        _record(),
        elapsed=timedelta(seconds=42.5),
        winner=winner,
        baseline=_trial("t-base", simulated=simulated),
        defaults_trial_id="t-defaults",
    )
    assert completed.winner == config and completed.winner_trial_id == "t-win"
    assert completed.verified is not simulated and completed.winner_hardware_class == "sim-cpu"
    assert completed.winner_metrics.goodput_rps == 3.0 and completed.baseline_metrics.goodput_rps == 3.0
    assert [g.name for g in completed.winner_gates] == [g.name for g in completed.baseline_gates] == ["slo"]
    assert completed.duration.ToTimedelta() == timedelta(seconds=42.5)
    assert (completed.trials, completed.modeled_candidates) == (5, 98)
    assert completed.defaults_trial_id == "t-defaults" and completed.summary == "Winner: ..."
    assert completed.objective == endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT


def test_completed_without_a_winner_names_none() -> None:
    completed = completed_payload(
        _record(), elapsed=timedelta(seconds=1), winner=None, baseline=None, defaults_trial_id=""
    )
    assert not completed.HasField("winner") and not completed.winner_trial_id
    assert not completed.baseline_gates
