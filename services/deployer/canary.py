"""Canary analysis: is the canary no worse than the stable deployment? (pure: no I/O, no clock)

At each step of a rollout the deployer gathers, from telemetry, what each arm served over the step
(`ArmWindow`: per-request TTFT and per-request p99 inter-token gap, requests and errors) and asks
`analyse` for a verdict:

- HOLD while either arm has fewer than `min_requests` requests: too little to tell.
- ROLL_BACK when any check fails:
  - TTFT p50 and TTFT tail (p99 from `tail_min_requests` canary requests on, p90 below that): the
    canary's figure exceeds the stable one by more than the relative tolerance AND the absolute
    slack, AND a one-sided Mann-Whitney U test says canary TTFTs are larger (p < `p_value`). The
    test keeps noise from rolling back a good canary; the tolerance keeps a real but trivial shift
    on thousands of requests from doing so.
  - inter-token: the canary's p99 of per-request p99 gaps exceeds the stable one by more than its
    tolerance and slack, AND the same one-sided test says the canary's per-request p99 gaps are
    larger (a p99 over a few dozen requests is their single slowest one: noise alone moves it);
  - errors: the canary's error share exceeds the stable one by more than `max_error_share_increase`;
  - SLO: the canary's attainment is below the target while the stable one meets it.
- PROCEED otherwise.

The thresholds are the rollout policy's (`rollout_policy.RolloutPolicy`, the endpoint's rollout
settings over the deployer's), in the spirit of Argo Rollouts' analysis and Flagger's metric checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from scipy.stats import mannwhitneyu

from evertune.deployer.rollout_policy import RolloutPolicy
from evertune.domain.percentiles import percentile


class Verdict(Enum):
    """What the analysis concluded (the wire's CanaryVerdict)."""

    PROCEED = "proceed"  #: no worse: go to the next step
    HOLD = "hold"  #: not enough requests yet: stay at this weight
    ROLL_BACK = "roll_back"  #: worse: take the canary out


@dataclass(frozen=True)
class ArmWindow:
    """What one arm (canary or stable) served during the step."""

    ttft_ms: Sequence[float]  #: TTFT of each request that got a first token, in ms
    itl_p99_ms: Sequence[float]  #: p99 inter-token gap of each streamed request, in ms
    requests: int  #: requests finished in the step, errors included
    errors: int  #: requests that failed (5xx, upstream error, timeout)
    attainment: float | None = None  #: share meeting the SLO (None = no SLO known)

    @property
    def error_share(self) -> float:
        """Failed share of the requests (0 for none)."""
        return self.errors / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class Check:
    """One check of an analysis."""

    name: str  #: "ttft_p50", "ttft_p99" / "ttft_p90", "itl_p99", "error_share", "attainment"
    canary: float  #: the canary's figure
    stable: float  #: the stable deployment's figure
    passed: bool  #: whether the canary is no worse by this check
    detail: str = ""  #: one line for a person (thresholds, test result)


@dataclass(frozen=True)
class Analysis:
    """The verdict of one step and the evidence behind it."""

    verdict: Verdict  #: what to do
    checks: list[Check] = field(default_factory=list)  #: every check run (empty on HOLD)
    reason: str = ""  #: one line: the first failed check, or why it holds

    @property
    def failed(self) -> list[Check]:
        """The checks that failed."""
        return [c for c in self.checks if not c.passed]


def mann_whitney_greater_p(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided p-value that values of `a` tend to be larger than those of `b` (scipy's Mann-Whitney
    U, normal approximation with tie and continuity corrections). 1.0 when either is empty or every
    value is the same (no ordering to test)."""
    if len(a) == 0 or len(b) == 0 or len({*a, *b}) < 2:
        return 1.0
    return float(mannwhitneyu(a, b, alternative="greater", method="asymptotic", use_continuity=True).pvalue)


def _regressed(canary: float, stable: float, *, relative: float, slack: float) -> bool:
    return canary > stable * (1 + relative) and canary - stable > slack


def _ttft_checks(canary: ArmWindow, stable: ArmWindow, policy: RolloutPolicy) -> list[Check]:
    p = mann_whitney_greater_p(canary.ttft_ms, stable.ttft_ms)
    shifted = p < policy.p_value
    tail_q = 99.0 if len(canary.ttft_ms) >= policy.tail_min_requests else 90.0
    checks = []
    for name, q in (("ttft_p50", 50.0), (f"ttft_p{int(tail_q)}", tail_q)):
        c, s = percentile(canary.ttft_ms, q), percentile(stable.ttft_ms, q)
        worse = _regressed(c, s, relative=policy.max_ttft_regression, slack=policy.ttft_slack_ms)
        checks.append(
            Check(
                name=name,
                canary=c,
                stable=s,
                passed=not (worse and shifted),
                detail=(
                    f"canary {c:.1f} ms vs stable {s:.1f} ms (allowed +{policy.max_ttft_regression:.0%} "
                    f"and +{policy.ttft_slack_ms:g} ms); Mann-Whitney p={p:.3g}"
                ),
            )
        )
    return checks


def analyse(
    *, canary: ArmWindow, stable: ArmWindow, policy: RolloutPolicy, attainment_target: float
) -> Analysis:
    """The verdict of one canary step (see the module docstring for the checks)."""
    for arm, window in (("canary", canary), ("stable", stable)):
        if window.requests < policy.min_requests:
            return Analysis(
                verdict=Verdict.HOLD,
                reason=f"{arm} served {window.requests} requests, {policy.min_requests} needed to judge",
            )
    checks = _ttft_checks(canary, stable, policy)
    if canary.itl_p99_ms and stable.itl_p99_ms:
        c, s = percentile(canary.itl_p99_ms, 99.0), percentile(stable.itl_p99_ms, 99.0)
        worse = _regressed(c, s, relative=policy.max_itl_regression, slack=policy.itl_slack_ms)
        # the p99 of a few dozen requests is their slowest one: a shift must also be significant
        p = mann_whitney_greater_p(canary.itl_p99_ms, stable.itl_p99_ms)
        detail = f"canary {c:.1f} ms vs stable {s:.1f} ms; Mann-Whitney p={p:.3g}"
        checks.append(Check("itl_p99", c, s, not (worse and p < policy.p_value), detail))
    increase = canary.error_share - stable.error_share
    checks.append(
        Check(
            "error_share",
            canary.error_share,
            stable.error_share,
            increase <= policy.max_error_share_increase,
            f"canary {canary.error_share:.2%} vs stable {stable.error_share:.2%}",
        )
    )
    if canary.attainment is not None and stable.attainment is not None:
        missed = canary.attainment < attainment_target <= stable.attainment
        checks.append(
            Check(
                "attainment",
                canary.attainment,
                stable.attainment,
                not missed,
                f"canary {canary.attainment:.1%} vs target {attainment_target:.1%}",
            )
        )
    failed = [c for c in checks if not c.passed]
    if failed:
        return Analysis(
            verdict=Verdict.ROLL_BACK, checks=checks, reason=f"{failed[0].name}: {failed[0].detail}"
        )
    return Analysis(verdict=Verdict.PROCEED, checks=checks, reason="canary no worse on every check")
