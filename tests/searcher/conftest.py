"""Fixtures of the searcher tests: the tiny local model (nothing downloaded) and a voice trace of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from evertune.model import make_model
from evertune.perfmodel import SimInput

from .helpers import voice_inputs


@pytest.fixture(scope="session")
def searcher_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("searcher-model") / "model", size="tiny", seed=0)


@pytest.fixture(scope="session")
def voice(searcher_model_dir: Path) -> list[SimInput]:
    return voice_inputs(searcher_model_dir)
