"""`evertune bench monitor`: its pure helpers, and a tiny run on the session's NATS (a few seconds)."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path

from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.apps.benchmarks.monitor import (
    RULES,
    Plan,
    bad_share,
    end_times,
    make_record,
    measure,
    predicted_delay_s,
)
from evertune.sla_monitor.burn_rate import FAST_RULE, BurnRateRule
from evertune.sla_monitor.payloads import observation


def test_bad_share_of_the_healthy_and_the_doubled_ttft() -> None:
    assert bad_share(300, 0.15, 300) == 0.5
    assert bad_share(300, 0.15, 500) < 0.001  # healthy: p99 ~ 425 ms against 500 ms
    assert 0.85 < bad_share(600, 0.15, 500) < 0.92  # doubled: burns at ~8.9x a 0.1 budget


def test_predicted_delay_is_the_long_window_share_the_threshold_needs() -> None:
    rule = BurnRateRule(name="r", long_window_s=3600, short_window_s=300, burn_rate=2.0)
    assert predicted_delay_s(rule, budget=0.1, before=0.0, after=1.0) == 720.0
    assert predicted_delay_s(rule, budget=0.1, before=0.0, after=0.2) == math.inf  # needs > 0.2
    assert predicted_delay_s(rule, budget=0.1, before=0.3, after=0.9) == 0.0  # burning already
    six = next(r for r in RULES if r.name == "page-6h")
    assert (
        six.burn_rate == 6 and 14000 < predicted_delay_s(six, budget=0.1, before=0.0003, after=0.888) < 15000
    )
    # the default fast-burn rule: 20% of a 30 s window bad, ~7 s after a TTFT doubling
    assert RULES[0] == FAST_RULE
    assert 6 < predicted_delay_s(FAST_RULE, budget=0.1, before=0.0003, after=0.888) < 7


def test_end_times_are_a_grid_without_gaps_or_repeats() -> None:
    ticks = [0.0, 0.013, 0.05, 0.05, 0.2]
    times = [t for a, b in itertools.pairwise(ticks) for t in end_times(a, b, start=0.0, spacing=0.01)]
    assert len(times) == 20 and times == sorted(set(times))
    assert times[0] == 0.01 and math.isclose(times[-1], 0.2)


def test_a_record_ends_when_asked_and_is_good_when_healthy() -> None:
    record = make_record("ep", 1_000.0, random.Random(1))
    obs = observation(record)
    assert obs is not None and math.isclose(obs.time_s, 1_000.0, abs_tol=1e-6)
    assert obs.ttft_ms < 500 and obs.itl_p99_ms < 100 and not obs.failed


async def test_a_tiny_run_detects_the_regression_and_raises_no_false_breach(
    nc: Client, js: JetStreamContext, tmp_path: Path
) -> None:
    plan = Plan(
        rules=(FAST_RULE,),
        stationary_s=180,
        detection_timeout_s=20,
        recovery_timeout_s=20,
    )
    figures = await measure(nc, js, plan, tmp_path)
    assert figures["false_breaches"] == 0 and figures["detections"] == "1/1"
    assert figures["detected_by"] == "page-fast"
    # predicted ~7 s simulated; the bus and the loops add to it (the benchmark reports the figure)
    assert 5 < figures["detection_delay_s"] < 120
    assert figures["resolve_delay_s"] < math.inf and figures["records_dropped"] == 0
    assert figures["records_seen"] == figures["records"]
