"""The events a search publishes, built from its record (pure): `search.started` once the space is
ranked, `search.completed` at its end, each with an id derived from the search id (a republish is
stored once by JetStream)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta

from google.protobuf.duration_pb2 import Duration

from evertune.infra.events import EventKind
from evertune.searcher.orchestrate import TrialResult
from evertune.searcher.records import WIRE_OBJECTIVE, SearchRecord
from evertune.v1 import endpoint_pb2, events_pb2


@dataclass(frozen=True)
class Winner:
    """What `search.completed` says of a winner."""

    config: endpoint_pb2.EngineConfig  #: the winner's engine configuration, its model the endpoint's
    trial: TrialResult | None  #: the trial that measured it (None: not measured)
    hardware_class: str  #: the class it was measured on


def search_event_id(kind: EventKind, search_id: str) -> str:
    """Id of the search's event of `kind` (one per kind and search)."""
    return hashlib.sha256(f"{kind.value}:{search_id}".encode()).hexdigest()[:32]


def started_payload(record: SearchRecord, *, candidates: int) -> events_pb2.SearchStarted:
    """The SearchStarted of a search whose space was ranked; `candidates` predicted feasible."""
    search = record.search
    return events_pb2.SearchStarted(
        search_id=search.id,
        profile_id=search.profile_id,
        hardware_classes=list(search.hardware_classes),
        trial_budget=search.trial_budget,
        candidates=candidates,
        trigger=search.trigger,
    )


def completed_payload(
    record: SearchRecord,
    *,
    elapsed: timedelta,
    winner: Winner | None,
    baseline: TrialResult | None,
    defaults_trial_id: str,
) -> events_pb2.SearchCompleted:
    """The SearchCompleted of a finished search (its record marked done): the outcome, the winner
    and the baseline with their figures and gates, and how long it took."""
    search = record.search
    completed = events_pb2.SearchCompleted(
        search_id=search.id,
        profile_id=search.profile_id,
        outcome=search.outcome,
        trials=search.trials_completed,
        modeled_candidates=search.modeled_candidates,
        error=search.error,
        summary=record.summary,
        objective=search.objective or WIRE_OBJECTIVE.get(record.objective),
        defaults_trial_id=defaults_trial_id,
    )
    if winner is not None:
        completed.winner.CopyFrom(winner.config)
        trial = winner.trial
        if trial is not None:
            completed.winner_trial_id = trial.trial_id
            completed.verified = not trial.simulated
            if trial.metrics is not None:
                completed.winner_metrics.CopyFrom(trial.metrics)
            completed.winner_gates.extend([g.to_proto() for g in trial.gates])
        completed.winner_hardware_class = winner.hardware_class
    if baseline is not None:
        if baseline.metrics is not None:
            completed.baseline_metrics.CopyFrom(baseline.metrics)
        completed.baseline_gates.extend([g.to_proto() for g in baseline.gates])
    duration = Duration()
    duration.FromTimedelta(elapsed)
    completed.duration.CopyFrom(duration)
    return completed
