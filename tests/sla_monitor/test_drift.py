"""Drift detection: no findings on stationary traffic; prompt length, rate, prefix reuse and TTFT
shifts found with the right size; cooldowns hold repeats back. Seeded numpy RNGs throughout."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from scipy.special import kolmogorov

from evertune.sla_monitor.drift import DriftConfig, DriftDetector, DriftFinding
from evertune.sla_monitor.drift_reference import DriftReference, DriftSample
from evertune.sla_monitor.drift_statistics import (
    ks_2samp,
    ks_critical,
    rate_ratio_z,
    sign_test_z,
    two_proportion_z,
    z_critical,
)
from evertune.sla_monitor.endpoint_drift import DriftReport, EndpointDrift

T0 = 1_700_000_000.0
FAMILIES = 50  # shared system prompts


def traffic(
    seed: int,
    *,
    n: int,
    start_s: float,
    rate_rps: float = 20.0,
    prompt_scale: float = 1.0,
    shared_blocks: int = 6,
    unique_blocks: int = 2,
    ttft_scale: float = 1.0,
) -> Iterator[DriftSample]:
    """Poisson arrivals; lognormal prompt/output/TTFT; prompts = a shared family prefix + unique blocks
    (the prompt cut into that many full blocks)."""
    rng = np.random.default_rng(seed)
    t = start_s
    for _ in range(n):
        t += float(rng.exponential(1.0 / rate_rps))
        family = int(rng.integers(0, FAMILIES))
        shared = tuple((1 << 40) + family * 1000 + i for i in range(shared_blocks))
        unique = tuple(int(h) for h in rng.integers(1 << 50, 1 << 62, size=unique_blocks))
        prompt = max(1, round(prompt_scale * float(rng.lognormal(math.log(800), 0.6))))
        yield DriftSample(
            time_s=t,
            prompt_tokens=prompt,
            output_tokens=max(1, round(float(rng.lognormal(math.log(40), 0.5)))),
            prefix_hashes=shared + unique,
            prefix_block_tokens=_block_tokens(prompt, shared_blocks + unique_blocks),
            ttft_ms=ttft_scale * float(rng.lognormal(math.log(150), 0.35)),
        )


def _block_tokens(prompt: int, blocks: int) -> int:
    """Tokens per block of a prompt hashed into `blocks` full blocks (its remainder unhashed)."""
    return max(1, prompt // blocks)


REFERENCE_N = 10_000  # 500 s at 20 requests/s
REFERENCE = DriftReference.from_samples(traffic(1, n=REFERENCE_N, start_s=T0), profile_id="ref")
LIVE_START = T0 + 1000


def feed(
    detector: DriftDetector, samples: Iterator[DriftSample], *, check_every_s: float = 10.0
) -> list[tuple[int, DriftFinding]]:
    """Observe every sample, checking every `check_every_s`; (request index at check, finding)."""
    found: list[tuple[int, DriftFinding]] = []
    next_check: float | None = None
    for i, s in enumerate(samples):
        detector.observe(s)
        if next_check is None:
            next_check = s.time_s + check_every_s
        if s.time_s >= next_check:
            found += [(i, f) for f in detector.check(s.time_s)]
            next_check += check_every_s
    return found


def test_statistics_by_hand() -> None:
    # the textbook 5% critical value of sqrt(ne) D, for samples large enough that the correction vanishes
    assert ks_critical(0.05, n=10**7, m=10**7) * math.sqrt(10**7 / 2) == pytest.approx(1.358, abs=0.001)
    a = np.arange(1000, dtype=np.float64)
    assert ks_2samp(a, a) == (0.0, 1.0)
    d, p = ks_2samp(a, a + 500)
    assert d == pytest.approx(0.5) and p < 1e-50
    assert rate_ratio_z(live_count=100, live_s=10, ref_count=1000, ref_s=100) == 0.0
    assert rate_ratio_z(live_count=125, live_s=10, ref_count=1000, ref_s=100) > 2
    assert two_proportion_z(p1=0.5, n1=100, p0=0.5, n0=100) == 0.0


def test_reference_profile() -> None:
    assert REFERENCE.requests == REFERENCE_N and len(REFERENCE.prompt_sample) == 5000
    assert REFERENCE.rate_rps == pytest.approx(20.0, rel=0.05)
    assert REFERENCE.prompt_quantiles()["p50"] == pytest.approx(800, rel=0.05)
    share = REFERENCE.prefix_reuse_share
    assert share is not None and share == pytest.approx(0.75, abs=0.02)  # 6 shared of 8 blocks


def test_stationary_traffic_gives_no_findings() -> None:
    detector = DriftDetector(REFERENCE)
    found = feed(detector, traffic(2, n=20_000, start_s=LIVE_START))  # 1000 s, 100 checks
    assert found == []
    assert detector.cusum.alarms == 0 and detector.cusum.mu is not None


def test_longer_prompts_are_found_with_their_size() -> None:
    detector = DriftDetector(REFERENCE)
    found = feed(detector, traffic(3, n=3000, start_s=LIVE_START, prompt_scale=1.4))
    assert {f.feature for _, f in found} == {"prompt_tokens"}
    _, finding = found[0]
    assert finding.test == "ks" and finding.p_value is not None and finding.p_value < 0.001
    assert finding.live_value == pytest.approx(1.4 * 800, rel=0.10)  # within 10% of the true median
    assert 0.26 <= finding.relative_change <= 0.54
    assert finding.reference_value == pytest.approx(800, rel=0.05)


def test_prompt_shift_after_a_full_window_is_found_within_the_window() -> None:
    detector = DriftDetector(REFERENCE)
    assert feed(detector, traffic(4, n=3000, start_s=LIVE_START)) == []
    found = feed(detector, traffic(5, n=3000, start_s=LIVE_START + 150, prompt_scale=1.4))
    assert [f.feature for _, f in found] == ["prompt_tokens"]
    index, finding = found[0]
    assert index < DriftConfig().window_requests  # the window need not turn over entirely
    assert finding.relative_change > 0.15


def test_higher_arrival_rate_is_found() -> None:
    detector = DriftDetector(REFERENCE)
    found = feed(detector, traffic(6, n=10_000, start_s=LIVE_START, rate_rps=25.0))
    assert {f.feature for _, f in found} == {"rate_rps"}
    _, finding = found[0]
    assert finding.test == "poisson_rate_z" and finding.reference_value == pytest.approx(20, rel=0.05)
    assert finding.relative_change == pytest.approx(0.25, abs=0.05)


def test_prefix_reuse_drop_is_found() -> None:
    detector = DriftDetector(REFERENCE)
    found = feed(detector, traffic(7, n=8000, start_s=LIVE_START, shared_blocks=3, unique_blocks=5))
    assert {f.feature for _, f in found} == {"prefix_reuse_share"}
    _, finding = found[0]
    assert finding.test == "two_proportion_z"
    assert finding.reference_value == pytest.approx(0.75, abs=0.02)
    assert finding.live_value == pytest.approx(0.375, abs=0.03)


def test_ttft_doubling_is_caught_quickly_once() -> None:
    detector = DriftDetector(REFERENCE, replace(DriftConfig(), cooldown_s=0))
    assert feed(detector, traffic(8, n=3000, start_s=LIVE_START), check_every_s=0) == []
    change_s = LIVE_START + 150  # the stationary part ends about then (3000 requests at 20/s)
    found = feed(detector, traffic(9, n=5000, start_s=change_s, ttft_scale=2.0), check_every_s=0)
    assert [f.feature for _, f in found] == ["ttft_ms"]  # one change, one alarm (then re-learnt)
    index, finding = found[0]
    assert index < 30  # requests after the change
    assert finding.test == "cusum" and finding.p_value is None
    assert finding.relative_change == pytest.approx(1.0, abs=0.3)
    assert detector.cusum.mu == pytest.approx(math.log(300), abs=0.05)  # new baseline learnt


def test_cooldown_holds_repeats_back() -> None:
    detector = DriftDetector(REFERENCE, replace(DriftConfig(), cooldown_s=600))
    found = feed(detector, traffic(10, n=30_000, start_s=LIVE_START, prompt_scale=1.4))  # 1500 s
    times = [f.time_s for _, f in found]
    assert [f.feature for _, f in found] == ["prompt_tokens"] * len(found)
    assert 2 <= len(times) <= 3  # one finding per 600 s of a persisting shift, not one per check
    assert all(b - a >= 600 for a, b in itertools.pairwise(times))


def test_critical_values_match_the_p_values() -> None:
    assert z_critical(0.001) == pytest.approx(3.2905, abs=1e-3)
    d = ks_critical(0.001, n=2000, m=5000)
    ne = 2000 * 5000 / 7000
    root = math.sqrt(ne)
    assert kolmogorov((root + 0.12 + 0.11 / root) * d) == pytest.approx(0.001, rel=1e-3)
    live = np.asarray([1.0, 2.0, 3.0, 4.0])
    assert sign_test_z(live, 2.5) == 0.0 and sign_test_z(live, 0.5) == pytest.approx(2.0)


def test_findings_say_what_was_measured() -> None:
    detector = DriftDetector(REFERENCE)
    found = feed(detector, traffic(3, n=3000, start_s=LIVE_START, prompt_scale=1.4))
    _, f = found[0]
    assert f.measure == "median" and f.min_change == 0.15 and f.p_value_threshold == 0.001
    assert f.statistic > f.critical_value > 0 and f.live_window_s > 0


def _stationary_arrays(seed: int, n: int) -> Iterator[DriftSample]:
    """`traffic` drawn vectorised (a long stream in well under a second)."""
    rng = np.random.default_rng(seed)
    times = T0 + np.cumsum(rng.exponential(1 / 20.0, size=n))
    prompts = np.maximum(1, np.round(rng.lognormal(math.log(800), 0.6, size=n))).astype(int)
    outputs = np.maximum(1, np.round(rng.lognormal(math.log(40), 0.5, size=n))).astype(int)
    ttfts = rng.lognormal(math.log(150), 0.35, size=n)
    families = rng.integers(0, FAMILIES, size=n)
    uniques = rng.integers(1 << 50, 1 << 62, size=(n, 2))
    for i in range(n):
        shared = tuple((1 << 40) + int(families[i]) * 1000 + b for b in range(6))
        yield DriftSample(
            time_s=float(times[i]),
            prompt_tokens=int(prompts[i]),
            output_tokens=int(outputs[i]),
            prefix_hashes=(*shared, int(uniques[i, 0]), int(uniques[i, 1])),
            prefix_block_tokens=_block_tokens(int(prompts[i]), 8),
            ttft_ms=float(ttfts[i]),
        )


def test_long_stationary_stream_gives_no_finding_with_a_learnt_reference() -> None:
    """The false-alarm bound of the wired core: 4 hours of stationary traffic (300k requests at
    20/s, the reference learnt from its first 600 s, 1500 checks): each check runs 4 tests at
    p < 0.001 behind effect floors, and the CUSUM's simulated false-alarm rate is 1 per 40M
    requests. No cooldown, so any alarm would show."""
    tracker = EndpointDrift("ep", config=replace(DriftConfig(), cooldown_s=0), reference_s=600)
    reports: list[DriftReport] = []
    next_check = T0 + 10
    checks = 0
    for s in _stationary_arrays(21, 300_000):
        tracker.observe(s)
        if s.time_s >= next_check:
            checks += 1
            if (report := tracker.check(s.time_s)) is not None:
                reports.append(report)
            next_check += 10
    assert checks >= 1450 and tracker.source == "traffic" and tracker.state == "watching"
    assert tracker.detector.reference.requests > 10_000  # 600 s at 20/s
    assert reports == [] and tracker.findings == 0
    assert tracker.detector.cusum.mu is not None and tracker.detector.cusum.alarms == 0


def _run(tracker: EndpointDrift, samples: Iterator[DriftSample], every_s: float = 10.0) -> list[DriftReport]:
    reports: list[DriftReport] = []
    next_check: float | None = None
    for s in samples:
        tracker.observe(s)
        next_check = s.time_s + every_s if next_check is None else next_check
        if s.time_s >= next_check:
            if (report := tracker.check(s.time_s)) is not None:
                reports.append(report)
            next_check += every_s
    return reports


def test_reference_is_learnt_then_a_shift_is_reported_once_and_becomes_the_reference() -> None:
    tracker = EndpointDrift("ep", config=replace(DriftConfig(), cooldown_s=0), reference_s=300)
    assert (tracker.state, tracker.source) == ("learning", "none")
    assert _run(tracker, traffic(30, n=8000, start_s=T0)) == []  # 400 s: learnt, then quiet
    assert (tracker.state, tracker.source) == ("watching", "traffic")
    reports = _run(tracker, traffic(31, n=20_000, start_s=T0 + 410, prompt_scale=1.4))  # 1000 s
    # one report: the moved traffic is learnt as the new reference, so it is not reported again
    assert len(reports) == 1 and [f.feature for f in reports[0].findings] == ["prompt_tokens"]
    report = reports[0]
    assert report.reference_source == "traffic" and report.reference_profile_id == ""
    assert 290 <= report.reference_span_s <= 310  # learning ends at the first check after 300 s
    assert tracker.source == "traffic" and tracker.findings == 1


def test_profile_summary_reference_uses_the_sign_test() -> None:
    profile = DriftReference.from_summary(
        requests=20_000,
        span_s=1000.0,
        rate_rps=20.0,
        prompt_p50=800.0,
        output_p50=40.0,
        prefix_reuse_share=None,
        profile_id="prof-1",
    )
    assert profile.rate_rps == pytest.approx(20.0) and profile.prefix_reuse_share is None
    tracker = EndpointDrift("ep", config=DriftConfig(), reference_s=300)
    tracker.use_profile(profile)
    assert tracker.state == "watching" and tracker.source == "profile"
    assert _run(tracker, traffic(32, n=3000, start_s=T0)) == []  # the same workload: quiet
    reports = _run(tracker, traffic(33, n=3000, start_s=T0 + 200, prompt_scale=1.3))
    assert len(reports) == 1
    [f] = reports[0].findings
    assert f.feature == "prompt_tokens" and f.test == "sign_z" and f.measure == "median"
    # found while the live window still mixes old and new traffic: past the 15% floor, below 1.3x
    assert f.reference_value == 800.0 and 800 * 1.15 <= f.live_value <= 1040 * 1.1
    assert reports[0].reference_profile_id == "prof-1" and reports[0].reference_source == "profile"
    assert tracker.state in ("learning",)  # the moved traffic is learnt until the next profile


def test_deployment_change_restarts_the_ttft_baseline_and_a_traffic_reference() -> None:
    tracker = EndpointDrift("ep", config=DriftConfig(), reference_s=100)
    _run(tracker, traffic(34, n=4000, start_s=T0))
    assert tracker.source == "traffic" and tracker.detector.cusum.mu is not None
    tracker.deployment_changed()
    assert tracker.state == "learning" and tracker.detector.cusum.mu is None
    profile = DriftReference.from_samples(traffic(35, n=2000, start_s=T0), profile_id="p")
    tracker.use_profile(profile)
    tracker.deployment_changed()  # a profile reference is kept: the new deployment was tuned on it
    assert tracker.state == "watching" and tracker.detector.reference is profile
