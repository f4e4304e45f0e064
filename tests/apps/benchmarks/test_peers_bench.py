"""bench peers names every arm's pick by its grid cell, whatever space the arm searched (no engine)."""

from __future__ import annotations

from evertune.apps.benchmarks.peer_configs import peer_grid
from evertune.apps.benchmarks.peer_results import match_key, varying_names
from evertune.apps.benchmarks.peers import judge_cells, peers_setup
from evertune.apps.benchmarks.search import eager_space, search_plan
from evertune.apps.benchmarks.search_grid import grid_key
from evertune.domain.engines import EngineSpec, get_profile

CPU = get_profile("cpu")
DEFAULTS = EngineSpec(model="/m", enforce_eager=True, kv_cache_space_gib=2)


def test_every_pick_of_either_search_and_of_the_peers_is_a_judge_cell() -> None:
    setup = peers_setup(True)
    cells = judge_cells(eager_space(base=DEFAULTS, hardware=CPU, limits=setup.limits))
    assert len(cells) == 16 and all(key == c.key for key, c in cells.items())
    fp32 = DEFAULTS.model_copy(update={"dtype": "float32"})
    for start in (DEFAULTS, fp32):
        plan = search_plan(setup, start=start, hardware=CPU, name="t")
        # a search from fp32 writes bfloat16 where the defaults' space leaves the dtype unset
        assert {grid_key(c.spec) for c, _ in plan.candidates} == set(cells)
    grid = peer_grid([(c.key, c.spec) for c in cells.values()], hardware=CPU)
    names = varying_names(grid)
    assert [match_key(grid, params, names=names) for params in grid.serve_params] == list(cells)


def test_the_quick_run_searches_the_full_grid() -> None:
    assert len(eager_space(base=DEFAULTS, hardware=CPU, limits=peers_setup(True).limits)) == 16
    assert peers_setup(True).budget == 7 and peers_setup(False).budget == 12
