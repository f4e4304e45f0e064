"""Workload drift and TTFT change-points (pure: no I/O, time is an argument).

A `DriftReference` is the reference: the traffic the current deployment was tuned on (prompt and
output length samples, arrival rate, prefix reuse share). A `DriftDetector` is fed every request
(`observe`), keeps a bounded recent window (the last N requests per feature, arrival counts per
second over the last `rate_window_s`), and `check(now)` compares that window with the reference:

| feature | test (`DriftFinding.test`) | measure | effect floor |
|---|---|---|---|
| `prompt_tokens`, `completion_tokens` | `ks` two-sample Kolmogorov-Smirnov (asympt. p) | median | relative |
| (reference from a summary) | `sign_z`: live share above the reference median vs 1/2 | median | relative |
| `rate_rps` | `poisson_rate_z`: z of the log rate ratio, var 1/K_live + 1/K_ref | rate | relative |
| `prefix_reuse_share` | `two_proportion_z`, n = requests (not blocks) | share | absolute |
| `ttft_ms` | `cusum`: one-sided CUSUM on standardised log TTFT (on observe) | geometric mean | k, h |

A finding needs BOTH p < `p_value` AND the effect floor: with thousands of samples a test alone
flags trivial shifts; the floor alone flags noise on small samples. After a finding the feature
is quiet for `cooldown_s` (the same shift is not reported again until then; if it persists and the
reference was not replaced, it is reported again after the cooldown).

Prefix reuse share: the share of prompt tokens a prefix cache keeping blocks `prefix_horizon_s`
could serve, by the profiler's definition (`workloads.prefix_reuse`: leading blocks of the
`prefix_hashes` chain sent within the horizon, over all prompt tokens). The first
`prefix_horizon_s` of any stream only primes the seen-set (nothing can be "seen before" at the
start), in the reference and in the live window alike. Blocks of one request are strongly
correlated (a chain), so the z-test counts requests, not blocks, as trials.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import stats
from scipy.special import kolmogi, kolmogorov

from evertune.domain.workloads.prefix_reuse import HORIZON_S, leading_reused, reused_tokens

#: Feature names, as in `DriftSignal.feature` (plus "ttft_ms" for the change-point detector).
Feature = Literal["prompt_tokens", "completion_tokens", "rate_rps", "prefix_reuse_share", "ttft_ms"]
#: Test behind a finding.
TestName = Literal["ks", "sign_z", "poisson_rate_z", "two_proportion_z", "cusum"]
#: What `reference_value` and `live_value` of a finding are.
Measure = Literal["median", "rate", "share", "geometric_mean"]

FloatArray = npt.NDArray[np.float64]


# --------------------------------------------------------------------------------------------------
# Statistics (numpy; the Kolmogorov distribution from scipy)


def normal_two_sided_p(z: float) -> float:
    """Two-sided p-value of a standard normal statistic."""
    return math.erfc(abs(z) / math.sqrt(2.0))


def ks_2samp(a: FloatArray, b: FloatArray) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov: (D, asymptotic two-sided p-value).

    p uses the Stephens correction (Numerical Recipes 14.3): Q((sqrt(ne) + 0.12 + 0.11/sqrt(ne)) D),
    ne = n m / (n + m). With ties (integer token counts) the test is conservative.
    """
    if len(a) == 0 or len(b) == 0:
        return 0.0, 1.0
    d = float(stats.ks_2samp(a, b, method="asymp").statistic)
    ne = len(a) * len(b) / (len(a) + len(b))
    root = math.sqrt(ne)
    return d, float(kolmogorov((root + 0.12 + 0.11 / root) * d))


def z_critical(p_value: float) -> float:
    """|z| a two-sided normal test must exceed to reach `p_value` (3.29 for 0.001)."""
    return NormalDist().inv_cdf(1.0 - p_value / 2.0)


