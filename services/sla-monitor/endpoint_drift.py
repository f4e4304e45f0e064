"""One endpoint's drift state: its detector, where its reference came from, and its reports (pure:
time is an argument). See `EndpointDrift`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from evertune.sla_monitor.drift import DriftConfig, DriftDetector, DriftFinding
from evertune.sla_monitor.drift_reference import DriftReference, DriftSample, ReferenceBuilder

#: Where an endpoint's reference came from.
ReferenceSource = Literal["none", "traffic", "profile"]


@dataclass(frozen=True)
class DriftReport:
    """The findings of one check of one endpoint (maps onto one `drift.detected` event)."""

    endpoint: str  #: endpoint name
    time_s: float  #: check time, seconds since the epoch
    findings: tuple[DriftFinding, ...]  #: what moved (at least one)
    reference_profile_id: str  #: profile id of the reference; "" for one learnt from traffic
    reference_source: ReferenceSource  #: "profile" (a profile.ready) or "traffic" (learnt live)
    reference_span_s: float  #: seconds the reference covers
    reference_requests: int  #: requests in the reference


@dataclass
class EndpointDrift:
    """One endpoint's drift detector and the reference it compares with (pure; time is an argument).

    The reference is the profile the current deployment was tuned on when one is known
    (`use_profile`, from a `profile.ready`); until then it is learnt from the endpoint's own traffic:
    the first `reference_s` seconds after start (state "learning"), then compared ("watching"). A
    finding on a workload feature (lengths, rate, reuse) starts a new learning period, so the moved
    traffic becomes the reference and the same move is not reported again; a TTFT change-point does
    not (the CUSUM re-learns its own baseline). A deployment change (`deployment_changed`) restarts
    the TTFT baseline, and a traffic-learnt reference too (a profile reference is kept: the new
    deployment was tuned on it).
    """

    endpoint: str  #: endpoint name
    config: DriftConfig  #: thresholds and windows
    reference_s: float  #: seconds of traffic a traffic-learnt reference spans
    seed: int = 0  #: seed of the reference's reservoir sample
    detector: DriftDetector = field(init=False)  #: the live window and the tests
    source: ReferenceSource = field(init=False, default="none")  #: where the reference came from
    findings: int = field(init=False, default=0)  #: findings reported so far
    last_report: DriftReport | None = field(init=False, default=None)  #: the latest report
    _builder: ReferenceBuilder | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.detector = DriftDetector(DriftReference.empty(), self.config)
        self._learn()

    @property
    def state(self) -> Literal["learning", "watching"]:
        """ "learning" while a reference is being learnt from traffic, "watching" otherwise."""
        return "learning" if self._builder is not None else "watching"

    @property
    def learnt_requests(self) -> int:
        """Requests in the reference being learnt (0 when watching)."""
        return self._builder.requests if self._builder is not None else 0

    def _learn(self) -> None:
        self.detector.set_reference(DriftReference.empty())
        self.detector.reset_window()
        self._builder = ReferenceBuilder(
            prefix_horizon_s=self.config.prefix_horizon_s,
            max_prefix_hashes=self.config.max_prefix_hashes,
            seed=self.seed,
        )

    def observe(self, sample: DriftSample) -> None:
        """Feed one served request."""
        self.detector.observe(sample)
        if self._builder is not None:
            self._builder.add(sample)

    def use_profile(self, profile: DriftReference) -> None:
        """Make `profile` the reference (a `profile.ready` for this endpoint)."""
        self._builder = None
        self.detector.set_reference(profile)
        self.source = "profile"

    def deployment_changed(self) -> None:
        """The endpoint's stable deployment changed: new TTFT baseline; re-learn a traffic reference."""
        self.detector.cusum.reset()
        if self.source != "profile":
            self.source = "none"
            self._learn()

    def check(self, now: float) -> DriftReport | None:
        """Finish learning when due, then compare; a report when something moved."""
        b = self._builder
        if b is not None and b.requests >= 2 and now - b.first_s >= self.reference_s:
            self.detector.set_reference(b.build())
            self._builder = None
            self.source = "traffic"
        findings = self.detector.check(now)
        if not findings:
            return None
        ref = self.detector.reference
        report = DriftReport(
            endpoint=self.endpoint,
            time_s=now,
            findings=tuple(findings),
            reference_profile_id=ref.profile_id,
            reference_source=self.source,
            reference_span_s=ref.span_s,
            reference_requests=ref.requests,
        )
        self.findings += len(findings)
        self.last_report = report
        if any(f.feature != "ttft_ms" for f in findings):
            self.source = "none"
            self._learn()
        return report
