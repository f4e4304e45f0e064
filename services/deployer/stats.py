"""What the deployer counts, as plain data: `State.emit` counts every event it emits (analyses by
verdict, rollbacks by trigger, promotions), the rollouts count weight steps and time analyses, and
engine reports are counted by kind. `metrics.py` exports it."""

from __future__ import annotations

from dataclasses import dataclass, field

from evertune.infra.runtime.metrics import FAST_BUCKETS, Distribution
from evertune.v1 import events_pb2


def enum_label(name: str, prefix: str) -> str:
    """A protobuf enum value's name as a label value: `CANARY_VERDICT_ROLL_BACK` -> `roll_back`."""
    return name.removeprefix(prefix).lower()


@dataclass
class DeployerStats:
    """What the deployer counts, kept as plain data (exported by `DeployerMetrics`)."""

    events: dict[str, int] = field(default_factory=dict)  #: events emitted, by kind
    analyses: dict[str, int] = field(default_factory=dict)  #: canary analyses, by verdict
    rollbacks: dict[str, int] = field(default_factory=dict)  #: deploy.rolled_back, by trigger
    promotions: int = 0  #: deploy.promoted emitted
    rollout_steps: int = 0  #: canary weights set
    #: seconds of each canary analysis
    analysis_seconds: Distribution = field(default_factory=lambda: Distribution(FAST_BUCKETS))
    engine_reports: dict[str, int] = field(default_factory=dict)  #: backend reports, by kind
    failures: dict[str, int] = field(default_factory=dict)  #: failures, by kind

    def emitted(self, event: events_pb2.Event, *, published: bool) -> None:
        """Count one event the deployer emitted (what it says, whether or not it got out)."""
        self.events[event.kind] = self.events.get(event.kind, 0) + 1
        if not published:
            self.failure("event_unpublished")
        payload = event.WhichOneof("payload")
        if payload == "deploy_canary_step":
            verdict = events_pb2.CanaryVerdict.Name(event.deploy_canary_step.verdict)
            label = enum_label(verdict, "CANARY_VERDICT_")
            self.analyses[label] = self.analyses.get(label, 0) + 1
        elif payload == "deploy_rolled_back":
            trigger = events_pb2.DeployTrigger.Name(event.deploy_rolled_back.trigger)
            label = enum_label(trigger, "DEPLOY_TRIGGER_")
            self.rollbacks[label] = self.rollbacks.get(label, 0) + 1
        elif payload == "deploy_promoted":
            self.promotions += 1

    def engine_report(self, kind: str) -> None:
        """Count one report of the serving backend (an engine exited, restarted, was given up)."""
        self.engine_reports[kind] = self.engine_reports.get(kind, 0) + 1

    def failure(self, kind: str) -> None:
        """Count one failure of `kind`."""
        self.failures[kind] = self.failures.get(kind, 0) + 1