def ks_critical(p_value: float, *, n: int, m: int) -> float:
    """KS distance D whose asymptotic p (as `ks_2samp` computes it) is `p_value` for samples of n and m."""
    ne = n * m / (n + m)
    root = math.sqrt(ne)
    return float(kolmogi(p_value)) / (root + 0.12 + 0.11 / root)


def sign_test_z(live: FloatArray, median: float) -> float:
    """z of the share of `live` above a reference `median` against 1/2 (ties count half).

    Under no change half the live values lie above the reference median: k ~ Binomial(n, 1/2),
    z = (k - n/2) / sqrt(n/4). Positive when the live values are larger."""
    n = len(live)
    if n == 0:
        return 0.0
    above = float(np.sum(live > median)) + 0.5 * float(np.sum(live == median))
    return (above - n / 2.0) / math.sqrt(n / 4.0)


def rate_ratio_z(*, live_count: int, live_s: float, ref_count: int, ref_s: float) -> float:
    """z of log(live rate / reference rate) for Poisson counts (var of a log count ~ 1/count)."""
    if live_count <= 0 or ref_count <= 0:
        return math.inf if live_count != ref_count else 0.0
    log_ratio = math.log((live_count / live_s) / (ref_count / ref_s))
    return log_ratio / math.sqrt(1.0 / live_count + 1.0 / ref_count)


def two_proportion_z(*, p1: float, n1: int, p0: float, n0: int) -> float:
    """Pooled two-proportion z statistic of p1 (n1 trials) against p0 (n0 trials)."""
    pooled = (p1 * n1 + p0 * n0) / (n1 + n0)
    var = pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n0)
    if var <= 0:
        return 0.0 if p1 == p0 else math.inf
    return (p1 - p0) / math.sqrt(var)


def _relative(live: float, ref: float) -> float:
    return live / ref - 1.0 if ref else (0.0 if live == ref else math.inf)


# --------------------------------------------------------------------------------------------------
# Prefix reuse


class PrefixReuseTracker:
    """Which prefix-block hashes were seen within `horizon_s` (bounded: at most `max_hashes` kept)."""

    def __init__(self, *, horizon_s: float, max_hashes: int) -> None:
        if horizon_s <= 0 or max_hashes <= 0:
            raise ValueError(f"need horizon_s > 0 and max_hashes > 0, got {horizon_s}, {max_hashes}")
        self.horizon_s = horizon_s
        self.max_hashes = max_hashes
        self._seen: OrderedDict[int, float] = OrderedDict()  # hash -> last seen, oldest first
        self.first_s: float | None = None  #: time of the first request observed

    def observe(
        self, now: float, hashes: Sequence[int], *, block_tokens: int, prompt_tokens: int
    ) -> tuple[int, int] | None:
        """Record a request's block hashes; (reused prompt tokens, prompt tokens) by the one
        definition (`workloads.prefix_reuse`), or None while priming.

        Priming: during the first `horizon_s` after the first request nothing is counted, since
        nothing before the stream could have been seen.
        """
        if self.first_s is None:
            self.first_s = now
        blocks = leading_reused(hashes, self._seen, now=now, horizon_s=self.horizon_s)
        for h in hashes:
            last = self._seen.get(h)
            self._seen[h] = max(now, last) if last is not None else now
            self._seen.move_to_end(h)
        cutoff = now - self.horizon_s
        while self._seen and (len(self._seen) > self.max_hashes or next(iter(self._seen.values())) < cutoff):
            self._seen.popitem(last=False)
        if now < self.first_s + self.horizon_s:
            return None
        return reused_tokens(blocks, block_tokens=block_tokens, prompt_tokens=prompt_tokens), prompt_tokens


# --------------------------------------------------------------------------------------------------
# Reference profile


@dataclass(frozen=True)
class DriftSample:
    """One request, reduced to what drift detection needs (converted from a RequestRecord)."""

    time_s: float  #: when the gateway received it, seconds since the Unix epoch
    prompt_tokens: int  #: prompt length, tokens
    output_tokens: int  #: completion length, tokens
    prefix_hashes: tuple[int, ...] = ()  #: prefix chain of the prompt's token blocks (keyed hashes)
    prefix_block_tokens: int = 0  #: tokens per hashed block (0: no hashes made)
    ttft_ms: float = 0.0  #: client-observed TTFT, ms (0 = no token sent)


