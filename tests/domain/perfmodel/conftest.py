"""Fixtures of the performance-model tests: the tiny model's architecture, a fixed CPU profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from evertune.domain.engines.hardware import HardwareProfile, cpu_profile
from evertune.domain.model import make_model
from evertune.domain.perfmodel.arch import ModelArch


@pytest.fixture
def tiny_arch() -> ModelArch:
    """The shape of evertune's tiny model (as its config.json says)."""
    return ModelArch(
        name="LlamaForCausalLM",
        layers=4,
        hidden=256,
        heads=4,
        kv_heads=2,
        head_dim=64,
        intermediate=768,
        vocab=4096,
        dtype_bytes=2,
    )


@pytest.fixture
def cpu() -> HardwareProfile:
    """A fixed 2-core CPU profile (not this machine's, so results do not depend on where tests run)."""
    return cpu_profile(cores=2, memory_gib=16.0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local tiny model folder (config.json, tokenizer); nothing is downloaded."""
    return make_model(tmp_path_factory.mktemp("perfmodel-model") / "model", size="tiny", seed=0)
