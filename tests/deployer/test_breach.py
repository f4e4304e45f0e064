"""Which sla.breach judges a rollout's canary: its own always, an endpoint-wide one only once the
canary takes all the traffic (and the breach's short window began after that)."""

from __future__ import annotations

from evertune.deployer.breach import SeenBreach, why_not_the_canary
from evertune.deployer.state import RolloutRecord

STARTED = 1_000.0  # the canary's first traffic (unix s)


def at_step(weight: int, *, step: int = 0, step_started_s: float = STARTED) -> RolloutRecord:
    return RolloutRecord(
        deployment_id="canary",
        stable_id="stable",
        step=step,
        weight=weight,
        started_s=STARTED,
        step_started_s=step_started_s,
    )


def endpoint_wide(at_s: float, short_window_s: float = 5.0) -> SeenBreach:
    return SeenBreach(deployment="", at_s=at_s, short_window_s=short_window_s)


def test_the_canarys_own_breach_judges_it_at_any_weight() -> None:
    own = SeenBreach(deployment="canary", at_s=STARTED + 30, short_window_s=300.0)
    assert why_not_the_canary(own, at_step(1_000)) == ""
    assert why_not_the_canary(own, at_step(10_000, step=2)) == ""


def test_the_stables_breach_or_one_before_the_canary_served_does_not() -> None:
    stable = SeenBreach(deployment="stable", at_s=STARTED + 30, short_window_s=5.0)
    assert "stable" in why_not_the_canary(stable, at_step(1_000))
    early = SeenBreach(deployment="canary", at_s=STARTED - 1, short_window_s=5.0)
    assert "before the canary's first traffic" in why_not_the_canary(early, at_step(1_000))
    assert "no traffic" in why_not_the_canary(early, at_step(0, step=-1))


def test_an_endpoint_wide_breach_does_not_judge_a_canary_that_takes_part_of_the_traffic() -> None:
    """The demo's case: the stable configuration queues, the canary at 10% has served nothing."""
    reason = why_not_the_canary(endpoint_wide(STARTED + 54), at_step(1_000))
    assert "10% of the traffic" in reason
    assert "50% of the traffic" in why_not_the_canary(endpoint_wide(STARTED + 90), at_step(5_000, step=1))


def test_an_endpoint_wide_breach_judges_the_canary_once_it_takes_all_the_traffic() -> None:
    last = at_step(10_000, step=2, step_started_s=STARTED + 60)
    assert why_not_the_canary(endpoint_wide(STARTED + 70), last) == ""
    # its short window reaches back into the step before: it still measures the stable's share
    assert "began before" in why_not_the_canary(endpoint_wide(STARTED + 70, short_window_s=30.0), last)


def test_a_ticket_never_rolls_back_even_when_it_names_the_canary_at_full_weight() -> None:
    """The demo on an EPYC Zen 3: the 3-day rule named the canary at 100% on 16 requests."""
    ticket = SeenBreach(deployment="canary", at_s=STARTED + 30, short_window_s=21600.0, paging=False)
    assert "ticket" in why_not_the_canary(ticket, at_step(10000, step=2))
    page = SeenBreach(deployment="canary", at_s=STARTED + 30, short_window_s=21600.0)
    assert why_not_the_canary(page, at_step(10000, step=2)) == ""
