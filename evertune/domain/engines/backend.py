"""The one way to start an engine of any kind: `make_engine(spec, ...)`.

- kind "vllm": a `VllmEngine` (one replica) or an `EngineGroup` (`spec.replicas` > 1), validated
  against `hardware` (the machine the engine runs on; default this machine);
- kind "sim": a `SimEngine`, evertune's performance model served over HTTP; `hardware` is the
  hardware simulated (default this machine's CPU profile), and the factors stored by
  `evertune model calibrate` for it are used when present.

Every result has `start`, `wait_ready`, `stop`, `health`, `scrape_metrics` and `async with`.
A refused config raises `KnobRefused` here, before any process exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.errors import InvalidEngineConfig
from evertune.domain.engines.hardware import HardwareProfile
from evertune.domain.engines.sim import SimEngine
from evertune.domain.engines.vllm import EngineGroup, VllmEngine


def make_engine(
    spec: EngineSpec,
    *,
    log_dir: Path,
    port: int | None = None,
    hardware: HardwareProfile | None = None,
    served_model_name: str | None = None,
    cpu_cores: Sequence[int] = (),
) -> VllmEngine | EngineGroup | SimEngine:
    """The engine for `spec` (see the module doc). `port` and `cpu_cores` (the cores a one-replica
    vLLM server keeps to) apply to one-replica engines only."""
    if spec.kind == "sim":
        from evertune.domain.perfmodel.calibration import calibration_path, default_data_dir

        simulated = hardware
        if simulated is None:
            from evertune.domain.engines.hardware import detect_local

            simulated = detect_local()
        stored = calibration_path(default_data_dir(), simulated.name)
        return SimEngine(
            spec,
            log_dir=log_dir,
            port=port,
            hardware=simulated,
            served_model_name=served_model_name,
            calibration=stored if stored.is_file() else None,
        )
    if spec.replica_count > 1:
        if port is not None:
            raise InvalidEngineConfig(
                f"a port was given for {spec.replica_count} replicas: each replica picks a free port"
            )
        return EngineGroup(spec, log_dir=log_dir, hardware=hardware, served_model_name=served_model_name)
    return VllmEngine(
        spec,
        log_dir=log_dir,
        port=port,
        hardware=hardware,
        served_model_name=served_model_name,
        cpu_cores=cpu_cores,
    )
