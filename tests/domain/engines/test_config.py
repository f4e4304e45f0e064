"""EngineSpec: validation of a config on its own, and the one conversion from/to the wire."""

from __future__ import annotations

import pytest

from evertune.domain.engines import EngineSpec, InvalidEngineConfig, SpeculativeSpec
from evertune.v1 import endpoint_pb2

FULL = EngineSpec(
    kind="vllm",
    model="/models/tiny",
    max_num_seqs=16,
    max_num_batched_tokens=1024,
    enable_chunked_prefill=False,
    enable_prefix_caching=True,
    enforce_eager=True,
    dtype="bfloat16",
    block_size=64,
    kv_cache_space_gib=1.5,
    speculative=SpeculativeSpec(method="ngram", num_speculative_tokens=3, prompt_lookup_max=4),
    quantization="awq",
    tensor_parallel_size=1,
    replicas=2,
    max_model_len=1024,
    kernels="vllm",
)


def test_full_spec_round_trips_through_proto() -> None:
    wire = FULL.to_proto()
    assert EngineSpec.from_proto(wire) == FULL
    # and through bytes, as it travels
    assert EngineSpec.from_proto(endpoint_pb2.EngineConfig.FromString(wire.SerializeToString())) == FULL


def test_unset_knobs_stay_unset_and_explicit_defaults_stay_explicit() -> None:
    bare = EngineSpec(model="m")
    wire = bare.to_proto()
    for name in ("max_num_seqs", "enable_chunked_prefill", "enforce_eager", "dtype", "kv_cache_space_gib"):
        assert not wire.HasField(name)
    assert not wire.HasField("speculative")
    assert EngineSpec.from_proto(wire) == bare

    explicit = EngineSpec(model="m", enable_prefix_caching=False, max_num_seqs=128, dtype="auto")
    wire = explicit.to_proto()
    assert wire.HasField("enable_prefix_caching") and wire.enable_prefix_caching is False
    assert EngineSpec.from_proto(wire) == explicit


def test_draft_model_speculation_round_trips() -> None:
    spec = EngineSpec(
        model="m", speculative=SpeculativeSpec(method="eagle", num_speculative_tokens=2, draft_model="/d")
    )
    wire = spec.to_proto()
    assert wire.speculative.draft_model == "/d"
    assert not wire.speculative.HasField("prompt_lookup_max")
    assert EngineSpec.from_proto(wire) == spec


def test_empty_engine_means_vllm_and_empty_model_takes_the_endpoint_model() -> None:
    spec = EngineSpec.from_proto(endpoint_pb2.EngineConfig(), default_model="/models/endpoint")
    assert spec.kind == "vllm"
    assert spec.model == "/models/endpoint"
    assert EngineSpec.from_proto(endpoint_pb2.EngineConfig(engine="sim", model="x")).kind == "sim"


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        (endpoint_pb2.EngineConfig(engine="vllm"), "model"),
        (endpoint_pb2.EngineConfig(engine="tgi", model="m"), "kind"),
        (endpoint_pb2.EngineConfig(model="m", max_num_seqs=0), "max_num_seqs"),
        (endpoint_pb2.EngineConfig(model="m", kv_cache_space_gib=-1.0), "kv_cache_space_gib"),
        (endpoint_pb2.EngineConfig(model="m", dtype="fp64"), "dtype"),
        (endpoint_pb2.EngineConfig(model="m", kernels="cutlass"), "kernels"),
        (endpoint_pb2.EngineConfig(model="m", quantization=""), "quantization"),
        (
            endpoint_pb2.EngineConfig(
                model="m",
                speculative=endpoint_pb2.SpeculativeConfig(method="ngram", num_speculative_tokens=0),
            ),
            "num_speculative_tokens",
        ),
        (
            endpoint_pb2.EngineConfig(
                model="m",
                speculative=endpoint_pb2.SpeculativeConfig(method="eagle", num_speculative_tokens=2),
            ),
            "needs a draft_model",
        ),
        (
            endpoint_pb2.EngineConfig(
                model="m",
                speculative=endpoint_pb2.SpeculativeConfig(
                    method="ngram", num_speculative_tokens=2, draft_model="/d"
                ),
            ),
            "takes no draft_model",
        ),
        (
            endpoint_pb2.EngineConfig(
                model="m",
                speculative=endpoint_pb2.SpeculativeConfig(
                    method="mtp", num_speculative_tokens=2, prompt_lookup_max=3
                ),
            ),
            "prompt_lookup_max",
        ),
        (
            endpoint_pb2.EngineConfig(
                model="m",
                speculative=endpoint_pb2.SpeculativeConfig(method="medusa", num_speculative_tokens=2),
            ),
            "method",
        ),
    ],
)
def test_invalid_configs_raise_one_line(config: endpoint_pb2.EngineConfig, needle: str) -> None:
    with pytest.raises(InvalidEngineConfig) as info:
        EngineSpec.from_proto(config)
    message = str(info.value)
    assert needle in message
    assert "\n" not in message
    assert info.value.grpc_status.name == "INVALID_ARGUMENT"


def test_spec_is_frozen_and_counts_replicas() -> None:
    assert EngineSpec(model="m").replica_count == 1
    assert FULL.replica_count == 2
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises its own ValidationError
        FULL.max_num_seqs = 3
