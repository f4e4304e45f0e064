"""The `sim` engine kind: evertune's performance model served as an OpenAI-compatible engine.

`SimEngine` starts `python -m evertune.domain.perfmodel.server` in a subprocess (its own process group, a
log file, parent-death signal: the same shell as `VllmEngine`, whose lifecycle it reuses) and has
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
from collections.abc import Mapping
from pathlib import Path

from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.errors import KnobRefused
from evertune.domain.engines.hardware import HardwareProfile, detect_local
from evertune.domain.engines.vllm import BASE_ENV, VllmEngine
from evertune.domain.engines.vllm_args import engine_environ
from evertune.infra.nats_server import free_port

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


class SimEngine(VllmEngine):
    """One sim server for an `EngineSpec` of kind "sim" (see the module doc)."""

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
        # VllmEngine's constructor validates against vLLM's rules, which refuse kind "sim": the
        # attributes its lifecycle methods use are set here instead.
        self.hardware = hardware or detect_local()
        reasons = sim_refuse_reasons(spec, self.hardware)
        if reasons:
            raise KnobRefused(reasons, hardware=self.hardware.name)
        self.spec = spec
        self.host = host
        self.port = port or free_port()
        self.python = python
        self.served_model_name = served_model_name
        self.log_dir = log_dir
        self.extra_env = dict(extra_env or {})
        self.cpu_cores: list[int] = []  #: the sim server runs on any core
        self.calibration = calibration
        self.startup_s = None
        self._proc = None
        self._log = None
        self._session = None
        self._started_at = 0.0

    @property
    def log_file(self) -> Path:
        """The sim server's stdout and stderr."""
        return self.log_dir / f"sim-{self.port}.log"

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
