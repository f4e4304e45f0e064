"""Burn rates: hand-computed cases, both windows needed to fire, thresholds, time scaling."""

from __future__ import annotations

import math

import pytest

from evertune.sla_monitor.burn_rate import (
    DEFAULT_RULES,
    FAST_RULE,
    BurnRateRule,
    CountRing,
    burn_rate,
    evaluate_rule,
    history_needed,
    unreachable_rules,
)

RULE = BurnRateRule(name="page", long_window_s=3600, short_window_s=300, burn_rate=6.0)
T0 = 1_700_000_000.0  # a whole number of 10 s slots


def test_burn_rate_by_hand() -> None:
    assert burn_rate(requests=100, good=90, budget=0.1) == pytest.approx(1.0)  # spends exactly the budget
    assert burn_rate(requests=100, good=40, budget=0.1) == pytest.approx(6.0)
    assert burn_rate(requests=1000, good=999, budget=0.001) == pytest.approx(1.0)
    assert burn_rate(requests=0, good=0, budget=0.1) == 0.0
    assert burn_rate(requests=10, good=9, budget=0.0) == math.inf


def _fill(ring: CountRing, *, start: float, seconds: int, per_s: int, bad_share: float) -> None:
    for s in range(seconds):
        bad = round(per_s * bad_share)
        ring.add_counts(start + s, requests=per_s, good=per_s - bad)


def test_fires_only_when_both_windows_exceed_the_threshold() -> None:
    # 55 min of healthy traffic (5% bad), then 5 min of 100% bad.
    ring = CountRing(slot_s=10, history_s=3600)
    _fill(ring, start=T0, seconds=3300, per_s=20, bad_share=0.05)
    _fill(ring, start=T0 + 3300, seconds=300, per_s=20, bad_share=1.0)
    now = T0 + 3599.0
    ev = evaluate_rule(ring, RULE, now=now, budget=0.1)
    # long: 3300 * 1 + 300 * 20 = 9300 bad of 72000 -> 12.9% -> 1.29x; short: 10x
    assert ev.long.requests == 72000 and ev.long.good == 72000 - 9300
    assert ev.long.burn_rate == pytest.approx(9300 / 72000 / 0.1)
    assert ev.short.burn_rate == pytest.approx(10.0)
    assert not ev.firing  # the short window alone is not enough

    # An hour of 70% bad: long 7x, short 7x > 6 -> fires.
    ring = CountRing(slot_s=10, history_s=3600)
    _fill(ring, start=T0, seconds=3600, per_s=10, bad_share=0.7)
    ev = evaluate_rule(ring, RULE, now=T0 + 3599.0, budget=0.1)
    assert ev.long.burn_rate == pytest.approx(7.0) and ev.short.burn_rate == pytest.approx(7.0)
    assert ev.firing

    # Then 5 min of good traffic: long still 6.4x, short 0 -> clear (the alert can resolve).
    _fill(ring, start=T0 + 3600, seconds=300, per_s=10, bad_share=0.0)
    ev = evaluate_rule(ring, RULE, now=T0 + 3899.0, budget=0.1)
    assert ev.long.burn_rate > 6.0 and ev.short.burn_rate == 0.0 and not ev.firing


def test_threshold_is_strict_and_min_requests_holds_small_windows() -> None:
    ring = CountRing(slot_s=10, history_s=3600)
    _fill(ring, start=T0, seconds=3600, per_s=10, bad_share=0.6)  # exactly 6x
    assert not evaluate_rule(ring, RULE, now=T0 + 3599.0, budget=0.1).firing
    small = CountRing(slot_s=10, history_s=3600)
    small.add_counts(T0, requests=3, good=0)
    assert evaluate_rule(small, RULE, now=T0 + 1, budget=0.1, min_requests=1).firing
    assert not evaluate_rule(small, RULE, now=T0 + 1, budget=0.1, min_requests=10).firing


def test_min_short_requests_holds_a_short_window_of_a_handful() -> None:
    """A long window full of bad traffic, a short one with 8 bad requests: fires only while the
    short window's floor is at most 8."""
    ring = CountRing(slot_s=10, history_s=3600)
    _fill(ring, start=T0, seconds=3000, per_s=1, bad_share=1.0)
    ring.add_counts(T0 + 3590, requests=8, good=0)
    ev = evaluate_rule(ring, RULE, now=T0 + 3599.0, budget=0.1, min_requests=50, min_short_requests=8)
    assert ev.short.requests == 8 and ev.long.requests > 50 and ev.firing
    assert not evaluate_rule(
        ring, RULE, now=T0 + 3599.0, budget=0.1, min_requests=50, min_short_requests=9
    ).firing


def test_ring_drops_what_is_older_than_its_history_and_reuses_positions() -> None:
    ring = CountRing(slot_s=10, history_s=60)
    assert ring.add(T0, good=True)
    assert ring.add(T0 + 1000, good=False)  # takes over positions; T0's slot is gone
    assert ring.counts(now=T0 + 1000, window_s=10_000) == (1, 0)
    assert not ring.add(T0 + 5, good=True)  # too old now
    assert ring.counts(now=T0 + 1000, window_s=10_000) == (1, 0)
    # backfill hook: counts for an older slot still inside the history
    assert ring.add_counts(T0 + 960, requests=50, good=45)
    assert ring.counts(now=T0 + 1000, window_s=60) == (51, 45)


def test_default_rules_time_scale_and_unreachable_thresholds() -> None:
    assert [r.burn_rate for r in DEFAULT_RULES] == [2.0, 14.4, 6.0, 1.0]
    assert DEFAULT_RULES[0] == FAST_RULE and FAST_RULE.min_bad == 5
    scaled = [r.scaled(1 / 60) for r in DEFAULT_RULES]
    assert scaled[0].min_bad == 5
    assert [(r.long_window_s, r.short_window_s) for r in scaled] == [
        pytest.approx((0.5, 5 / 60)),
        pytest.approx((60, 5)),
        pytest.approx((360, 30)),
        pytest.approx((4320, 360)),
    ]
    assert history_needed(DEFAULT_RULES) == 259200
    # with a 0.9 attainment target the most any window burns is 10x: 14.4x can never fire
    assert [r.name for r in unreachable_rules(DEFAULT_RULES, budget=0.1)] == ["page-1h"]
    assert unreachable_rules(DEFAULT_RULES, budget=0.001) == []
