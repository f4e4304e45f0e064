"""bench peers' scoring of the arms against the judge's measurements (made-up points, no engine)."""

from __future__ import annotations

import dataclasses

import pytest

from evertune.apps.benchmarks.peer_report import Arm, report
from evertune.apps.benchmarks.peers import judge_cells
from evertune.apps.benchmarks.search import GRID, eager_space
from evertune.apps.benchmarks.search_grid import GridPoint, grid_key
from evertune.domain.engines import EngineSpec, get_profile

SPACE = eager_space(
    base=EngineSpec(model="/m", enforce_eager=True, kv_cache_space_gib=2),
    hardware=get_profile("cpu"),
    limits=GRID,
)
BY_KEY = judge_cells(SPACE)
DEFAULTS = next(iter(BY_KEY.values()))
BLOCKS = next(
    c
    for c in BY_KEY.values()
    if c.spec.block_size == 32
    and c.spec.dtype is None
    and c.spec.max_num_batched_tokens is None
    and c.spec.enable_prefix_caching is None
)
FP32 = next(
    c
    for c in BY_KEY.values()
    if c.spec.dtype == "float32"
    and c.spec.block_size is None
    and c.spec.max_num_batched_tokens is None
    and c.spec.enable_prefix_caching is None
)


def _point(candidate_key: str, p50: tuple[float, ...], errors: tuple[str, ...] = ()) -> GridPoint:
    return GridPoint(
        key=grid_key(BY_KEY[candidate_key].spec),
        knobs="",
        p50_ms=p50,
        p99_ms=tuple(3 * v for v in p50),
        attainment=(1.0, 1.0, 0.95),
        goodput_rps=(3.0, 3.0, 3.0),
        errors=errors,
    )


JUDGED = {
    DEFAULTS.key: _point(DEFAULTS.key, (250, 255, 248)),
    BLOCKS.key: _point(BLOCKS.key, (160, 162, 158)),
    FP32.key: _point(FP32.key, (500, 510, 505)),
}
AA = _point(DEFAULTS.key, (252, 249, 251))


def _arm(name: str, pick: str, *, spent_min: float, to_pick_min: float, claims: bool | None) -> Arm:
    return Arm(
        name=name, pick_key=pick, engine_s=60 * spent_min, engine_starts=int(spent_min),
        to_pick_s=60 * to_pick_min, wall_s=90 * spent_min, claims_better=claims,
    )  # fmt: skip


ARMS = [
    _arm("evertune-defaults", BLOCKS.key, spent_min=7, to_pick_min=3, claims=True),
    _arm("vllm-optimizer", FP32.key, spent_min=10, to_pick_min=2, claims=True),
    _arm("vllm-sweep", BLOCKS.key, spent_min=9, to_pick_min=8, claims=True),
]


def test_each_arm_is_scored_on_the_judges_figures() -> None:
    figures = report(ARMS, JUDGED, AA, by_key=BY_KEY, defaults=DEFAULTS)
    ours, optimizer, sweep = (figures["arms"][a.name] for a in ARMS)
    assert ours["chosen_config"] == "block_size default -> 32"
    assert optimizer["chosen_config"] == "dtype default -> float32"
    assert ours["p50_ttft_ms"] == 160 and ours["p50_ttft_ms_range"] == [158, 162]
    assert ours["vs_best_p50_ratio"] == 1.0 and sweep["vs_best_p50_ratio"] == 1.0
    assert optimizer["vs_best_p50_ratio"] == pytest.approx(505 / 160, abs=1e-3)
    assert ours["judge_better"] and not ours["false_winner"]
    assert not optimizer["judge_better"] and optimizer["false_winner"]  # it called fp32 better
    assert ours["engine_min_to_near_best"] == 3 and optimizer["engine_min_to_near_best"] is None
    assert figures["best_pick_p50_ms"] == 160 and figures["defaults_p50_ms"] == 250
    assert 0.99 < figures["aa_ratio"] < 1.02
    goal = figures["goal"]
    # 3 engine minutes against the sweep's 8 and the optimizer's whole 10 (it never got near)
    assert goal == {
        **goal,
        "no_worse_than_peers": True,
        "half_engine_minutes": True,
        "no_false_winner": True,
        "met": True,
    }


def test_the_goal_fails_on_a_slower_pick_more_minutes_or_a_false_winner() -> None:
    slow = [dataclasses.replace(ARMS[0], pick_key=FP32.key), *ARMS[1:]]
    goal = report(slow, JUDGED, AA, by_key=BY_KEY, defaults=DEFAULTS)["goal"]
    assert not goal["no_worse_than_peers"] and goal["worse_than"] == ["evertune-defaults < vllm-sweep"]
    assert not goal["no_false_winner"] and not goal["met"]
    late = [dataclasses.replace(ARMS[0], to_pick_s=60 * 6), *ARMS[1:]]
    goal = report(late, JUDGED, AA, by_key=BY_KEY, defaults=DEFAULTS)["goal"]
    assert not goal["half_engine_minutes"] and not goal["met"]


def test_a_pick_failing_the_correctness_gate_says_so() -> None:
    judged = {
        **JUDGED,
        BLOCKS.key: _point(BLOCKS.key, (160, 162, 158), errors=("correctness: 3 of 16 differ",)),
    }
    figures = report(ARMS, judged, AA, by_key=BY_KEY, defaults=DEFAULTS)
    ours = figures["arms"]["evertune-defaults"]
    assert ours["gate"].startswith("fail (correctness") and ours["vs_best_p50_ratio"] is None
    assert not ours["judge_better"] and ours["false_winner"]  # it called a wrong-answering pick better
