"""Engines by kind: the one table of what evertune can serve (`ENGINES`), and the one way to
build an engine of any kind (`make_engine`, `make_replicas`) or judge its knobs (`knob_refusals`,
`validate`).

Adding an engine is one module that defines an `EngineType` (protocol.py) and one line in
`ENGINES` (docs/engines.md has the checklist).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from evertune.domain.engines import llama_cpp, sim, vllm
from evertune.domain.engines.config import EngineSpec, foreign_knobs
from evertune.domain.engines.errors import InvalidEngineConfig, KnobRefused
from evertune.domain.engines.hardware import HardwareProfile, detect_local
from evertune.domain.engines.protocol import Engine, EngineType
from evertune.domain.engines.replicas import EngineGroup, split_cores

#: Every engine kind evertune serves, by `EngineSpec.kind`.
ENGINES: dict[str, EngineType] = {
    engine.kind: engine for engine in (vllm.ENGINE_TYPE, sim.ENGINE_TYPE, llama_cpp.ENGINE_TYPE)
}


def engine_type(kind: str) -> EngineType:
    """The registration of `kind`; `InvalidEngineConfig` (one line) for a kind not registered."""
    try:
        return ENGINES[kind]
    except KeyError:
        known = ", ".join(sorted(ENGINES))
        raise InvalidEngineConfig(f"engine: unknown engine kind {kind!r} (known: {known})") from None


def refuse_reasons(
    spec: EngineSpec,
    hardware: HardwareProfile,
    *,
    path_exists: Callable[[str], bool] = os.path.exists,
) -> list[str]:
    """Why `spec` cannot run on `hardware`, one line each (empty: it can): first every knob set
    that its engine does not take, then the engine's own rules."""
    engine = engine_type(spec.kind)
    return foreign_knobs(spec, engine.knobs) + engine.refuse(spec, hardware, path_exists)


def knob_refusals(spec: EngineSpec, hardware: HardwareProfile) -> list[str]:
    """`refuse_reasons` without looking at the filesystem (paths are the runner's to check)."""
    return refuse_reasons(spec, hardware, path_exists=lambda _path: True)


def validate(
    spec: EngineSpec,
    hardware: HardwareProfile,
    *,
    path_exists: Callable[[str], bool] = os.path.exists,
) -> None:
    """Raise `KnobRefused` with every reason `spec` cannot run on `hardware`; return if it can."""
    reasons = refuse_reasons(spec, hardware, path_exists=path_exists)
    if reasons:
        raise KnobRefused(reasons, hardware=hardware.name)


def make_engine(
    spec: EngineSpec,
    *,
    log_dir: Path,
    port: int | None = None,
    hardware: HardwareProfile | None = None,
    served_model_name: str | None = None,
    cpu_cores: Sequence[int] = (),
) -> Engine:
    """The engine of one replica of `spec`, of its kind (`EngineFactory`'s signature); nothing
    starts. A spec of several replicas is `make_replicas`'."""
    if spec.replica_count > 1:
        raise InvalidEngineConfig(
            f"replicas: {spec.replica_count} replicas are several engines (make_replicas), not one"
        )
    engine = engine_type(spec.kind)
    profile = hardware or detect_local()
    validate(spec, profile)
    return engine.build(
        spec,
        log_dir=log_dir,
        port=port,
        hardware=profile,
        served_model_name=served_model_name,
        cpu_cores=cpu_cores,
    )


def make_replicas(
    spec: EngineSpec,
    *,
    log_dir: Path,
    hardware: HardwareProfile | None = None,
    served_model_name: str | None = None,
    cpu_cores: Sequence[int] | None = None,
) -> EngineGroup:
    """`spec.replica_count` engines of one config on their own ports, as one `EngineGroup`.

    On CPU, an engine that binds to cores gets its own equal share of `cpu_cores` (default: every
    core this process may use), so replicas do not fight over the same cores."""
    engine = engine_type(spec.kind)
    profile = hardware or detect_local()
    count = spec.replica_count
    validate(spec, profile)
    one = spec.model_copy(update={"replicas": None})
    cores = sorted(os.sched_getaffinity(0)) if cpu_cores is None else list(cpu_cores)
    split = profile.is_cpu and engine.binds_cores and count > 1
    shares = split_cores(cores, count) if split else [[] for _ in range(count)]
    return EngineGroup(
        [
            engine.build(
                one, log_dir=log_dir, hardware=profile, served_model_name=served_model_name, cpu_cores=share
            )
            for share in shares
        ]
    )