@dataclass(frozen=True, eq=False)
class DriftReference:
    """What the current deployment was tuned on (the reference of every drift test)."""

    prompt_sample: FloatArray  #: prompt lengths, tokens (all, or a uniform reservoir sample)
    output_sample: FloatArray  #: completion lengths, tokens (same requests as prompt_sample)
    requests: int  #: requests in the reference window
    span_s: float  #: time from the first to the last request, seconds
    reuse_tokens: int  #: prompt tokens in blocks already sent within the horizon (after priming)
    total_tokens: int  #: prompt tokens counted (after priming)
    reuse_requests: int  #: requests counted for prefix reuse (after priming)
    profile_id: str = ""  #: id of the profile (e.g. the profiler's `profile.ready`), "" if none
    prompt_p50: float | None = None  #: median prompt length when no sample is held (a summary)
    output_p50: float | None = None  #: median completion length when no sample is held (a summary)
    start_s: float = 0.0  #: time of the first request, seconds since the epoch (0 = unknown)

    @classmethod
    def empty(cls) -> DriftReference:
        """No reference: every test is skipped (only the TTFT change-point runs)."""
        none: FloatArray = np.zeros(0, dtype=np.float64)
        return cls(none, none, requests=0, span_s=0.0, reuse_tokens=0, total_tokens=0, reuse_requests=0)

    @classmethod
    def from_summary(
        cls,
        *,
        requests: int,
        span_s: float,
        rate_rps: float,
        prompt_p50: float,
        output_p50: float,
        prefix_reuse_share: float | None,
        profile_id: str,
        start_s: float = 0.0,
    ) -> DriftReference:
        """A reference from a profile's summary (the profiler's `WorkloadSummary`): medians, not
        samples, so the length tests become sign tests against the reference median.

        `rate_rps` > 0 sets the span to (requests - 1) / rate (the rate the profile states);
        otherwise `span_s` is used. A reuse share of None leaves the reuse test out."""
        none: FloatArray = np.zeros(0, dtype=np.float64)
        span = (requests - 1) / rate_rps if rate_rps > 0 and requests > 1 else span_s
        reuse_n = requests if prefix_reuse_share is not None else 0
        tokens = 1_000_000 if prefix_reuse_share is not None else 0
        return cls(
            none,
            none,
            requests=requests,
            span_s=span,
            reuse_tokens=round((prefix_reuse_share or 0.0) * tokens),
            total_tokens=tokens,
            reuse_requests=reuse_n,
            profile_id=profile_id,
            prompt_p50=prompt_p50 if prompt_p50 > 0 else None,
            output_p50=output_p50 if output_p50 > 0 else None,
            start_s=start_s,
        )

    def median(self, which: Literal["prompt", "output"]) -> float | None:
        """Reference median length, tokens: of the sample, else the summary's; None when neither."""
        sample = self.prompt_sample if which == "prompt" else self.output_sample
        if len(sample):
            return float(np.median(sample))
        return self.prompt_p50 if which == "prompt" else self.output_p50

    @property
    def rate_rps(self) -> float:
        """Arrival rate, requests/s: (requests - 1) arrivals over the span."""
        return (self.requests - 1) / self.span_s if self.span_s > 0 else 0.0

    @property
    def prefix_reuse_share(self) -> float | None:
        """Share of prompt tokens a prefix cache of the horizon could serve; None when nothing was counted."""
        return self.reuse_tokens / self.total_tokens if self.total_tokens else None

    def prompt_quantiles(self) -> dict[str, float]:
        """p50/p90/p99 of prompt length, tokens."""
        return _quantiles(self.prompt_sample)

    def output_quantiles(self) -> dict[str, float]:
        """p50/p90/p99 of completion length, tokens."""
        return _quantiles(self.output_sample)

    @classmethod
    def from_samples(
        cls,
        samples: Iterable[DriftSample],
        *,
        prefix_horizon_s: float = HORIZON_S,
        max_prefix_hashes: int = 200_000,
        sample_size: int = 5000,
        seed: int = 0,
        profile_id: str = "",
    ) -> DriftReference:
        """Build a reference from requests in time order (reservoir of `sample_size` lengths)."""
        builder = ReferenceBuilder(
            prefix_horizon_s=prefix_horizon_s,
            max_prefix_hashes=max_prefix_hashes,
            sample_size=sample_size,
            seed=seed,
        )
        for s in samples:
            builder.add(s)
        return builder.build(profile_id=profile_id)


