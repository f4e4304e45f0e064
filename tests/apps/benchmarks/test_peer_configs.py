"""The peers' configurations are evertune's candidates, flag for flag (no peer runs here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evertune.apps.benchmarks.peer_configs import (
    bench_args,
    fixed_params,
    flags_as_params,
    optimizer_config,
    optimizer_space,
    params_as_flags,
    peer_grid,
)
from evertune.apps.benchmarks.search import GRID, QUICK_GRID, eager_space
from evertune.domain.engines import EngineSpec, get_profile
from evertune.domain.engines.vllm_args import knob_args
from evertune.domain.slo import VOICE_TURN_SLO
from evertune.searcher.space import SpaceLimits, candidate_space

BASE = EngineSpec(model="/m", enforce_eager=True, kv_cache_space_gib=2)
CPU = get_profile("cpu")


def _space(limits: SpaceLimits) -> list[tuple[str, EngineSpec]]:
    return [(c.key, c.spec) for c in eager_space(base=BASE, hardware=CPU, limits=limits)]


@pytest.mark.parametrize("limits", [GRID, QUICK_GRID], ids=["grid", "quick grid"])
def test_each_sweep_entry_starts_vllm_with_evertunes_own_flags(limits: SpaceLimits) -> None:
    space = _space(limits)
    grid = peer_grid(space, hardware=CPU)
    assert grid.keys == [key for key, _ in space] and not grid.left_out
    assert grid.env == {"VLLM_CPU_KVCACHE_SPACE": "2"}  # the KV cache, the same for every candidate
    for (_, spec), params in zip(space, grid.serve_params, strict=True):
        ours = knob_args(spec, hardware=CPU).argv
        theirs = params_as_flags(params)
        # every flag evertune sets, with its value; the peers also write out vLLM's defaults
        assert all(flag in theirs for flag in ours if flag.startswith("--")), (ours, theirs)
        assert flags_as_params(ours).items() <= params.items()
    assert len({json.dumps(p, sort_keys=True) for p in grid.serve_params}) == len(space)  # all distinct


def test_vllms_defaults_are_written_out_so_the_optimizer_can_pick_them() -> None:
    grid = peer_grid(_space(GRID), hardware=CPU)
    defaults = grid.serve_params[0]  # the base: vLLM's CPU defaults, eager
    assert defaults["block_size"] == CPU.default_block_size and defaults["dtype"] == "bfloat16"
    assert defaults["max_num_batched_tokens"] == CPU.default_max_num_batched_tokens
    tune = optimizer_space(grid)
    assert tune == {
        "max-num-batched-tokens": {"values": [2048, 256]},
        "enable-prefix-caching": {"values": [True, False]},
        "dtype": {"values": ["bfloat16", "float32"]},
        "block-size": {"values": [128, 32]},
    }
    # the rest is the same for every candidate: the optimizer's fixed server flags
    assert fixed_params(grid) == {
        "max_num_seqs": 128,
        "enable_chunked_prefill": True,
        "enforce_eager": True,
        "tensor_parallel_size": 1,
    }


def test_what_no_peer_can_serve_is_left_out_with_its_reason() -> None:
    limits = QUICK_GRID.model_copy(update={"cpu_quantization": ("int8-w8a8",), "cpu_engines": ("llama.cpp",)})
    space = [(c.key, c.spec) for c in candidate_space(base=BASE, hardware=CPU, limits=limits, max_replicas=2)]
    grid = peer_grid(space, hardware=CPU)
    reasons = set(grid.left_out.values())
    assert any("int8 copy" in r for r in reasons)
    assert any("another engine (llama.cpp)" in r for r in reasons)
    assert any("replicas" in r for r in reasons)
    assert len(grid.keys) + len(grid.left_out) == len(space) and grid.keys
    other_kv = [("k", BASE.model_copy(update={"kv_cache_space_gib": 4}))]
    mixed = peer_grid([*_space(QUICK_GRID)[:1], *other_kv], hardware=CPU)
    assert list(mixed.left_out) == ["k"] and "environment" in mixed.left_out["k"]


def test_flags_and_params_convert_both_ways() -> None:
    argv = ["--max-num-seqs", "64", "--no-enable-prefix-caching", "--enforce-eager", "--dtype", "float32"]
    params = flags_as_params(argv)
    assert params == {
        "max_num_seqs": 64,
        "enable_prefix_caching": False,
        "enforce_eager": True,
        "dtype": "float32",
    }
    assert params_as_flags(params) == argv
    with pytest.raises(ValueError, match="not a flag"):
        flags_as_params(["64"])


def test_the_optimizer_maximises_goodput_under_the_slos_p50_on_the_common_trace(tmp_path: Path) -> None:
    grid = peer_grid(_space(QUICK_GRID), hardware=CPU)
    bench = bench_args(trace_path=tmp_path / "voice.jsonl", requests=1350, slo=VOICE_TURN_SLO)
    assert bench["dataset-name"] == "timed_trace" and bench["num-prompts"] == 1350
    assert bench["goodput"] == "ttft:800" and bench["timed-trace-chunk-hash-size"] == 16
    config = optimizer_config(
        grid,
        name="peers",
        output_dir=tmp_path / "runs",
        model_dir=Path("/models/smollm2"),
        port=8123,
        bench=bench,
        slo=VOICE_TURN_SLO,
        trials=6,
        repeats=2,
        seed=1,
    )
    assert config["optimization"] == {
        "maximize": "request_goodput",
        "sampler": "tpe",
        "trials": 6,
        "constraints": [{"metric": "time_to_first_token_ms", "statistic": "p50", "max": "550 ms"}],
    }
    assert config["tune"] == optimizer_space(grid) and set(config["tune"]) == {"dtype", "block-size"}
    assert config["server"]["model"] == "/models/smollm2" and config["server"]["enforce-eager"] is True
    assert config["env"] == {"VLLM_CPU_KVCACHE_SPACE": "2"}
    assert config["benchmark"]["runs"] == [{"name": "voice", "args": bench}]
    json.dumps(config)  # written as JSON, which YAML reads
