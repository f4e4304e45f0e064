"""The demo's traffic plan: baseline, then the shifted workload, as one open-loop plan."""

from __future__ import annotations

from collections import defaultdict

import pytest

from evertune.apps.demo.traffic import BASELINE, SHIFTED, phase_of, plan_traffic
from evertune.domain.workloads import PlannedRequest
from evertune.errors import InvalidArgument


def test_the_shift_starts_on_time_with_longer_prompts_and_more_calls() -> None:
    plan = plan_traffic(duration_s=120, peak_calls_per_s=1.0, shift_at_s=60)
    before = [r for r in plan.requests if phase_of(r) == BASELINE]
    after = [r for r in plan.requests if phase_of(r) == SHIFTED]
    assert before and after
    assert max(r.at_s for r in before) < 60 <= min(r.at_s for r in after)
    assert max(r.at_s for r in after) < 120
    assert [r.at_s for r in plan.requests] == sorted(r.at_s for r in plan.requests)
    ids = [r.request_id for r in plan.requests]
    assert len(set(ids)) == len(ids)
    assert plan.shifted is not None
    assert plan.shifted.peak_calls_per_s == pytest.approx(1.25)
    assert plan.shifted.system_prompt_words == round(1.5 * plan.baseline.system_prompt_words)

    def prompt_words(requests: list[PlannedRequest]) -> dict[str, set[int]]:
        """Each agent's system prompt lengths (the agents' personas differ in length)."""
        lengths: dict[str, set[int]] = defaultdict(set)
        for r in requests:
            lengths[r.tags["agent"]].add(len(r.messages[0].content.split()))
        return lengths

    shorter, longer = prompt_words(before), prompt_words(after)
    assert all(len(n) == 1 for n in (*shorter.values(), *longer.values()))  # one prompt per agent
    assert all(min(longer[agent]) > max(shorter[agent]) for agent in shorter.keys() & longer.keys())
    # 25% more calls: the shifted half carries more requests than the baseline half
    assert len(after) > 1.1 * len(before)


def test_no_drift_plans_the_baseline_only() -> None:
    plan = plan_traffic(duration_s=60, peak_calls_per_s=1.0, shift_at_s=None)
    assert plan.shifted is None and plan.shift_at_s is None
    assert {phase_of(r) for r in plan.requests} == {BASELINE}


def test_a_shift_outside_the_run_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="inside the run"):
        plan_traffic(duration_s=60, peak_calls_per_s=1.0, shift_at_s=60)