class ReferenceBuilder:
    """Builds a `DriftReference` one request at a time, in bounded memory (a reservoir of lengths
    and the bounded prefix seen-set): what the service learns a reference from live traffic with."""

    def __init__(
        self,
        *,
        prefix_horizon_s: float = HORIZON_S,
        max_prefix_hashes: int = 200_000,
        sample_size: int = 5000,
        seed: int = 0,
    ) -> None:
        self.sample_size = sample_size
        self._rng = np.random.default_rng(seed)
        self._tracker = PrefixReuseTracker(horizon_s=prefix_horizon_s, max_hashes=max_prefix_hashes)
        self._prompts: list[float] = []
        self._outputs: list[float] = []
        self.requests = 0  #: requests added
        self.first_s = math.inf  #: earliest request time added
        self.last_s = -math.inf  #: latest request time added
        self._reused = self._tokens = self._reuse_requests = 0

    def add(self, s: DriftSample) -> None:
        """Add one request (times roughly in order; the span is max - min)."""
        self.requests += 1
        self.first_s = min(self.first_s, s.time_s)
        self.last_s = max(self.last_s, s.time_s)
        if len(self._prompts) < self.sample_size:
            self._prompts.append(float(s.prompt_tokens))
            self._outputs.append(float(s.output_tokens))
        else:
            j = int(self._rng.integers(0, self.requests))
            if j < self.sample_size:
                self._prompts[j] = float(s.prompt_tokens)
                self._outputs[j] = float(s.output_tokens)
        counted = self._tracker.observe(
            max(s.time_s, self.last_s), s.prefix_hashes, block_tokens=s.prefix_block_tokens,
            prompt_tokens=s.prompt_tokens,
        )  # fmt: skip
        if counted is not None and counted[1] > 0:
            self._reused += counted[0]
            self._tokens += counted[1]
            self._reuse_requests += 1

    def build(self, *, profile_id: str = "") -> DriftReference:
        """The reference of everything added so far."""
        return DriftReference(
            prompt_sample=np.asarray(self._prompts, dtype=np.float64),
            output_sample=np.asarray(self._outputs, dtype=np.float64),
            requests=self.requests,
            span_s=self.last_s - self.first_s if self.requests else 0.0,
            reuse_tokens=self._reused,
            total_tokens=self._tokens,
            reuse_requests=self._reuse_requests,
            profile_id=profile_id,
            start_s=self.first_s if self.requests else 0.0,
        )


def _quantiles(sample: FloatArray) -> dict[str, float]:
    if len(sample) == 0:
        return {}
    p50, p90, p99 = np.quantile(sample, [0.5, 0.9, 0.99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99)}


# --------------------------------------------------------------------------------------------------
# TTFT change-point


@dataclass
class CusumAlarm:
    """A TTFT change-point the CUSUM fired on."""

    time_s: float  #: time of the request that made it fire
    change_s: float  #: estimated start of the change: the last time the sum was 0
    reference_ms: float  #: baseline TTFT (geometric mean learnt in the warm-up), ms
    live_ms: float  #: geometric mean TTFT since the estimated change, ms
    statistic: float  #: CUSUM value when it fired (in baseline standard deviations)
    requests_since_change: int  #: requests from the estimated change to the alarm


