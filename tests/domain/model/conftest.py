"""Fixtures of the model tests: one tiny model for the session (made in about a second)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from evertune.domain.model import load_tokenizer, make_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model, seed 0, made once per session."""
    return make_model(tmp_path_factory.mktemp("model") / "tiny", size="tiny", seed=0)


@pytest.fixture(scope="session")
def tokenizer(tiny_model: Path) -> Tokenizer:
    return load_tokenizer(tiny_model)


@pytest.fixture(scope="session")
def smollm2_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real model (SmolLM2-135M-Instruct, bf16) made from its installed package, once per session."""
    return make_model(tmp_path_factory.mktemp("model") / "smollm2-135m", size="smollm2-135m")
