"""make_engine: one entry point for every engine kind; nothing starts at construction."""

from __future__ import annotations

from pathlib import Path

import pytest

from evertune.domain.engines import (
    EngineGroup,
    EngineSpec,
    InvalidEngineConfig,
    KnobRefused,
    SimEngine,
    VllmEngine,
    get_profile,
    make_engine,
)
from evertune.domain.engines.hardware import cpu_profile


def test_vllm_kind_gives_a_vllm_engine_or_a_group(tmp_path: Path) -> None:
    hardware = cpu_profile(cores=8, memory_gib=64.0)
    one = make_engine(EngineSpec(model="/m"), log_dir=tmp_path, port=8123, hardware=hardware)
    assert isinstance(one, VllmEngine) and not isinstance(one, SimEngine) and one.port == 8123
    group = make_engine(
        EngineSpec(model="/m", replicas=2, kv_cache_space_gib=1), log_dir=tmp_path, hardware=hardware
    )
    assert isinstance(group, EngineGroup) and len(group.replicas) == 2
    assert one.pid is None  # nothing started


def test_a_port_for_several_replicas_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidEngineConfig, match="replicas"):
        make_engine(
            EngineSpec(model="/m", replicas=2, kv_cache_space_gib=1),
            log_dir=tmp_path,
            port=8000,
            hardware=cpu_profile(cores=8, memory_gib=64.0),
        )


def test_sim_kind_gives_a_sim_engine_for_the_hardware_simulated(tmp_path: Path, tiny_model_dir: Path) -> None:
    engine = make_engine(
        EngineSpec(kind="sim", model=str(tiny_model_dir)),
        log_dir=tmp_path,
        hardware=get_profile("h200"),
        served_model_name="x",
    )
    assert isinstance(engine, SimEngine)
    argv, _ = engine.command()
    assert argv[argv.index("--hardware") + 1] == "h200"
    assert argv[argv.index("--served-model-name") + 1] == "x"
    assert engine.model_name == "x"


def test_vllm_refuses_the_sim_kind_and_sim_refuses_vllm(tmp_path: Path) -> None:
    with pytest.raises(KnobRefused, match="sim"):
        VllmEngine(
            EngineSpec(kind="sim", model="/m"), log_dir=tmp_path, hardware=cpu_profile(cores=2, memory_gib=8)
        )
    with pytest.raises(KnobRefused, match="not 'sim'"):
        SimEngine(EngineSpec(model="/m"), log_dir=tmp_path)
