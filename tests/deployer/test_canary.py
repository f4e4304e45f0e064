"""Canary analysis: holds on too little traffic, proceeds on an equal canary, rolls back on a real
regression of TTFT, inter-token gaps, errors or attainment, and not on noise."""

from __future__ import annotations

import dataclasses
import random

import pytest

from evertune.deployer.canary import ArmWindow, Verdict, analyse, mann_whitney_greater_p
from evertune.deployer.rollout_policy import RolloutPolicy

POLICY = RolloutPolicy()


def _arm(
    rng: random.Random,
    *,
    n: int,
    ttft_ms: float,
    itl_ms: float = 20.0,
    errors: int = 0,
    attainment: float | None = None,
) -> ArmWindow:
    return ArmWindow(
        ttft_ms=[rng.lognormvariate(0, 0.3) * ttft_ms for _ in range(n)],
        itl_p99_ms=[rng.lognormvariate(0, 0.2) * itl_ms for _ in range(n)],
        requests=n,
        errors=errors,
        attainment=attainment,
    )


def test_holds_until_both_arms_have_enough_requests() -> None:
    rng = random.Random(1)
    result = analyse(
        canary=_arm(rng, n=10, ttft_ms=100),
        stable=_arm(rng, n=500, ttft_ms=100),
        policy=POLICY,
        attainment_target=0.9,
    )
    assert result.verdict is Verdict.HOLD and "canary served 10" in result.reason
    assert result.checks == []


def test_an_equal_canary_proceeds_in_nearly_every_trial() -> None:
    """Same distribution in both arms: a roll back would be a false alarm (bounded by the test's p)."""
    rng = random.Random(7)
    verdicts = [
        analyse(
            canary=_arm(rng, n=60, ttft_ms=100),
            stable=_arm(rng, n=540, ttft_ms=100),
            policy=POLICY,
            attainment_target=0.9,
        ).verdict
        for _ in range(200)
    ]
    assert verdicts.count(Verdict.ROLL_BACK) <= 4
    assert verdicts.count(Verdict.PROCEED) >= 196


def test_a_slower_canary_is_rolled_back_naming_ttft() -> None:
    rng = random.Random(3)
    result = analyse(
        canary=_arm(rng, n=80, ttft_ms=150),
        stable=_arm(rng, n=720, ttft_ms=100),
        policy=POLICY,
        attainment_target=0.9,
    )
    assert result.verdict is Verdict.ROLL_BACK
    assert result.reason.startswith("ttft_p50")
    assert {c.name for c in result.failed} >= {"ttft_p50"}


def test_a_faster_canary_proceeds() -> None:
    rng = random.Random(4)
    result = analyse(
        canary=_arm(rng, n=80, ttft_ms=60),
        stable=_arm(rng, n=720, ttft_ms=100),
        policy=POLICY,
        attainment_target=0.9,
    )
    assert result.verdict is Verdict.PROCEED


def test_the_tail_check_uses_p99_only_with_enough_canary_requests() -> None:
    rng = random.Random(5)
    few = analyse(
        canary=_arm(rng, n=50, ttft_ms=100),
        stable=_arm(rng, n=500, ttft_ms=100),
        policy=POLICY,
        attainment_target=0.9,
    )
    many = analyse(
        canary=_arm(rng, n=300, ttft_ms=100),
        stable=_arm(rng, n=500, ttft_ms=100),
        policy=POLICY,
        attainment_target=0.9,
    )
    assert "ttft_p90" in {c.name for c in few.checks}
    assert "ttft_p99" in {c.name for c in many.checks}


def test_a_trivial_but_significant_shift_is_within_the_slack() -> None:
    """+3 ms on a 20 ms TTFT is 15% but under the 5 ms slack: it proceeds even though U is significant."""
    rng = random.Random(6)
    canary = ArmWindow(
        ttft_ms=[23.0 + rng.random() for _ in range(2000)], itl_p99_ms=[], requests=2000, errors=0
    )
    stable = ArmWindow(
        ttft_ms=[20.0 + rng.random() for _ in range(2000)], itl_p99_ms=[], requests=2000, errors=0
    )
    result = analyse(canary=canary, stable=stable, policy=POLICY, attainment_target=0.9)
    assert mann_whitney_greater_p(canary.ttft_ms, stable.ttft_ms) < 1e-6
    assert result.verdict is Verdict.PROCEED


@pytest.mark.parametrize(
    ("canary_kwargs", "failed"),
    [
        ({"itl_ms": 40.0}, "itl_p99"),
        ({"errors": 5}, "error_share"),
        ({"attainment": 0.8}, "attainment"),
    ],
)
def test_other_regressions_roll_back(canary_kwargs: dict[str, float], failed: str) -> None:
    rng = random.Random(8)
    stable = _arm(rng, n=400, ttft_ms=100, attainment=0.95)
    kwargs = {"attainment": 0.95, **canary_kwargs}
    canary = _arm(rng, n=100, ttft_ms=100, **kwargs)  # type: ignore[arg-type]
    result = analyse(canary=canary, stable=stable, policy=POLICY, attainment_target=0.9)
    assert result.verdict is Verdict.ROLL_BACK
    assert [c.name for c in result.failed] == [failed]


def test_one_slow_gap_does_not_roll_back() -> None:
    # equal gap distributions, but the canary's 30 requests include one with a 3x slower gap: its
    # p99 (the slowest of 30) is far above the stable's, yet nothing says its gaps are larger
    rng = random.Random(9)
    stable = _arm(rng, n=120, ttft_ms=100, attainment=0.95)
    canary = _arm(rng, n=30, ttft_ms=100, attainment=0.95)
    canary = dataclasses.replace(canary, itl_p99_ms=[*canary.itl_p99_ms[:-1], 60.0])
    result = analyse(canary=canary, stable=stable, policy=POLICY, attainment_target=0.9)
    [itl] = [c for c in result.checks if c.name == "itl_p99"]
    assert itl.canary > itl.stable * (1 + POLICY.max_itl_regression) + POLICY.itl_slack_ms
    assert itl.passed and result.verdict is Verdict.PROCEED, result.reason


def test_mann_whitney_known_values() -> None:
    # fully separated samples of 10 and 10: U = 100, z = (100 - 50 - 0.5) / sqrt(175) ≈ 3.742
    p = mann_whitney_greater_p([float(v) for v in range(11, 21)], [float(v) for v in range(1, 11)])
    assert p == pytest.approx(9.1e-5, rel=0.02)
    # reversed: no evidence at all that the first is larger
    assert mann_whitney_greater_p([float(v) for v in range(1, 11)], [float(v) for v in range(11, 21)]) > 0.999
    # all ties: no variance, no evidence
    assert mann_whitney_greater_p([5.0] * 10, [5.0] * 10) == 1.0
    assert mann_whitney_greater_p([], [1.0]) == 1.0
