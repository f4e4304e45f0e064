"""llama.cpp's knobs -> llama-server's arguments, and its refusal rules (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from evertune.domain.engines import EngineSpec, get_profile
from evertune.domain.engines.hardware import cpu_profile
from evertune.domain.engines.llama_cpp_args import knob_args, refuse_reasons, server_command

CPU = cpu_profile(cores=4, memory_gib=16.0)


def spec(**knobs: Any) -> EngineSpec:
    return EngineSpec.parse({"kind": "llama.cpp", "model": "/m/model.gguf", **knobs})


def test_unset_knobs_give_no_argument_but_the_threads() -> None:
    assert knob_args(spec(), threads=3) == ["--threads", "3", "--threads-batch", "3"]


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [
        ({"max_num_seqs": 8}, ["--parallel", "8"]),
        ({"max_model_len": 2048}, ["--kv-unified-per-slot", "2048"]),
        ({"max_num_batched_tokens": 1024}, ["--batch-size", "1024"]),
        ({"micro_batch_tokens": 256}, ["--ubatch-size", "256"]),
        ({"flash_attention": True}, ["--flash-attn", "on"]),
        ({"flash_attention": False}, ["--flash-attn", "off"]),
        ({"cache_reuse_tokens": 256}, ["--cache-reuse", "256"]),
        ({"enable_prefix_caching": False}, ["--no-cache-prompt"]),
        ({"enable_prefix_caching": True}, ["--cache-prompt"]),
        ({"quantization": "q8_0"}, []),  # the file served, not an argument
        ({"replicas": 2}, []),  # N servers, not an argument
    ],
)
def test_each_knob_gives_its_argument(knobs: dict[str, Any], expected: list[str]) -> None:
    assert knob_args(spec(**knobs), threads=1)[4:] == expected


def test_the_command_serves_the_gguf_with_metrics_under_the_endpoint_name() -> None:
    argv = server_command(
        spec(max_num_seqs=2),
        binary="/b/llama-server",
        gguf="/m/q8_0.gguf",
        host="127.0.0.1",
        port=9,
        threads=2,
        served_model_name="voice",
    )
    assert argv[:9] == [
        "/b/llama-server",
        "--model",
        "/m/q8_0.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "9",
        "--metrics",
        "--no-webui",
    ]
    assert argv[argv.index("--alias") + 1] == "voice" and argv[-2:] == ["--parallel", "2"]


@pytest.mark.parametrize(
    ("hardware", "knobs", "needle"),
    [
        (
            CPU,
            {"quantization": "awq"},
            "quantization 'awq' is not a GGUF file type engine 'llama.cpp' serves",
        ),
        (get_profile("h200"), {}, "engine 'llama.cpp' is built for CPU only here, not 'h200'"),
        (CPU, {"replicas": 5}, "5 replicas need 5 cores, this machine has 4"),
        (
            CPU,
            {"max_num_batched_tokens": 128, "micro_batch_tokens": 256},
            "micro_batch_tokens 256 is more than",
        ),
        (
            CPU,
            {"enable_prefix_caching": False, "cache_reuse_tokens": 64},
            "cache_reuse_tokens needs the prompt cache",
        ),
    ],
)
def test_refusals_name_the_knob(hardware: Any, knobs: dict[str, Any], needle: str) -> None:
    reasons = refuse_reasons(spec(**knobs), hardware, path_exists=lambda _p: True)
    assert len(reasons) == 1 and needle in reasons[0], reasons


def test_a_missing_model_is_refused_and_a_valid_spec_is_not() -> None:
    assert refuse_reasons(spec(), CPU, path_exists=lambda _p: False) == [
        "model '/m/model.gguf' does not exist"
    ]
    assert (
        refuse_reasons(
            spec(max_num_seqs=4, max_model_len=2048, quantization="q4_k_m"), CPU, path_exists=lambda _p: True
        )
        == []
    )
