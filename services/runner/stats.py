"""What the runner is doing and what it counted, as plain data: one `RunnerStats` per runner.

The service keeps it as trials go (`trial_ended`, `event`, `failure`, the trial and phase in hand);
two readers render it, neither keeps figures of its own: `details()` is the runner's state as
`evertune status` shows it, and `metrics.runner_metrics` its Prometheus families.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evertune.domain.engines.fingerprint import Fingerprint
from evertune.infra.bus import ConsumerStats
from evertune.infra.runtime.metrics import SLOW_BUCKETS, Distribution

if TYPE_CHECKING:
    from evertune.runner.trial_runner import TrialOutcome

#: Phases timed in a trial, as the `phase` label names them.
PHASES = ("engine_start", "warmup", "golden", "replay", "engine_stop")
#: Buckets (s) of one phase: from a sim engine's ~0.1 s start to a long replay.
PHASE_BUCKETS = (0.1, 0.5, *SLOW_BUCKETS)


def _slow() -> Distribution:
    return Distribution(SLOW_BUCKETS)


@dataclass
class RunnerStats:
    """The runner's state and counts (see the module doc)."""

    hardware: str  #: the hardware class whose jobs this runner takes
    jobs_subject: str  #: the subject those jobs arrive on
    durable: str  #: the jobs consumer's durable name (shared by every runner of the class)
    instance: str  #: this runner: host, pid and a random suffix
    current_trial: str = ""  #: trial running now ("": idle)
    phase: str = ""  #: its phase (a `TrialPhase` name; "": idle)
    fingerprint: Fingerprint | None = None  #: the hardware of the last trial (None: none yet)
    trials: dict[str, int] = field(default_factory=dict)  #: trials run to an end, by outcome
    trial_seconds: Distribution = field(default_factory=_slow)  #: a trial, taken to reported
    #: seconds of each phase of a trial, by phase (`PHASES`)
    phase_seconds: dict[str, Distribution] = field(default_factory=dict)
    republished: int = 0  #: redelivered jobs answered from the store
    events: dict[str, int] = field(default_factory=dict)  #: events published, by kind
    failures: dict[str, int] = field(default_factory=dict)  #: failures, by kind
    #: the jobs consumer's counts, kept by the consumer (None: before start)
    jobs: ConsumerStats | None = None
    #: jobs of this class waiting in JOBS (not yet delivered to the class's durable), as of the last
    #: scrape (None: unknown, JetStream did not answer)
    jobs_pending: int | None = None

    @property
    def trials_run(self) -> int:
        """Trials run to an outcome (any status)."""
        return sum(self.trials.values())

    @property
    def trials_failed(self) -> int:
        """Of those, the ones whose status is not ok (error, timeout, cancelled)."""
        return self.trials_run - self.trials.get("passed", 0) - self.trials.get("failed_gates", 0)

    @property
    def cancelled(self) -> int:
        """Trials stopped or skipped because their search ended."""
        return self.trials.get("cancelled", 0)

    def trial_ended(self, outcome: TrialOutcome) -> None:
        """Count one trial that ran to an outcome, with its phases' durations."""
        label = "passed" if outcome.passed else "failed_gates" if outcome.status == "ok" else outcome.status
        self.trials[label] = self.trials.get(label, 0) + 1
        if outcome.status in ("error", "timeout"):
            self.failure(f"trial_{outcome.status}")
        if outcome.finished_at > 0:
            self.trial_seconds.observe(max(0.0, outcome.finished_at - outcome.started_at))
        phases = {
            "engine_start": outcome.startup_s,
            "warmup": outcome.warmup_s,
            "golden": outcome.golden_s,
            "replay": outcome.replay_s,
            "engine_stop": outcome.stop_s,
        }
        for phase, seconds in phases.items():
            if math.isnan(seconds) or (seconds <= 0 and phase != "engine_start"):
                continue  # a phase the trial did not reach
            self.phase_seconds.setdefault(phase, Distribution(PHASE_BUCKETS)).observe(seconds)

    def event(self, kind: str) -> None:
        """Count one event published."""
        self.events[kind] = self.events.get(kind, 0) + 1

    def failure(self, kind: str) -> None:
        """Count one failure of `kind`."""
        self.failures[kind] = self.failures.get(kind, 0) + 1

    def details(self) -> dict[str, Any]:
        """The runner's state as `evertune status` shows it."""
        jobs = self.jobs or ConsumerStats()
        return {
            "hardware": self.hardware,
            "fingerprint": self.fingerprint.id if self.fingerprint else "",
            "tier": self.fingerprint.tier if self.fingerprint else "",
            "jobs_subject": self.jobs_subject,
            "instance": self.instance,
            "trial": self.current_trial,
            "phase": self.phase,
            "trials_run": self.trials_run,
            "trials_failed": self.trials_failed,
            "republished": self.republished,
            "retried": jobs.retried,
            "abandoned": jobs.abandoned,
            "poisoned": jobs.poisoned,
            "cancelled": self.cancelled,
        }