class TtftCusum:
    """One-sided (upward) CUSUM on log TTFT, standardised by a baseline learnt from a warm-up.

    S = max(0, S + z - k), z = clip((log ttft - mu) / sigma, +-z_clip); fires when S > h. mu and
    sigma are the mean and standard deviation of the first `warmup` log TTFTs; the clip keeps one
    wild outlier from firing it alone (it needs ceil(h / (z_clip - k)) = 4 in a row at least).
    After an alarm the sum is reset and the baseline re-learnt from the next `warmup` requests, so
    one change gives one alarm.

    Defaults (k = 0.75, h = 10, warm-up 1000), simulated with Gaussian log TTFT and the baseline
    estimated from the warm-up: 1 false alarm in 2000 runs of 20k requests (40M requests); a TTFT
    x2 (2 sigma at sigma 0.35) is found after 9 requests on average (p99 16, max 21), x1.5 after 24
    (p99 60), x1.3 after 134 (p99 605).
    """

    def __init__(self, *, warmup: int = 1000, k: float = 0.75, h: float = 10.0, z_clip: float = 4.0) -> None:
        if warmup < 10 or k < 0 or h <= 0 or z_clip <= k:
            raise ValueError(
                f"need warmup >= 10, k >= 0, h > 0, z_clip > k; got {warmup}, {k}, {h}, {z_clip}"
            )
        self.warmup = warmup
        self.k = k
        self.h = h
        self.z_clip = z_clip
        self._learning: list[float] = []
        self.mu: float | None = None  #: baseline mean of log TTFT (None while warming up)
        self.sigma: float = 1.0  #: baseline standard deviation of log TTFT
        self.s = 0.0  #: current CUSUM value
        self._since_zero_sum = 0.0  # sum of log TTFT since the sum was last 0
        self._since_zero_n = 0
        self._zero_s = 0.0  # time the sum was last 0
        self.alarms = 0  #: alarms so far

    def observe(self, *, now: float, ttft_ms: float) -> CusumAlarm | None:
        """Feed one TTFT (ms > 0); returns an alarm when the sum crosses h."""
        x = math.log(ttft_ms)
        if self.mu is None:
            self._learning.append(x)
            if len(self._learning) >= self.warmup:
                arr = np.asarray(self._learning)
                self.mu, self.sigma = float(arr.mean()), max(float(arr.std(ddof=1)), 1e-3)
                self._learning = []
                self._zero_s = now
            return None
        z = min(self.z_clip, max(-self.z_clip, (x - self.mu) / self.sigma))
        self.s = max(0.0, self.s + z - self.k)
        if self.s == 0.0:
            self._since_zero_sum, self._since_zero_n, self._zero_s = 0.0, 0, now
            return None
        self._since_zero_sum += x
        self._since_zero_n += 1
        if self.s <= self.h:
            return None
        alarm = CusumAlarm(
            time_s=now,
            change_s=self._zero_s,
            reference_ms=math.exp(self.mu),
            live_ms=math.exp(self._since_zero_sum / self._since_zero_n),
            statistic=self.s,
            requests_since_change=self._since_zero_n,
        )
        self.alarms += 1
        self.reset()
        return alarm

    def reset(self) -> None:
        """Forget the baseline and the sum; the next `warmup` requests learn a new baseline."""
        self.mu, self.sigma, self.s = None, 1.0, 0.0
        self._learning = []
        self._since_zero_sum, self._since_zero_n = 0.0, 0


# --------------------------------------------------------------------------------------------------
# Detector


