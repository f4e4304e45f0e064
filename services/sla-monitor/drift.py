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

Prefix reuse share (`drift_reference.py`): blocks of one request are strongly correlated (a chain),
so the z-test counts requests, not blocks, as trials.

Where the parts live: the tests in `drift_statistics.py`, the reference and how it is learnt in
`drift_reference.py`, the TTFT change-point in `ttft_cusum.py`, and one endpoint's state (learning
or watching, the reference's source, its reports) in `endpoint_drift.py`.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

from evertune.domain.workloads.prefix_reuse import HORIZON_S
from evertune.sla_monitor.drift_reference import DriftReference, DriftSample, PrefixReuseTracker
from evertune.sla_monitor.drift_statistics import (
    FloatArray,
    ks_2samp,
    ks_critical,
    normal_two_sided_p,
    rate_ratio_z,
    relative_change,
    sign_test_z,
    two_proportion_z,
    z_critical,
)
from evertune.sla_monitor.ttft_cusum import TtftCusum

#: Feature names, as in `DriftSignal.feature` (plus "ttft_ms" for the change-point detector).
Feature = Literal["prompt_tokens", "completion_tokens", "rate_rps", "prefix_reuse_share", "ttft_ms"]
#: Test behind a finding.
TestName = Literal["ks", "sign_z", "poisson_rate_z", "two_proportion_z", "cusum"]
#: What `reference_value` and `live_value` of a finding are.
Measure = Literal["median", "rate", "share", "geometric_mean"]


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
                        relative_change=relative_change(alarm.live_ms, alarm.reference_ms),
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
            change = relative_change(live_med, ref_med)
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
        change = relative_change(live_rate, ref_rate)
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
                relative_change=relative_change(live_share, ref_share),
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
