"""Knob -> vLLM argument mapping, and the per-hardware refusal rules (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from evertune.domain.engines import (
    NAMED_PROFILES,
    EngineSpec,
    KnobRefused,
    SpeculativeSpec,
    knob_args,
    server_command,
)
from evertune.domain.engines.hardware import cpu_profile
from evertune.domain.engines.vllm_args import refuse_reasons, validate

CPU = cpu_profile(cores=2, memory_gib=10.0)
BIG_CPU = cpu_profile(cores=64, memory_gib=512.0)
H200 = NAMED_PROFILES["h200"]


def spec(**knobs: Any) -> EngineSpec:
    return EngineSpec(model="/models/tiny", **knobs)


def test_defaults_produce_no_argument() -> None:
    args = knob_args(spec(), hardware=CPU)
    assert args.argv == []
    assert args.env == {}


@pytest.mark.parametrize(
    ("knobs", "argv"),
    [
        ({"max_num_seqs": 8}, ["--max-num-seqs", "8"]),
        ({"max_num_batched_tokens": 512}, ["--max-num-batched-tokens", "512"]),
        ({"enable_chunked_prefill": True}, ["--enable-chunked-prefill"]),
        ({"enable_chunked_prefill": False}, ["--no-enable-chunked-prefill"]),
        ({"enable_prefix_caching": True}, ["--enable-prefix-caching"]),
        ({"enable_prefix_caching": False}, ["--no-enable-prefix-caching"]),
        ({"enforce_eager": True}, ["--enforce-eager"]),
        ({"enforce_eager": False}, ["--no-enforce-eager"]),
        ({"dtype": "float32"}, ["--dtype", "float32"]),
        ({"dtype": "auto"}, ["--dtype", "auto"]),
        ({"block_size": 64}, ["--block-size", "64"]),
        ({"quantization": "awq"}, ["--quantization", "awq"]),
        ({"tensor_parallel_size": 1}, ["--tensor-parallel-size", "1"]),
        ({"max_model_len": 4096}, ["--max-model-len", "4096"]),
        ({"kv_cache_space_gib": 0.5}, ["--kv-cache-memory-bytes", str(2**29)]),
        ({"replicas": 2}, []),  # replicas are N processes (EngineGroup), not an argument
        ({"kernels": "vllm"}, []),  # vLLM's own kernels are its default
    ],
)
def test_each_knob_maps_to_its_vllm_argument(knobs: dict[str, Any], argv: list[str]) -> None:
    assert knob_args(spec(**knobs), hardware=CPU).argv == argv


def test_whole_gib_kv_space_on_cpu_is_the_cpu_backends_variable() -> None:
    args = knob_args(spec(kv_cache_space_gib=2.0), hardware=CPU)
    assert args.argv == []
    assert args.env == {"VLLM_CPU_KVCACHE_SPACE": "2"}


def test_kv_space_on_an_accelerator_is_bytes_per_device() -> None:
    args = knob_args(spec(kv_cache_space_gib=40.0), hardware=H200)
    assert args.argv == ["--kv-cache-memory-bytes", str(40 * 2**30)]
    assert args.env == {}


def test_evertune_kernels_load_the_plugin() -> None:
    assert knob_args(spec(kernels="evertune"), hardware=CPU).env == {"VLLM_PLUGINS": "evertune_kernels"}


@pytest.mark.parametrize(
    ("speculative", "expected"),
    [
        (
            SpeculativeSpec(method="ngram", num_speculative_tokens=3, prompt_lookup_max=4),
            {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
        ),
        (
            SpeculativeSpec(method="mtp", num_speculative_tokens=1),
            {"method": "mtp", "num_speculative_tokens": 1},
        ),
        (
            SpeculativeSpec(method="draft_model", num_speculative_tokens=4, draft_model="/models/draft"),
            {"method": "draft_model", "num_speculative_tokens": 4, "model": "/models/draft"},
        ),
    ],
)
def test_speculative_is_one_json_argument(speculative: SpeculativeSpec, expected: dict[str, Any]) -> None:
    argv = knob_args(spec(speculative=speculative), hardware=CPU).argv
    assert argv[0] == "--speculative-config"
    assert json.loads(argv[1]) == expected
    assert len(argv) == 2


def test_server_command_starts_the_api_server_module() -> None:
    argv, env = server_command(
        spec(enforce_eager=True, kv_cache_space_gib=1.0),
        hardware=CPU,
        python="/venv/bin/python",
        host="127.0.0.1",
        port=8123,
        served_model_name="tiny",
    )
    assert argv == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/tiny",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--served-model-name",
        "tiny",
        "--enforce-eager",
    ]
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "1"}


def test_a_plain_config_is_accepted_everywhere() -> None:
    plain = spec(max_num_seqs=64, max_num_batched_tokens=2048, enforce_eager=True, kv_cache_space_gib=1.0)
    assert refuse_reasons(plain, CPU) == []
    assert refuse_reasons(plain, H200) == []
    validate(plain, CPU)


def _exists(path: str) -> bool:
    return path == "/models/draft"


@pytest.mark.parametrize(
    ("hardware", "knobs", "needle"),
    [
        (CPU, {"tensor_parallel_size": 2}, "tensor_parallel_size 2 needs at least 8 cores"),
        (CPU, {"replicas": 3, "kv_cache_space_gib": 1.0}, "3 replicas x 1 ranks need 3 cores"),
        (CPU, {"replicas": 2}, "replicas > 1 on cpu need kv_cache_space_gib"),
        (CPU, {"quantization": "modelopt_fp4"}, "quantization 'modelopt_fp4' cannot run on cpu"),
        (CPU, {"quantization": "awq_marlin"}, "quantization 'awq_marlin' cannot run on cpu"),
        (CPU, {"quantization": "fp8"}, "quantization 'fp8' cannot run on cpu"),
        (CPU, {"block_size": 16}, "block_size 16 must be a multiple of 32"),
        (H200, {"block_size": 24}, "block_size 24 must be a multiple of 16"),
        (CPU, {"max_num_seqs": 64, "max_num_batched_tokens": 32}, "(32) must be >= max_num_seqs (64)"),
        (CPU, {"max_num_seqs": 4096}, "max_num_batched_tokens (2048) must be >= max_num_seqs (4096)"),
        (
            CPU,
            {"enable_chunked_prefill": False, "max_num_batched_tokens": 512, "max_model_len": 2048},
            "with chunked prefill off, max_num_batched_tokens (512) must be >= max_model_len (2048)",
        ),
        (CPU, {"kv_cache_space_gib": 12.0}, "1 replicas x kv_cache_space_gib 12 = 12 GiB does not fit"),
        (
            CPU,
            {"replicas": 2, "kv_cache_space_gib": 6.0},
            "2 replicas x kv_cache_space_gib 6 = 12 GiB does not fit in 10 GiB",
        ),
        (H200, {"kv_cache_space_gib": 200.0}, "does not fit in the 140 GiB of one h200 device"),
        (H200, {"tensor_parallel_size": 16}, "tensor_parallel_size 16 exceeds the 8 devices"),
        (
            H200,
            {"tensor_parallel_size": 4, "replicas": 3},
            "3 replicas x tensor_parallel_size 4 need 12 devices",
        ),
        (
            CPU,
            {
                "speculative": SpeculativeSpec(
                    method="eagle", num_speculative_tokens=2, draft_model="org/eagle"
                )
            },
            "draft_model 'org/eagle' is not a local path",
        ),
        (CPU, {"kernels": "evertune"}, "kernels 'evertune' are not available on cpu"),
        (CPU, {"kind": "sim"}, "engine kind 'sim' is not 'vllm'"),
    ],
)
def test_refusals_name_the_reason(hardware: Any, knobs: dict[str, Any], needle: str) -> None:
    reasons = refuse_reasons(spec(**knobs), hardware, path_exists=_exists)
    assert len(reasons) == 1, reasons
    assert needle in reasons[0]
    with pytest.raises(KnobRefused) as info:
        validate(spec(**knobs), hardware, path_exists=_exists)
    assert info.value.reasons == reasons
    assert info.value.grpc_status.name == "INVALID_ARGUMENT"
    assert str(info.value).startswith(f"engine config refused on {hardware.name}: ")


def test_accepted_on_bigger_or_other_hardware() -> None:
    # what the 2-core machine refuses, a big CPU box or an accelerator takes
    assert refuse_reasons(spec(tensor_parallel_size=2), BIG_CPU) == []
    assert refuse_reasons(spec(tensor_parallel_size=2), H200) == []
    assert refuse_reasons(spec(quantization="modelopt_fp4"), NAMED_PROFILES["b200"]) == []
    assert refuse_reasons(spec(block_size=16), H200) == []
    assert refuse_reasons(spec(replicas=4), H200) == []
    assert refuse_reasons(spec(kernels="evertune"), H200) == []  # the kernels' vLLM plugin runs on GPUs
    draft = SpeculativeSpec(method="draft_model", num_speculative_tokens=2, draft_model="/models/draft")
    assert refuse_reasons(spec(speculative=draft), CPU, path_exists=_exists) == []
    # vLLM raises the batch budget to max_model_len itself when the budget is left unset
    assert refuse_reasons(spec(enable_chunked_prefill=False, max_model_len=8192), CPU) == []


def test_every_reason_is_reported_at_once() -> None:
    bad = spec(
        tensor_parallel_size=2, block_size=16, dtype="float16", quantization="mxfp4", kernels="evertune"
    )
    reasons = refuse_reasons(bad, CPU)
    assert len(reasons) == 4  # float16 runs on x86 CPUs with vLLM 0.32
    with pytest.raises(KnobRefused) as info:
        validate(bad, CPU)
    assert str(info.value).count(";") == 3
    assert "\n" not in str(info.value)


def test_evertunes_int8_copy_is_served_through_compressed_tensors() -> None:
    int8 = spec(quantization="int8-w8a8")
    assert knob_args(int8, hardware=CPU).argv == ["--quantization", "compressed-tensors"]
    argv, _ = server_command(int8, hardware=CPU, python="py", host="h", port=1, model="/m+int8-w8a8")
    assert argv[argv.index("--model") + 1] == "/m+int8-w8a8"
    assert refuse_reasons(int8, CPU, path_exists=_exists) == []
