"""The retry policies: plain functions of the attempt number and the random draw."""

from __future__ import annotations

import asyncio
import time

import pytest

from evertune.infra.retry import ExponentialBackoff, StepBackoff, rest


def test_steps_go_through_the_table_and_repeat_the_last_step() -> None:
    steps = StepBackoff((0.5, 2.0))
    assert [steps.delay(n) for n in (1, 2, 3, 9)] == [0.5, 2.0, 2.0, 2.0]
    assert steps.delay(0) == 0.5  # a delivery count the server did not give
    assert StepBackoff(()).delay(1) == 0.0  # no steps: at once


def test_steps_ignore_the_draw() -> None:
    steps = StepBackoff((0.2, 0.5, 1.0))
    assert [steps.delay(2, draw) for draw in (0.0, 0.5, 0.999)] == [0.5, 0.5, 0.5]


def test_one_step_is_a_fixed_interval() -> None:
    assert {StepBackoff((1.5,)).delay(n) for n in range(0, 50)} == {1.5}


def test_exponential_doubles_up_to_its_cap() -> None:
    backoff = ExponentialBackoff(base_s=1.0, cap_s=10.0)
    assert [backoff.delay(n, 0.999999) for n in (1, 2, 3, 4, 5, 50, 5000)] == pytest.approx(
        [1, 2, 4, 8, 10, 10, 10], rel=1e-5
    )


def test_exponential_jitter_is_the_draw_times_the_ceiling_never_under_the_floor() -> None:
    backoff = ExponentialBackoff(base_s=1.0, cap_s=10.0, floor_s=0.1)
    assert backoff.delay(3, 0.5) == 2.0  # half of 4
    assert backoff.delay(3, 0.0) == 0.1  # a draw of 0 would retry at once: the floor
    assert backoff.delay(6, 0.25) == 2.5  # a quarter of the cap
    assert ExponentialBackoff(base_s=1.0, cap_s=10.0).delay(3, 0.0) == 0.0  # no floor


def test_exponential_takes_an_attempt_below_one_as_the_first() -> None:
    backoff = ExponentialBackoff(base_s=0.5, cap_s=60.0)
    assert backoff.delay(0, 0.5) == backoff.delay(1, 0.5) == 0.25


def test_exponential_gives_the_alert_delays_it_replaced() -> None:
    """The sla-monitor's defaults (base 0.5 s, cap 60 s, floor base/10) give the delays of the
    formula its alert delivery used before (written out here) for every attempt and draw."""
    backoff = ExponentialBackoff(base_s=0.5, cap_s=60.0, floor_s=0.05)
    draws = (0.0, 0.1, 0.5, 0.9, 0.999)
    expected = [[max(0.05, d * min(60.0, 0.5 * 2.0 ** (n - 1))) for d in draws] for n in range(1, 12)]
    assert [[backoff.delay(n, d) for d in draws] for n in range(1, 12)] == expected


async def test_rest_waits_the_full_time_without_a_stop() -> None:
    t0 = time.monotonic()
    assert await rest(asyncio.Event(), 0.1) is False
    assert time.monotonic() - t0 >= 0.1


async def test_rest_is_cut_short_by_stop() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, stop.set)
    t0 = time.monotonic()
    assert await rest(stop, 30.0) is True
    assert time.monotonic() - t0 < 1.0
    assert await rest(stop, 30.0) is True  # set already: at once
