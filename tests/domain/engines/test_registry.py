"""The engines' registry: one table of kinds, one way to build any of them, one refusal rule for a
knob an engine does not take. Every registered engine passes the same contract (here the part that
needs no process; test_engine_contract.py serves each one)."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from evertune.domain.engines import (
    ENGINES,
    KNOBS,
    Engine,
    EngineGroup,
    EngineSpec,
    InvalidEngineConfig,
    KnobRefused,
    SimEngine,
    VllmEngine,
    get_profile,
    knob_refusals,
    make_engine,
    make_replicas,
    refuse_reasons,
)
from evertune.domain.engines.config import EngineKind
from evertune.domain.engines.hardware import cpu_profile
from evertune.domain.engines.llama_cpp import LlamaCppEngine

CPU = cpu_profile(cores=8, memory_gib=64.0)
#: One value for every knob, each valid on its own.
ANY_VALUE: dict[str, object] = {
    "max_num_seqs": 4,
    "max_num_batched_tokens": 512,
    "enable_chunked_prefill": True,
    "enable_prefix_caching": True,
    "enforce_eager": True,
    "dtype": "bfloat16",
    "block_size": 32,
    "kv_cache_space_gib": 1.0,
    "quantization": "q8_0",
    "tensor_parallel_size": 1,
    "replicas": 1,
    "kernels": "vllm",
    "max_model_len": 1024,
    "micro_batch_tokens": 128,
    "flash_attention": False,
    "cache_reuse_tokens": 256,
    "speculative": {"method": "ngram", "num_speculative_tokens": 2},
}


def test_every_kind_the_config_accepts_is_registered_under_its_name() -> None:
    assert set(typing.get_args(EngineKind)) == set(ENGINES)
    assert all(engine.kind == kind for kind, engine in ENGINES.items())
    assert set(ANY_VALUE) == set(KNOBS)


@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_a_registered_engine_declares_what_it_serves(kind: str) -> None:
    engine = ENGINES[kind]
    assert engine.knobs <= set(KNOBS) and engine.knobs, "knobs are EngineSpec fields"
    assert {"/v1/completions", "/v1/chat/completions", "/health", "/metrics"} <= set(engine.routes)
    assert engine.top_logprobs >= 0 and engine.summary


@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_a_knob_an_engine_does_not_take_is_refused_naming_knob_and_engine(kind: str) -> None:
    foreign = sorted(set(KNOBS) - ENGINES[kind].knobs)
    assert foreign, f"{kind} takes every knob: the rule is untested for it"
    for knob in foreign:
        spec = EngineSpec.parse({"kind": kind, "model": "/m", knob: ANY_VALUE[knob]})
        reasons = knob_refusals(spec, CPU)
        assert reasons[0] == f"knob {knob} is not a knob of engine {kind!r}", reasons


@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_make_engine_builds_an_engine_of_the_kind_and_starts_nothing(kind: str, tiny_model_dir: Path) -> None:
    engine: Engine = make_engine(
        EngineSpec.parse({"kind": kind, "model": str(tiny_model_dir)}),
        log_dir=Path("/nonexistent"),
        hardware=CPU,
        port=8123,
    )
    expected = {"vllm": VllmEngine, "sim": SimEngine, "llama.cpp": LlamaCppEngine}[kind]
    assert type(engine) is expected
    assert engine.base_url.endswith(":8123") and engine.pid is None and not engine.running
    members = [m for m in dir(Engine) if not m.startswith("_") or m in ("__aenter__", "__aexit__")]
    members += list(Engine.__annotations__)  # the attributes: spec, cpu_cores, startup_s
    assert all(hasattr(engine, member) for member in members), members


def test_make_engine_refuses_before_building(tmp_path: Path) -> None:
    with pytest.raises(KnobRefused, match=r"knob block_size is not a knob of engine 'llama.cpp'"):
        make_engine(
            EngineSpec(kind="llama.cpp", model=str(tmp_path), block_size=32), log_dir=tmp_path, hardware=CPU
        )
    with pytest.raises(KnobRefused, match="quantization 'q3_x' is not a GGUF file type"):
        make_engine(
            EngineSpec(kind="llama.cpp", model=str(tmp_path), quantization="q3_x"),
            log_dir=tmp_path,
            hardware=CPU,
        )
    with pytest.raises(KnobRefused, match=r"llama\.cpp' is built for CPU only"):
        make_engine(
            EngineSpec(kind="llama.cpp", model=str(tmp_path)), log_dir=tmp_path, hardware=get_profile("h200")
        )
    with pytest.raises(InvalidEngineConfig, match="make_replicas"):
        make_engine(EngineSpec(model="/m", replicas=2, kv_cache_space_gib=1), log_dir=tmp_path, hardware=CPU)


def test_the_paths_of_a_spec_are_checked_unless_the_caller_says_not_to(tmp_path: Path) -> None:
    spec = EngineSpec(kind="llama.cpp", model=str(tmp_path / "missing.gguf"))
    assert refuse_reasons(spec, CPU) == [f"model {spec.model!r} does not exist"]
    assert knob_refusals(spec, CPU) == []


@pytest.mark.parametrize("kind", ["vllm", "llama.cpp"])
def test_replicas_of_an_engine_that_binds_cores_split_them(kind: str, tiny_model_dir: Path) -> None:
    spec = EngineSpec.parse(
        {"kind": kind, "model": str(tiny_model_dir), "replicas": 2}
        | ({"kv_cache_space_gib": 1} if kind == "vllm" else {})
    )
    group = make_replicas(spec, log_dir=Path("/nonexistent"), hardware=CPU, cpu_cores=[0, 1, 2, 3])
    assert isinstance(group, EngineGroup) and len(group.replicas) == 2
    assert [replica.cpu_cores for replica in group.replicas] == [[0, 1], [2, 3]]
    assert all(replica.spec.replicas is None for replica in group.replicas)
    assert len(set(group.urls)) == 2


def test_the_sim_engine_is_not_bound_to_cores(tiny_model_dir: Path) -> None:
    spec = EngineSpec(kind="sim", model=str(tiny_model_dir))
    engine = make_engine(spec, log_dir=Path("/nonexistent"), hardware=CPU, cpu_cores=[0])
    assert engine.cpu_cores == []  # the model's timing does not depend on where it runs


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


def test_each_engine_class_refuses_another_kind(tmp_path: Path) -> None:
    with pytest.raises(KnobRefused, match="engine kind 'sim' is not 'vllm'"):
        VllmEngine(
            EngineSpec(kind="sim", model="/m"), log_dir=tmp_path, hardware=cpu_profile(cores=2, memory_gib=8)
        )
    with pytest.raises(KnobRefused, match="not 'sim'"):
        SimEngine(EngineSpec(model="/m"), log_dir=tmp_path)
    with pytest.raises(KnobRefused, match=r"not 'llama\.cpp'"):
        LlamaCppEngine(EngineSpec(model=str(tmp_path)), log_dir=tmp_path, hardware=CPU)


def test_llama_cpp_serves_every_gguf_file_type_evertune_makes() -> None:
    from evertune.domain.engines.llama_cpp_args import GGUF_TYPES
    from evertune.domain.model.gguf_formats import file_types

    assert GGUF_TYPES == file_types()
