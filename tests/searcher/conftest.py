"""Fixtures of the searcher tests: the tiny local model (nothing downloaded), a voice trace of it, and
a data dir holding the calibration the `sim-cpu` runner serves."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from evertune.domain.model import make_model
from evertune.domain.perfmodel import SimInput
from evertune.domain.perfmodel.calibration import save_calibration

from .helpers import CPU_TRUTH, voice_inputs


@pytest.fixture(scope="session")
def searcher_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("searcher-model") / "model", size="tiny", seed=0)


@pytest.fixture(scope="session")
def voice(searcher_model_dir: Path) -> list[SimInput]:
    return voice_inputs(searcher_model_dir)


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data dir holding the CPU calibration the sim engine (the runner's "hardware") runs with."""
    folder = tmp_path / "data"
    monkeypatch.setenv("EVERTUNE_DATA_DIR", str(folder))
    save_calibration(folder, "cpu", {"efficiency": asdict(CPU_TRUTH)})
    return folder
