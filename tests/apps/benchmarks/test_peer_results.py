"""Reading what the peers measured and counting their engine time (no peer runs here)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from evertune.apps.benchmarks.peer_configs import peer_grid
from evertune.apps.benchmarks.peer_results import (
    ServerLife,
    engine_seconds,
    match_key,
    optimizer_outcome,
    parse_server_log,
    seconds_until,
    sweep_order,
    sweep_outcome,
    varying_names,
)
from evertune.apps.benchmarks.search import GRID, eager_space
from evertune.domain.engines import EngineSpec, get_profile
from evertune.domain.slo import VOICE_TURN_SLO

BASE = EngineSpec(model="/m", enforce_eager=True, kv_cache_space_gib=2)
CPU = get_profile("cpu")
SPACE = eager_space(base=BASE, hardware=CPU, limits=GRID)
GRID_PARAMS = peer_grid([(c.key, c.spec) for c in SPACE], hardware=CPU)
NAMES = varying_names(GRID_PARAMS)
DEFAULTS = GRID_PARAMS.serve_params[0]


def test_the_flags_that_vary_are_the_grids_knobs() -> None:
    assert sorted(NAMES) == ["block_size", "dtype", "enable_prefix_caching", "max_num_batched_tokens"]


def test_a_person_sweeps_the_defaults_first_then_one_knob_at_a_time_in_the_docs_order() -> None:
    order = sweep_order(GRID_PARAMS, defaults=DEFAULTS)
    assert sorted(order) == list(range(len(SPACE)))
    first = [GRID_PARAMS.serve_params[i] for i in order[:5]]
    assert first[0] == DEFAULTS
    changed = [[n for n in NAMES if p[n] != DEFAULTS[n]] for p in first[1:]]
    assert changed == [["max_num_batched_tokens"], ["enable_prefix_caching"], ["dtype"], ["block_size"]]
    counts = [sum(GRID_PARAMS.serve_params[i][n] != DEFAULTS[n] for n in NAMES) for i in order]
    assert counts == sorted(counts)


def test_every_candidate_is_found_again_from_its_flags_and_others_are_not() -> None:
    for key, params in zip(GRID_PARAMS.keys, GRID_PARAMS.serve_params, strict=True):
        # the peers write flags with dashes and booleans as they please
        spelled = {
            name: str(value).lower() if isinstance(value, bool) else value for name, value in params.items()
        }
        assert match_key(GRID_PARAMS, spelled, names=NAMES) == key
    assert match_key(GRID_PARAMS, {**DEFAULTS, "block_size": 64}, names=NAMES) is None


def _run(params: Mapping[str, object], p50: float, p90: float, goodput: float) -> dict[str, object]:
    return {**params, "median_ttft_ms": p50, "p90_ttft_ms": p90, "request_goodput": goodput, "run_number": 0}


def test_the_sweeps_pick_is_the_fastest_median_within_the_slo() -> None:
    fast_but_late = {**DEFAULTS, "max_num_batched_tokens": 256}
    blocks = {**DEFAULTS, "block_size": 32}
    combinations = [
        [_run(DEFAULTS, 250, 700, 2.8), _run(DEFAULTS, 260, 720, 2.7)],
        [_run(fast_but_late, 100, 900, 2.0), _run(fast_but_late, 110, 950, 2.0)],  # p90 over 800 ms
        [_run(blocks, 160, 500, 2.9), _run(blocks, 170, 520, 2.9)],
        [],  # a combination whose server never started leaves no runs
    ]
    outcome = sweep_outcome(combinations, names=NAMES, defaults=DEFAULTS, slo=VOICE_TURN_SLO)
    assert len(outcome.trials) == 3
    assert outcome.trials[0].p50_ttft_ms == 255 and outcome.trials[0].p90_ttft_ms == 710
    assert outcome.pick == 2 and outcome.claims_better is True
    assert "within the SLO" in outcome.how


def test_a_sweep_where_nothing_meets_the_slo_picks_the_fastest_and_says_so() -> None:
    slow = {**DEFAULTS, "dtype": "float32"}
    combinations = [[_run(slow, 900, 2000, 0.1)], [_run(DEFAULTS, 1200, 2500, 0.1)]]
    outcome = sweep_outcome(combinations, names=NAMES, defaults=DEFAULTS, slo=VOICE_TURN_SLO)
    assert outcome.pick == 0 and outcome.claims_better is True
    assert "none met" in outcome.how


def test_a_sweep_that_never_measured_the_defaults_makes_no_claim() -> None:
    blocks = {**DEFAULTS, "block_size": 32}
    outcome = sweep_outcome(
        [[_run(blocks, 150, 400, 3.0)]], names=NAMES, defaults=DEFAULTS, slo=VOICE_TURN_SLO
    )
    assert outcome.pick == 0 and outcome.claims_better is None


def _score(trial_id: str, score: float) -> dict[str, object]:
    return {"trial_id": trial_id, "score": score, "server_args": {"host": "127.0.0.1"}}


def _trial(trial_id: str, p50: float, status: str = "completed") -> dict[str, object]:
    return {
        "trial_id": trial_id,
        "status": status,
        "metrics": {"ttft_ms": {"average": p50 + 5, "median": p50}},
    }


SELECTED = {
    "baseline": {},
    "trial-0001": {
        "block-size": 32,
        "dtype": "bfloat16",
        "enable-prefix-caching": True,
        "max-num-batched-tokens": 2048,
    },
    "trial-0002": {
        "block-size": 128,
        "dtype": "float32",
        "enable-prefix-caching": False,
        "max-num-batched-tokens": 256,
    },
}


def test_the_optimizers_pick_is_its_best_and_each_trial_carries_its_flags() -> None:
    result = {
        "trials": [
            _trial("baseline", 250),
            _trial("trial-0001", 160),
            _trial("trial-0002", 0, status="failed"),
        ],
        "ranking": [_score("trial-0001", 2.9)],
        "baseline": _score("baseline", 2.5),
        "best": _score("trial-0001", 2.9),
    }
    outcome = optimizer_outcome(result, selected=SELECTED, defaults=DEFAULTS, names=NAMES)
    assert [t.ok for t in outcome.trials] == [True, True, False]
    assert outcome.trials[0].params == {n: DEFAULTS[n] for n in NAMES}  # the baseline selects nothing
    assert outcome.trials[1].params["block_size"] == 32 and outcome.trials[1].p50_ttft_ms == 160
    assert outcome.trials[2].params["enable_prefix_caching"] is False
    assert outcome.pick == 1 and outcome.claims_better is True
    assert match_key(GRID_PARAMS, outcome.trials[1].params, names=NAMES) == SPACE[6].key


def test_an_optimizer_run_with_nothing_meeting_its_constraint_keeps_the_defaults() -> None:
    result = {
        "trials": [_trial("baseline", 2900), _trial("trial-0001", 2100)],
        "ranking": [],
        "baseline": _score("baseline", 0.0),
        "best": None,
    }
    outcome = optimizer_outcome(result, selected=SELECTED, defaults=DEFAULTS, names=NAMES)
    assert outcome.pick == 0 and outcome.claims_better is False
    assert "defaults kept" in outcome.how


def test_the_server_log_and_engine_time() -> None:
    assert parse_server_log("12 100.5\n13 160.25\n14 17") == [(12, 100.5), (13, 160.25)]  # torn last line
    lives = [ServerLife(12, 100.0, 130.0), ServerLife(13, 140.0, 200.0), ServerLife(14, 210.0)]
    assert engine_seconds(lives, now=220.0) == pytest.approx(30 + 60 + 10)
    assert seconds_until(lives, 1, now=220.0) == pytest.approx(90)
    assert seconds_until(lives, 3, now=220.0) is None
    assert math.isclose(lives[2].seconds(215.0), 5.0)
