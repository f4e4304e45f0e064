"""The pure profile core against figures computed independently from a generated workload."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from evertune.profiler.profile import (
    Distribution,
    ProfileConfig,
    RequestSample,
    WorkloadProfile,
    aggregates_of,
    build_profile,
    chain_structure,
    concurrency_profile,
    profile_from_jsonable,
    summary_lines,
    to_jsonable,
)
from tests.profiler.synthetic import reuse_share, voice

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def sample(i: int, start_s: float, e2e_ms: float, **fields: object) -> RequestSample:
    values: dict[str, object] = {
        "request_id": f"r{i}",
        "start_s": start_s,
        "e2e_ms": e2e_ms,
        "ttft_ms": 10.0,
        "upstream_ttft_ms": 9.0,
        "prompt_tokens": 100,
        "cached_tokens": 0,
        "completion_tokens": 5,
        "itl_mean_ms": 5.0,
    }
    values.update(fields)
    return RequestSample(**values)  # type: ignore[arg-type]


def profile_of(
    requests: list[RequestSample], *, block: int = 16, horizon_s: float = 600.0
) -> WorkloadProfile:
    return build_profile(
        endpoint="voice",
        window_start=T0,
        window_end=T0 + timedelta(hours=1),
        aggregates=aggregates_of(requests),
        samples=requests,
        config=ProfileConfig(block_tokens=block, horizon_s=horizon_s),
    )


def test_distribution_matches_numpy() -> None:
    values = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 300]
    d = Distribution.of(values)
    assert (d.p50, d.p90, d.p99) == pytest.approx(tuple(np.percentile(values, [50, 90, 99])))
    assert d.mean == pytest.approx(np.mean(values)) and d.max == 300 and d.count == len(values)
    assert sum(d.histogram) == len(values)
    assert d.bin_width == 20  # 300 / 30 bins -> 10 would need 31 bins
    assert d.histogram[0] == 15 and d.histogram[-1] == 1 and len(d.histogram) == 16


def test_generated_workload_profile_matches_its_parameters() -> None:
    generated = voice(seed=3, duration_s=1800.0, calls_per_s=0.4, block=16)
    samples = [g.sample for g in generated]
    profile = profile_of(samples, horizon_s=3.0)
    arrivals = np.array([s.start_s for s in samples])
    gaps = np.diff(arrivals)
    assert profile.requests == len(samples)
    assert profile.rate.mean_rps == pytest.approx(len(samples) / (arrivals[-1] - arrivals[0]))
    assert profile.rate.gap_cv == pytest.approx(np.std(gaps) / np.mean(gaps))
    # Calls are Poisson at 0.4/s with 2-5 turns (mean 3.5): about 1.4 requests/s.
    assert 1.2 < profile.rate.mean_rps < 1.6
    # Per-minute rates in 60 s windows from the first arrival, as `describe` counts a plan.
    offsets = arrivals - arrivals[0]
    counts = np.bincount((offsets // 60).astype(int))
    assert profile.rate.per_minute_rps == pytest.approx(counts / 60)
    full = int(offsets[-1] // 60)
    rated = list(counts[:full] / 60)
    rest = offsets[-1] - 60 * full
    if rest >= 30:
        rated.append(counts[full] / rest)
    assert profile.rate.peak_p95_rps == pytest.approx(np.percentile(rated, 95))
    assert profile.rate.max_rps == pytest.approx(max(rated))
    prompts = [s.prompt_tokens for s in samples]
    assert (profile.prompt_tokens.p50, profile.prompt_tokens.p99) == pytest.approx(
        tuple(np.percentile(prompts, [50, 99]))
    )
    # Prefix reuse against the token ids themselves.
    assert profile.prefix.share == pytest.approx(reuse_share(generated, block=16, horizon_s=3.0))
    assert profile.prefix.unbounded_share == pytest.approx(reuse_share(generated, block=16, horizon_s=1e12))
    assert profile.prefix.share < profile.prefix.unbounded_share
    # Conversations: calls with two or more turns in the window; 3 agents = 3 distinct first blocks.
    turns = Counter(g.call for g in generated)
    multi = [n for n in turns.values() if n >= 2]
    assert profile.prefix.conversations == len(multi)
    assert profile.prefix.turns_per_conversation.mean == pytest.approx(np.mean(multi))
    assert profile.prefix.standalone_requests == sum(n for n in turns.values() if n < 2)
    assert profile.prefix.roots == 3
    # Every call shares exactly the agent's system prompt (300 tokens = 18 full blocks of 16).
    assert profile.prefix.shared_prefix_tokens.p50 == 18 * 16
    # Little's law holds for the time-weighted concurrency.
    ends = arrivals + np.array([s.e2e_ms for s in samples]) / 1000
    assert profile.concurrency.mean == pytest.approx(
        sum(s.e2e_ms for s in samples) / 1000 / (ends.max() - arrivals[0])
    )


def test_turn_links_follow_the_calls() -> None:
    generated = voice(seed=5, duration_s=300.0, calls_per_s=0.5)
    samples = [g.sample for g in generated]
    structure = chain_structure(samples, horizon_s=600.0)
    for i, g in enumerate(generated):
        parent = structure.parent[i]
        if g.turn == 0:
            assert parent == -1
        else:
            assert generated[parent].call == g.call and generated[parent].turn == g.turn - 1
        assert structure.turn[i] == g.turn


def test_concurrency_against_brute_force() -> None:
    samples = [sample(0, 0.0, 4000), sample(1, 1.0, 1000), sample(2, 1.5, 1000), sample(3, 10.0, 2000)]
    c = concurrency_profile(samples)
    # 0-1 s: 1; 1-1.5: 2; 1.5-2: 3; 2-2.5: 2; 2.5-4: 1; 4-10: 0; 10-12: 1 -> 12 s in all.
    assert c.time_share == pytest.approx([6 / 12, 4.5 / 12, 1.0 / 12, 0.5 / 12])
    assert c.max == 3
    assert c.mean == pytest.approx(8.0 / 12)
    assert (c.p50, c.p90, c.p99) == (0.0, 2.0, 3.0)


def test_empty_window_gives_an_empty_profile_with_a_reason() -> None:
    profile = profile_of([])
    assert profile.requests == 0 and profile.empty_reason.startswith("no telemetry for endpoint 'voice'")
    assert "1 h" in profile.empty_reason
    assert profile.rate.mean_rps == 0 and profile.prefix.share == 0 and profile.concurrency.mean == 0
    assert summary_lines(profile) == [f"endpoint voice: empty profile: {profile.empty_reason}"]


def test_one_request_and_simultaneous_arrivals_do_not_divide_by_zero() -> None:
    one = profile_of([sample(0, 100.0, 0.0, prefix_hashes=())])
    assert one.rate.mean_rps == 0 and one.rate.gap_cv == 0 and one.concurrency.mean == 0
    same = profile_of([sample(i, 100.0, 50.0) for i in range(5)])
    assert same.rate.gap_cv == 0 and same.concurrency.max == 5


def test_json_round_trip() -> None:
    samples = [g.sample for g in voice(seed=2, duration_s=120.0)]
    profile = profile_of(samples)
    assert profile_from_jsonable(to_jsonable(profile)) == profile
    assert any(line.startswith("prefix reuse:") for line in summary_lines(profile))


def test_pairwise_helper_sanity() -> None:
    # The generator's arrivals are sorted and distinct (the figures above rely on it).
    samples = [g.sample for g in voice(seed=7, duration_s=120.0)]
    assert all(a.start_s <= b.start_s for a, b in itertools.pairwise(samples))