@dataclass(frozen=True)
class DriftConfig:
    """Thresholds and window sizes of drift detection (see the module docstring)."""

    window_requests: int = 2000  #: live window: the last N requests per length / reuse feature
    min_requests: int = 500  #: live and reference samples a length or reuse test needs
    p_value: float = 0.001  #: a test must reach p below this
    min_length_shift: float = 0.15  #: relative median shift a length finding needs (0.15 = 15%)
    min_rate_shift: float = 0.20  #: relative arrival-rate shift a rate finding needs
    min_reuse_shift: float = 0.10  #: absolute prefix-reuse-share shift a reuse finding needs
    rate_window_s: float = 300.0  #: arrivals are counted over the last this many seconds
    min_rate_count: int = 100  #: arrivals (live and reference) a rate test needs
    prefix_horizon_s: float = HORIZON_S  #: a block counts as reused when its hash was sent this recently
    max_prefix_hashes: int = 200_000  #: prefix hashes remembered (oldest forgotten first)
    cooldown_s: float = 1800.0  #: after a finding, the same feature is not reported for this long
    cusum_warmup: int = 1000  #: requests that learn the TTFT baseline (and re-learn after an alarm)
    cusum_k: float = 0.75  #: CUSUM allowance, in baseline standard deviations of log TTFT
    cusum_h: float = 10.0  #: CUSUM threshold, in baseline standard deviations
    cusum_z_clip: float = 4.0  #: each standardised log TTFT is clipped to +- this


@dataclass(frozen=True)
class DriftFinding:
    """One feature that drifted from the reference (maps onto `DriftSignal`)."""

    feature: Feature  #: what drifted
    test: TestName  #: test behind it
    statistic: float  #: the test's statistic (KS D, z, or the CUSUM value)
    p_value: float | None  #: the test's p-value (None for the CUSUM)
    reference_value: float  #: reference value of `measure`: median tokens, requests/s, share, TTFT ms
    live_value: float  #: the same measure over the live window
    relative_change: float  #: live / reference - 1 (0.4 = 40% higher)
    time_s: float  #: when it was found (check time; for the CUSUM the request that fired it)
    live_requests: int  #: requests behind the live value
    reference_requests: int  #: requests behind the reference value
    measure: Measure = "median"  #: what reference_value / live_value are
    critical_value: float = 0.0  #: |statistic| had to exceed this (the p threshold's; h for the CUSUM)
    p_value_threshold: float | None = None  #: p had to be below this (None for the CUSUM)
    min_change: float = 0.0  #: effect floor passed: relative (lengths, rate), absolute (share), 0 (cusum)
    live_window_s: float = 0.0  #: seconds the live values span


class _Ring:
    """The last `size` values of one feature (numpy ring)."""

    def __init__(self, size: int) -> None:
        self._values: FloatArray = np.zeros(size, dtype=np.float64)
        self._next = 0
        self.count = 0  #: values held (at most size)

    def add(self, value: float) -> None:
        self._values[self._next] = value
        self._next = (self._next + 1) % len(self._values)
        self.count = min(self.count + 1, len(self._values))

    def values(self) -> FloatArray:
        return self._values[: self.count] if self.count < len(self._values) else self._values

    def clear(self) -> None:
        self._next = self.count = 0


