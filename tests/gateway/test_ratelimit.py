"""The per-tenant token buckets (pure, the clock passed in)."""

from __future__ import annotations

import pytest

from evertune.gateway.ratelimit import TenantRates, TokenBucket, retry_after_s


def test_a_bucket_admits_its_burst_then_refills_at_its_rate() -> None:
    bucket = TokenBucket(rate=2.0, capacity=3.0, tokens=3.0, updated=100.0)
    assert [bucket.take(100.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(100.0) == pytest.approx(0.5)  # the next token is due in 1/rate
    assert bucket.take(100.25) == pytest.approx(0.25)  # half a token came back, none was taken
    assert bucket.take(100.5) == 0.0
    assert bucket.take(100.5) == pytest.approx(0.5)


def test_a_bucket_never_holds_more_than_its_capacity() -> None:
    bucket = TokenBucket(rate=10.0, capacity=2.0, tokens=0.0, updated=0.0)
    assert bucket.take(3600.0) == 0.0
    assert bucket.take(3600.0) == 0.0
    assert bucket.take(3600.0) > 0.0


def test_a_clock_stepping_back_refills_nothing() -> None:
    bucket = TokenBucket(rate=1.0, capacity=1.0, tokens=1.0, updated=50.0)
    assert bucket.take(50.0) == 0.0
    assert bucket.take(10.0) == pytest.approx(1.0)
    assert bucket.take(50.5) == pytest.approx(0.5)


def test_retry_after_is_rounded_up_to_whole_seconds() -> None:
    assert [retry_after_s(w) for w in (0.001, 0.5, 1.0, 1.01, 3.99)] == [1, 1, 1, 2, 4]


def test_tenants_have_buckets_of_their_own_with_overrides() -> None:
    rates = TenantRates(default=1.0, overrides={"big": 4.0, "free": 0.0}, burst_s=2.0)
    # default: 1/s with 2 s of burst = 2 requests at once; each tenant its own bucket
    assert [rates.take("a", 0.0) for _ in range(3)][:2] == [0.0, 0.0]
    assert rates.take("a", 0.0) == pytest.approx(1.0)
    assert rates.take("b", 0.0) == 0.0
    # an override of 4/s: 8 at once, then one every 0.25 s
    assert all(rates.take("big", 0.0) == 0.0 for _ in range(8))
    assert rates.take("big", 0.0) == pytest.approx(0.25)
    # 0: no cap
    assert all(rates.take("free", 0.0) == 0.0 for _ in range(10_000))
    assert rates.rate("free") == 0.0 and rates.rate("a") == 1.0


def test_a_slow_rate_still_admits_one_request() -> None:
    rates = TenantRates(default=0.25, overrides={}, burst_s=1.0)
    assert rates.take("a", 0.0) == 0.0
    assert rates.take("a", 0.0) == pytest.approx(4.0)
    assert retry_after_s(rates.take("a", 1.0)) == 3


def test_no_default_means_no_cap() -> None:
    rates = TenantRates(default=0.0, overrides={"a": 1.0}, burst_s=1.0)
    assert all(rates.take("*", 0.0) == 0.0 for _ in range(1000))
    assert rates.take("a", 0.0) == 0.0 and rates.take("a", 0.0) > 0
