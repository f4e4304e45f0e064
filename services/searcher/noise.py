"""Is a candidate really better than the baseline, given how noisy the machine is? (pure)

On a shared 2-core VM the same configuration measured ten minutes apart moved its p50 TTFT from 90
to 123 ms: one trial per configuration picks noise. The rule here judges repeated measurements
taken interleaved in time (baseline, candidate, baseline, candidate, ...), so slow drift of the
machine hits both sides of a pair alike:

1. Each pair i gives the log-ratio `d_i = log(candidate_i / baseline_i)` of the metric, signed so
   that a negative value means the candidate is better (for a higher-is-better metric such as
   goodput the ratio is inverted). Zeros become infinite ratios, which order like any other.
2. The effect is the median of the `d_i`, reported as the ratio `exp(median)`; its interval is the
   distribution-free confidence interval of a median from order statistics (the sign test's
   binomial: with n pairs, [d_(k), d_(n+1-k)] covers the median with probability
   1 - 2 P(Bin(n, 1/2) < k)). The widest such interval (k = 1, all pairs) is used when n is too
   small for the asked confidence, and the confidence actually reached is reported.
3. The noise floor is the relative change two measurements of one configuration show (A/A): the
   largest |log(b_{i+1} / b_i)| between the baseline's own repeats, never below `min_floor`.
4. Verdict: BETTER when the whole interval lies beyond the floor on the good side, WORSE when it
   lies beyond it on the bad side, otherwise UNRESOLVED (the gain, if any, is inside the noise).

So a candidate is declared better only when even the least favourable end of its interval beats
the baseline by more than the machine's own A/A spread: with 3 pairs, every pair must win by more
than the floor.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

#: Confidence asked of the median's interval.
DEFAULT_CONFIDENCE = 0.9
#: Smallest relative noise floor used whatever the A/A repeats show (10%: with 3 pairs and 8-15%
#: lognormal noise per measurement, 0.15-0.6% of equal candidates are declared better; see the tests).
DEFAULT_MIN_FLOOR = 0.10


class Verdict(Enum):
    """What the measurements say of the candidate against the baseline."""

    BETTER = "better"  #: better beyond the noise floor, the whole interval
    WORSE = "worse"  #: worse beyond the noise floor, the whole interval
    UNRESOLVED = "unresolved"  #: the interval reaches inside the noise floor


@dataclass(frozen=True)
class Comparison:
    """A candidate against the baseline over interleaved repeated pairs."""

    pairs: int  #: pairs compared
    ratio: float  #: candidate / baseline of the metric, median over pairs (goodput: baseline / candidate)
    ratio_low: float  #: lower end of the ratio's interval
    ratio_high: float  #: upper end of the ratio's interval
    confidence: float  #: probability the interval covers the true median ratio (sign-test exact)
    noise_floor: float  #: relative A/A change taken as noise (0.05 = 5%)
    verdict: Verdict  #: see the module doc
    lower_is_better: bool  #: the metric's direction (p50 TTFT: True; goodput: False)

    @property
    def gain(self) -> float:
        """Relative improvement of the median: 0.4 = the candidate's metric is 40% better."""
        return 1.0 - self.ratio if self.ratio < math.inf else -math.inf

    def describe(self) -> str:
        """One line for a person."""
        return (
            f"{self.verdict.value}: ratio {self.ratio:.3f} [{self.ratio_low:.3f}, {self.ratio_high:.3f}] "
            f"at {self.confidence:.0%} over {self.pairs} interleaved pairs; "
            f"noise floor ±{self.noise_floor:.1%}"
        )


def noise_floor(baseline: Sequence[float], *, min_floor: float = DEFAULT_MIN_FLOOR) -> float:
    """The relative A/A change of one configuration's consecutive repeats (at least `min_floor`)."""
    changes = [
        abs(math.log(b / a))
        for a, b in itertools.pairwise(baseline)
        if 0 < a < math.inf and 0 < b < math.inf  # a failed repeat (0 or infinite) says nothing of noise
    ]
    observed = math.expm1(max(changes)) if changes else 0.0
    return max(min_floor, observed)


def median_interval(values: Sequence[float], *, confidence: float) -> tuple[float, float, float]:
    """(low, high, reached confidence) of the median of `values`, distribution-free.

    The narrowest symmetric order-statistic interval whose coverage is at least `confidence`; the
    full range when even that falls short (its coverage is then what is returned).
    """
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    ordered = sorted(values)
    best_k = 1
    for k in range(1, n // 2 + 1):
        if _coverage(n, k) >= confidence:
            best_k = k
        else:
            break
    return ordered[best_k - 1], ordered[n - best_k], _coverage(n, best_k)


def _coverage(n: int, k: int) -> float:
    """P(d_(k) <= median <= d_(n+1-k)) = 1 - 2 P(Bin(n, 1/2) < k)."""
    tail: float = sum(math.comb(n, i) for i in range(k)) / 2**n
    return 1.0 - 2.0 * tail


def compare(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    lower_is_better: bool,
    confidence: float = DEFAULT_CONFIDENCE,
    min_floor: float = DEFAULT_MIN_FLOOR,
    floor: float | None = None,
) -> Comparison:
    """Judge interleaved pairs (baseline[i] measured next to candidate[i]); see the module doc.

    `floor` replaces the floor the baseline's repeats show (a runner's own A/A measurement).
    """
    if len(baseline) != len(candidate) or not baseline:
        raise ValueError(f"need equal, non-empty pairs: {len(baseline)} baseline, {len(candidate)} candidate")
    pairs = zip(baseline, candidate, strict=True)
    logs = [_log_ratio(b, c, lower_is_better=lower_is_better) for b, c in pairs]
    centre = _median(logs)
    low, high, reached = median_interval(logs, confidence=confidence)
    relative = noise_floor(baseline, min_floor=min_floor) if floor is None else max(min_floor, floor)
    margin = math.log1p(relative)
    if high < -margin:
        verdict = Verdict.BETTER
    elif low > margin:
        verdict = Verdict.WORSE
    else:
        verdict = Verdict.UNRESOLVED
    comparison = Comparison(
        pairs=len(logs),
        ratio=_exp(centre),
        ratio_low=_exp(low),
        ratio_high=_exp(high),
        confidence=reached,
        noise_floor=relative,
        verdict=verdict,
        lower_is_better=lower_is_better,
    )
    assert comparison.ratio_low <= comparison.ratio <= comparison.ratio_high
    return comparison


def _log_ratio(baseline: float, candidate: float, *, lower_is_better: bool) -> float:
    """log(candidate / baseline), oriented so negative = candidate better; zeros give ±inf."""
    if math.isnan(baseline) or math.isnan(candidate):
        raise ValueError("a measurement is NaN")
    numerator, denominator = (candidate, baseline) if lower_is_better else (baseline, candidate)
    if numerator == denominator:  # equal figures, also both 0 or both infinite (both failed)
        return 0.0
    if numerator <= 0 or denominator == math.inf:
        return -math.inf
    if denominator <= 0 or numerator == math.inf:
        return math.inf
    return math.log(numerator / denominator)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    low, high = ordered[mid - 1], ordered[mid]
    if math.isinf(low) or math.isinf(high):
        return low if low == high else (low if abs(low) < abs(high) else high)
    return (low + high) / 2


def _exp(value: float) -> float:
    if value == math.inf:
        return math.inf
    if value == -math.inf:
        return 0.0
    return math.exp(value)