class DriftDetector:
    """Live window of one endpoint's traffic, compared with a reference profile on `check`."""

    def __init__(self, reference: DriftReference, config: DriftConfig | None = None) -> None:
        self.config = config or DriftConfig()
        c = self.config
        self.reference = reference
        self._prompt = _Ring(c.window_requests)
        self._output = _Ring(c.window_requests)
        self._reused = _Ring(c.window_requests)  # reused prompt tokens per request (after priming)
        self._tokens = _Ring(c.window_requests)  # prompt tokens per request (after priming)
        self._times = _Ring(c.window_requests)  # arrival times of the length window's requests
        self._prefix = PrefixReuseTracker(horizon_s=c.prefix_horizon_s, max_hashes=c.max_prefix_hashes)
        self._arrivals: deque[list[int]] = deque()  # [second, count], oldest first
        self._first_s: float | None = None
        self.cusum = TtftCusum(warmup=c.cusum_warmup, k=c.cusum_k, h=c.cusum_h, z_clip=c.cusum_z_clip)
        self._pending: list[DriftFinding] = []  # CUSUM findings waiting for the next check
        self._last_finding: dict[Feature, float] = {}
        self.observed = 0  #: requests observed

    def set_reference(self, reference: DriftReference) -> None:
        """Replace the reference (after a re-tune); clears cooldowns, keeps the live window."""
        self.reference = reference
        self._last_finding.clear()

    def reset_window(self) -> None:
        """Forget the live window (lengths, reuse counts, arrivals), keeping the prefix seen-set and
        the TTFT change-point state: the traffic before a finding is not compared again."""
        for ring in (self._prompt, self._output, self._reused, self._tokens, self._times):
            ring.clear()
        self._arrivals.clear()
        self._first_s = None

    def live_span_s(self, now: float) -> float:
        """Seconds from the oldest request of the live length window to `now` (0 when empty)."""
        if self._times.count == 0:
            return 0.0
        return max(0.0, now - float(self._times.values().min()))

    def observe(self, s: DriftSample) -> None:
        """Add one request (times non-decreasing)."""
        now = s.time_s
        self.observed += 1
        if self._first_s is None:
            self._first_s = now
        self._prompt.add(float(s.prompt_tokens))
        self._output.add(float(s.output_tokens))
        self._times.add(now)
        counted = self._prefix.observe(
            now, s.prefix_hashes, block_tokens=s.prefix_block_tokens, prompt_tokens=s.prompt_tokens
        )
        if counted is not None and counted[1] > 0:
            self._reused.add(float(counted[0]))
            self._tokens.add(float(counted[1]))
        second = math.floor(now)
        if self._arrivals and self._arrivals[-1][0] >= second:
            self._arrivals[-1][1] += 1
        else:
            self._arrivals.append([second, 1])
        self._expire_arrivals(now)
        if s.ttft_ms > 0:
            alarm = self.cusum.observe(now=now, ttft_ms=s.ttft_ms)
            if alarm is not None:
                self._pending.append(
                    DriftFinding(
                        feature="ttft_ms",
                        test="cusum",
                        statistic=alarm.statistic,
                        p_value=None,
                        reference_value=alarm.reference_ms,
                        live_value=alarm.live_ms,
                        relative_change=_relative(alarm.live_ms, alarm.reference_ms),
                        time_s=alarm.time_s,
                        live_requests=alarm.requests_since_change,
                        reference_requests=self.config.cusum_warmup,
                        measure="geometric_mean",
                        critical_value=self.config.cusum_h,
                        live_window_s=max(0.0, alarm.time_s - alarm.change_s),
                    )
                )

    def _expire_arrivals(self, now: float) -> None:
        oldest = math.floor(now - self.config.rate_window_s)
        while self._arrivals and self._arrivals[0][0] < oldest:
            self._arrivals.popleft()

    def check(self, now: float) -> list[DriftFinding]:
        """Compare the live window with the reference; findings past their cooldown."""
        candidates = [*self._pending, *self._lengths(now), *self._rate(now), *self._reuse(now)]
        self._pending = []
        findings: list[DriftFinding] = []
        for f in candidates:
            last = self._last_finding.get(f.feature)
            if last is not None and f.time_s < last + self.config.cooldown_s:
                continue
            self._last_finding[f.feature] = f.time_s
            findings.append(f)
        return findings

    def _lengths(self, now: float) -> list[DriftFinding]:
        c, ref = self.config, self.reference
        found: list[DriftFinding] = []
        pairs: tuple[tuple[Feature, _Ring, FloatArray, float | None], ...] = (
            ("prompt_tokens", self._prompt, ref.prompt_sample, ref.median("prompt")),
            ("completion_tokens", self._output, ref.output_sample, ref.median("output")),
        )
        for feature, ring, reference, ref_med in pairs:
            has_sample = len(reference) >= c.min_requests
            has_median = ref_med is not None and ref.requests >= c.min_requests
            if ring.count < c.min_requests or not (has_sample or has_median) or ref_med is None:
                continue
            live = ring.values()
            live_med = float(np.median(live))
            change = _relative(live_med, ref_med)
            if abs(change) < c.min_length_shift:
                continue
            if has_sample:
                test: TestName = "ks"
                stat, p = ks_2samp(live, reference)
                critical = ks_critical(c.p_value, n=len(live), m=len(reference))
                n_ref = len(reference)
            else:
                test = "sign_z"
                stat = sign_test_z(live, ref_med)
                p = normal_two_sided_p(stat)
                critical = z_critical(c.p_value)
                n_ref = ref.requests
            if p >= c.p_value:
                continue
            found.append(
                DriftFinding(
                    feature=feature,
                    test=test,
                    statistic=stat,
                    p_value=p,
                    reference_value=ref_med,
                    live_value=live_med,
                    relative_change=change,
                    time_s=now,
                    live_requests=ring.count,
                    reference_requests=n_ref,
                    measure="median",
                    critical_value=critical,
                    p_value_threshold=c.p_value,
                    min_change=c.min_length_shift,
                    live_window_s=self.live_span_s(now),
                )
            )
        return found

    def _rate(self, now: float) -> list[DriftFinding]:
        c, ref = self.config, self.reference
        # the last `seconds` complete seconds [low, high): the current, partial second is left out
        seconds = max(1, math.floor(c.rate_window_s))
        high = math.floor(now)
        low = high - seconds
        if self._first_s is None or low <= math.floor(self._first_s):
            return []  # the live window is not full yet (the first second was partial)
        self._expire_arrivals(now)
        live_count = sum(n for second, n in self._arrivals if low <= second < high)
        ref_count = ref.requests - 1
        if ref.span_s <= 0 or ref_count < c.min_rate_count or live_count + ref_count == 0:
            return []
        live_rate, ref_rate = live_count / seconds, ref.rate_rps
        change = _relative(live_rate, ref_rate)
        if abs(change) < c.min_rate_shift:
            return []
        z = rate_ratio_z(live_count=live_count, live_s=seconds, ref_count=ref_count, ref_s=ref.span_s)
        p = normal_two_sided_p(z)
        if p >= c.p_value:
            return []
        return [
            DriftFinding(
                feature="rate_rps",
                test="poisson_rate_z",
                statistic=z,
                p_value=p,
                reference_value=ref_rate,
                live_value=live_rate,
                relative_change=change,
                time_s=now,
                live_requests=live_count,
                reference_requests=ref.requests,
                measure="rate",
                critical_value=z_critical(c.p_value),
                p_value_threshold=c.p_value,
                min_change=c.min_rate_shift,
                live_window_s=float(seconds),
            )
        ]

    def _reuse(self, now: float) -> list[DriftFinding]:
        c, ref = self.config, self.reference
        ref_share = ref.prefix_reuse_share
        n_live, n_ref = self._tokens.count, ref.reuse_requests
        if ref_share is None or n_live < c.min_requests or n_ref < c.min_requests:
            return []
        live_share = float(self._reused.values().sum() / self._tokens.values().sum())
        if abs(live_share - ref_share) < c.min_reuse_shift:
            return []
        z = two_proportion_z(p1=live_share, n1=n_live, p0=ref_share, n0=n_ref)
        p = normal_two_sided_p(z)
        if p >= c.p_value:
            return []
        return [
            DriftFinding(
                feature="prefix_reuse_share",
                test="two_proportion_z",
                statistic=z,
                p_value=p,
                reference_value=ref_share,
                live_value=live_share,
                relative_change=_relative(live_share, ref_share),
                time_s=now,
                live_requests=n_live,
                reference_requests=n_ref,
                measure="share",
                critical_value=z_critical(c.p_value),
                p_value_threshold=c.p_value,
                min_change=c.min_reuse_shift,
                live_window_s=self.live_span_s(now),
            )
        ]

    @property
    def live_window_requests(self) -> int:
        """Requests in the live length window (at most `window_requests`)."""
        return self._prompt.count


# --------------------------------------------------------------------------------------------------
# Per-endpoint reference keeping

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
