"""Architectures from config.json; unknown ones and unknown hardware are refused with the known list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evertune.domain.engines import InvalidEngineConfig, get_profile
from evertune.domain.perfmodel.arch import ModelArch, load_arch
from evertune.errors import InvalidArgument


def test_the_local_model_config_reads_as_its_shape(tiny_model_dir: Path, tiny_arch: ModelArch) -> None:
    assert load_arch(tiny_model_dir) == tiny_arch


def test_a_llama_70b_config_counts_about_70b_parameters() -> None:
    arch = ModelArch.from_config(
        {
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 8192,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "num_hidden_layers": 80,
            "intermediate_size": 28672,
            "vocab_size": 128256,
            "torch_dtype": "bfloat16",
        }
    )
    params = arch.weight_bytes / arch.dtype_bytes
    assert 68e9 < params < 71e9  # embeddings excluded (gathered, not read whole)
    assert arch.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2


def test_unknown_architecture_is_refused_with_the_known_list(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["MambaForCausalLM"]}))
    with pytest.raises(
        InvalidArgument, match=r"unknown model architecture 'MambaForCausalLM' \(known: LlamaForCausalLM"
    ):
        load_arch(tmp_path)


def test_missing_config_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="cannot read"):
        load_arch(tmp_path)


def test_unknown_hardware_is_refused_with_the_known_list() -> None:
    with pytest.raises(InvalidEngineConfig, match=r"known: cpu, b200, h100, h200, mi355x"):
        get_profile("tpu")
