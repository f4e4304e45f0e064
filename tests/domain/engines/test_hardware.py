"""Hardware profiles: this machine, and the named accelerators used for validation."""

from __future__ import annotations

import os

import pytest

from evertune.domain.engines import NAMED_PROFILES, InvalidEngineConfig, detect_local, get_profile


def test_detect_local_describes_this_machine_as_the_cpu_backend() -> None:
    local = detect_local()
    assert local.name == "cpu"
    assert local.is_cpu
    assert local.accelerator is None
    assert local.cores == len(os.sched_getaffinity(0))
    assert 0 < local.memory_gib < 1 << 20
    assert {"auto", "bfloat16", "float32"} <= local.supported_dtypes
    assert local.block_size_multiple == 32
    assert (local.default_max_num_seqs, local.default_max_num_batched_tokens) == (128, 2048)
    assert local.kernels == {"vllm"}


def test_named_profiles_and_their_sim_twins() -> None:
    assert set(NAMED_PROFILES) == {"h100", "h200", "b200", "mi355x"}
    for name, profile in NAMED_PROFILES.items():
        assert get_profile(name) is profile
        assert get_profile(f"sim-{name}") is profile
        assert not profile.is_cpu
        assert profile.devices == 8
    assert get_profile("cpu").name == "cpu"
    assert "modelopt_fp4" in NAMED_PROFILES["b200"].supported_quantization
    assert "modelopt_fp4" not in NAMED_PROFILES["h200"].supported_quantization


def test_unknown_hardware_class_is_invalid() -> None:
    with pytest.raises(InvalidEngineConfig, match="unknown hardware class 'tpu-v9'"):
        get_profile("tpu-v9")
