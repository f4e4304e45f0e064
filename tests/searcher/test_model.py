"""The search model's simulated windows: primed as the runner's trials are."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from evertune.domain.perfmodel import SimInput
from evertune.domain.slo import Slo
from evertune.searcher.model import scaled
from evertune.searcher.space import Candidate, config_key

from .helpers import CPU_TRUTH, base_spec, search_model


def test_primed_windows_start_with_the_histories_cached(
    searcher_model_dir: Path, voice: list[SimInput]
) -> None:
    slo = Slo(ttft_ms=500.0, itl_ms=float("inf"), share=0.9)
    primed = search_model(searcher_model_dir, voice, efficiency=CPU_TRUTH, slo=slo, target_rps=2.0)
    cold = dataclasses.replace(primed, primed=False)
    assert any(x.history_tokens for x in voice[:5])  # the trace opens in mid-conversation
    spec = base_spec(searcher_model_dir).model_copy(update={"enable_prefix_caching": True})
    candidate = Candidate(spec=spec, key=config_key(spec), lossy=False, devices=0)
    warm_p50 = primed.predict(candidate, "cpu").figures.ttft_p50_ms
    cold_p50 = cold.predict(candidate, "cpu").figures.ttft_p50_ms
    assert warm_p50 < cold_p50
    # Without prefix caching nothing stays cached, primed or not.
    uncached = spec.model_copy(update={"enable_prefix_caching": False})
    off = Candidate(spec=uncached, key=config_key(uncached), lossy=False, devices=0)
    assert primed.predict(off, "cpu").figures.ttft_p50_ms == pytest.approx(
        cold.predict(off, "cpu").figures.ttft_p50_ms, rel=1e-9
    )


def test_a_repeated_prediction_is_answered_from_memory_until_the_factors_change(
    searcher_model_dir: Path, voice: list[SimInput]
) -> None:
    slo = Slo(ttft_ms=500.0, itl_ms=float("inf"), share=0.9)
    model = search_model(searcher_model_dir, voice, efficiency=CPU_TRUTH, slo=slo, target_rps=2.0)
    spec = base_spec(searcher_model_dir)
    candidate = Candidate(spec=spec, key=config_key(spec), lossy=False, devices=0)
    first = model.predict(candidate, "cpu")
    runs = model.simulations
    assert runs >= 2  # the gate and the target rates at least
    assert model.predict(candidate, "cpu") == first and model.simulations == runs
    # Other factors (a re-calibration) are other simulations; a copy starts with an empty memory.
    model.efficiency["cpu"] = scaled(CPU_TRUTH, 2.0)
    faster = model.predict(candidate, "cpu")
    assert model.simulations > runs and faster.figures.ttft_p50_ms < first.figures.ttft_p50_ms
    copy = dataclasses.replace(model, simulations=0)
    assert copy.predict(candidate, "cpu") == faster and copy.simulations == model.simulations - runs
