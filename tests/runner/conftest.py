"""Fixtures of the runner tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from evertune.domain.model import make_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local tiny model (the sim engine reads its config and tokenizer); made once."""
    return make_model(tmp_path_factory.mktemp("runner-model") / "model", size="tiny", seed=0)
