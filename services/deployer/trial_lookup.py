"""Finding a trial's engine config for Promote(trial_id): its `trial.completed` event.

The searcher's runners publish `trial.completed` on `evertune.events.trial.completed.<endpoint>`;
the EVENTS stream keeps them 30 days. A Promote by trial id reads that endpoint's trial events
once (an ephemeral pull consumer, deleted after) and takes the config of the named trial.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from evertune.errors import FailedPrecondition, NotFound
from evertune.infra.events import EventKind, decode_event, event_filter_subject
from evertune.v1 import endpoint_pb2, events_pb2

#: Messages fetched per batch.
BATCH = 256


@dataclass(frozen=True)
class TrialConfig:
    """A passed trial's measured configuration."""

    trial_id: str  #: the trial
    search_id: str  #: its search
    engine_config: endpoint_pb2.EngineConfig  #: what it measured


async def find_trial(js: JetStreamContext, *, endpoint: str, trial_id: str) -> TrialConfig:
    """The config of `trial_id` of `endpoint`: NOT_FOUND if no such trial.completed is stored,
    FAILED_PRECONDITION if the trial did not pass its gates."""
    subject = event_filter_subject(EventKind.TRIAL_COMPLETED, endpoint)
    sub = await js.pull_subscribe(
        subject,
        stream="EVENTS",
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, inactive_threshold=30.0),
    )
    found: events_pb2.TrialCompleted | None = None
    try:
        pending = (await sub.consumer_info()).num_pending or 0
        while pending > 0:
            for msg in await sub.fetch(min(BATCH, pending), timeout=5.0):
                event = decode_event(msg.data, subject=msg.subject)
                if event is not None and event.trial_completed.trial_id == trial_id:
                    found = event.trial_completed
                pending -= 1
    finally:
        with contextlib.suppress(nats.errors.Error):  # the server drops it after inactive_threshold
            await sub.unsubscribe()
    if found is None:
        raise NotFound(f"trial_id: no completed trial {trial_id} of endpoint {endpoint}")
    if not found.passed:
        raise FailedPrecondition(f"trial_id: trial {trial_id} did not pass its gates")
    return TrialConfig(trial_id=trial_id, search_id=found.search_id, engine_config=found.engine_config)
