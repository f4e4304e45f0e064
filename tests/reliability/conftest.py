"""Shared by the reliability tests: a tokenizer folder made once."""

from __future__ import annotations

from pathlib import Path

import pytest

from evertune.domain.model import ensure_model


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """evertune's local tiny model folder (the gateway needs only its tokenizer), made once."""
    return ensure_model(Path(tmp_path_factory.mktemp("reliability-model")))
