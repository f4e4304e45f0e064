"""Fixtures of the engine tests: the local tiny Llama (`evertune.domain.model`), made once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from evertune.domain.model import make_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama-architecture model folder (config, weights, tokenizer); nothing is downloaded."""
    return make_model(tmp_path_factory.mktemp("tiny-model") / "model", size="tiny", seed=0)
