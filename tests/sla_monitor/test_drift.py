"""Drift detection: no findings on stationary traffic; prompt length, rate, prefix reuse and TTFT
shifts found with the right size; cooldowns hold repeats back. Seeded numpy RNGs throughout."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from evertune.sla_monitor.drift import (
    DriftConfig,
    DriftDetector,
    DriftFinding,
    RequestSample,
    WorkloadProfile,
    kolmogorov_q,
    ks_2samp,
    rate_ratio_z,
    two_proportion_z,
)

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
) -> Iterator[RequestSample]:
    """Poisson arrivals; lognormal prompt/output/TTFT; prompts = a shared family prefix + unique blocks."""
    rng = np.random.default_rng(seed)
    t = start_s
    for _ in range(n):
        t += float(rng.exponential(1.0 / rate_rps))
        family = int(rng.integers(0, FAMILIES))
        shared = tuple((1 << 40) + family * 1000 + i for i in range(shared_blocks))
        unique = tuple(int(h) for h in rng.integers(1 << 50, 1 << 62, size=unique_blocks))
        yield RequestSample(
            time_s=t,
            prompt_tokens=max(1, round(prompt_scale * float(rng.lognormal(math.log(800), 0.6)))),
            output_tokens=max(1, round(float(rng.lognormal(math.log(40), 0.5)))),
            prefix_hashes=shared + unique,
            ttft_ms=ttft_scale * float(rng.lognormal(math.log(150), 0.35)),
        )


REFERENCE_N = 10_000  # 500 s at 20 requests/s
REFERENCE = WorkloadProfile.from_samples(traffic(1, n=REFERENCE_N, start_s=T0), profile_id="ref")
LIVE_START = T0 + 1000


def feed(
    detector: DriftDetector, samples: Iterator[RequestSample], *, check_every_s: float = 10.0
) -> list[tuple[int, DriftFinding]]:
    """Observe every sample, checking every `check_every_s`; (request index at check, finding)."""
    found: list[tuple[int, DriftFinding]] = []
    next_check: float | None = None
    for i, s in enumerate(samples):
        detector.observe(
            now=s.time_s,
            prompt_tokens=s.prompt_tokens,
            output_tokens=s.output_tokens,
            prefix_hashes=s.prefix_hashes,
            ttft_ms=s.ttft_ms,
        )
        if next_check is None:
            next_check = s.time_s + check_every_s
        if s.time_s >= next_check:
            found += [(i, f) for f in detector.check(s.time_s)]
            next_check += check_every_s
    return found


def test_statistics_by_hand() -> None:
    assert kolmogorov_q(1.358) == pytest.approx(0.05, abs=0.001)  # the textbook 5% critical value
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
