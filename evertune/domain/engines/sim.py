"""The `sim` engine kind: evertune's performance model served as an OpenAI-compatible engine.

`SimEngine` starts `python -m evertune.domain.perfmodel.server` in a subprocess (its own process group, a
log file, parent-death signal: the shell every engine runs in, `process.ProcessEngine`) and has
the same surface: `start`, `wait_ready`, `health`, `scrape_metrics`, `stop`, `base_url`,
`async with`. A subprocess keeps the modelled step timing away from the caller's event loop and
the GIL. It reads only `config.json` and `tokenizer.json` of the model folder and starts in about
a second.

`hardware` is the hardware SIMULATED (e.g. `get_profile("h200")`), not the machine it runs on.
Efficiency factors: the calibration file given, else `<data_dir>/calibration/<hardware>.json`
when `evertune model calibrate` wrote one, else the model's defaults.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.errors import KnobRefused
from evertune.domain.engines.hardware import HardwareProfile, detect_local
from evertune.domain.engines.metrics import EngineMetrics, parse_metrics
from evertune.domain.engines.process import ProcessEngine
from evertune.domain.engines.protocol import EngineType
from evertune.domain.engines.vllm import BASE_ENV
from evertune.domain.engines.vllm_args import VLLM_KNOBS, engine_environ
from evertune.domain.engines.vllm_args import refuse_reasons as vllm_refuse_reasons

#: Module the sim engine runs.
SIM_SERVER_MODULE = "evertune.domain.perfmodel.server"


def sim_refuse_reasons(spec: EngineSpec, hardware: HardwareProfile) -> list[str]:
    """Why the sim engine cannot serve `spec` (one line each); empty when it can."""
    reasons: list[str] = []
    if spec.kind != "sim":
        reasons.append(f"engine kind {spec.kind!r} is not 'sim'")
    if spec.replica_count > 1:
        reasons.append("the sim engine serves one replica; start one SimEngine per replica")
    if spec.speculative is not None:
        reasons.append("the performance model does not model speculative decoding")
    if hardware.peak_flops <= 0 or hardware.memory_bandwidth <= 0:
        reasons.append(f"hardware {hardware.name!r} has no peak FLOP/s or bandwidth figures to simulate")
    return reasons


class SimEngine(ProcessEngine):
    """One sim server for an `EngineSpec` of kind "sim" (see the module doc)."""

    name = "sim"

    def __init__(
        self,
        spec: EngineSpec,
        *,
        log_dir: Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        python: str = sys.executable,
        served_model_name: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        hardware: HardwareProfile | None = None,
        calibration: Path | None = None,
    ) -> None:
        simulated = hardware or detect_local()
        reasons = sim_refuse_reasons(spec, simulated)
        if reasons:
            raise KnobRefused(reasons, hardware=simulated.name)
        # the sim server runs on any core: no `cpu_cores`
        super().__init__(
            spec,
            log_dir=log_dir,
            hardware=simulated,
            host=host,
            port=port,
            served_model_name=served_model_name,
            extra_env=extra_env,
        )
        self.python = python
        self.calibration = calibration

    def command(self) -> tuple[list[str], dict[str, str]]:
        """The command line and environment of the sim server."""
        knobs = self.spec.model_dump(exclude_none=True, exclude={"kind"})
        argv = [
            self.python,
            "-m",
            SIM_SERVER_MODULE,
            "--model",
            self.spec.model,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--hardware",
            self.hardware.name,
            "--spec-json",
            json.dumps(knobs, separators=(",", ":"), sort_keys=True),
        ]
        if self.served_model_name:
            argv += ["--served-model-name", self.served_model_name]
        if self.calibration is not None:
            argv += ["--calibration", str(self.calibration)]
        env = engine_environ(os.environ)
        env.update(BASE_ENV)
        env.update(self.extra_env)
        return argv, env

    def parse_metrics(self, text: str, *, scraped_at: float) -> EngineMetrics:
        """The sim server exposes vLLM's metric names."""
        return parse_metrics(text, scraped_at=scraped_at)


def _build(
    spec: EngineSpec,
    *,
    log_dir: Path,
    port: int | None = None,
    hardware: HardwareProfile | None = None,
    served_model_name: str | None = None,
    cpu_cores: Sequence[int] = (),
) -> SimEngine:
    """A sim server for the hardware simulated (default this machine's CPU profile), priced with
    the factors `evertune model calibrate` stored for it when there are any; `cpu_cores` unused
    (the model's timing does not depend on where its server runs)."""
    from evertune.domain.perfmodel.calibration import calibration_path, default_data_dir

    simulated = hardware or detect_local()
    stored = calibration_path(default_data_dir(), simulated.name)
    return SimEngine(
        spec,
        log_dir=log_dir,
        port=port,
        hardware=simulated,
        served_model_name=served_model_name,
        calibration=stored if stored.is_file() else None,
    )


ENGINE_TYPE = EngineType(
    kind="sim",
    summary="evertune's performance model served as an engine (a vLLM server's timing, no model)",
    knobs=VLLM_KNOBS,  # it models a vLLM server
    # The vLLM rules judge the knobs it models (as `kind="vllm"`), then the model's own limits.
    refuse=lambda spec, hardware, exists: (
        vllm_refuse_reasons(spec.model_copy(update={"kind": "vllm"}), hardware, path_exists=exists)
        + sim_refuse_reasons(spec, hardware)
    ),
    build=_build,
    parse_metrics=parse_metrics,
    routes=("/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics"),
    top_logprobs=0,  # its answers are words without logprobs
    binds_cores=False,
)
