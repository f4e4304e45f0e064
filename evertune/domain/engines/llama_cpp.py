"""The llama.cpp engine: llama.cpp's own OpenAI-compatible server (`llama-server`, built for this
machine by `make engines`) in evertune's process shell, and its registration.

The model it serves is a GGUF file: an evertune model folder is written as the GGUF file type
`spec.quantization` asks for (`evertune.domain.model.gguf_formats.ensure_gguf`, cached beside the
folder) when the engine starts; a `.gguf` path is served as it is. Its /metrics (`--metrics`) are
read into the same `EngineMetrics` as vLLM's (`parse_llama_cpp_metrics`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from evertune.domain.engines.config import EngineSpec, foreign_knobs
from evertune.domain.engines.errors import EngineNotRunning, EngineStartFailed, KnobRefused
from evertune.domain.engines.hardware import HardwareProfile, detect_local
from evertune.domain.engines.llama_cpp_args import (
    KNOB_ENV_PREFIX,
    LLAMA_CPP_KNOBS,
    refuse_reasons,
    server_command,
)
from evertune.domain.engines.llama_cpp_metrics import parse_llama_cpp_metrics
from evertune.domain.engines.metrics import EngineMetrics
from evertune.domain.engines.process import ProcessEngine
from evertune.domain.engines.protocol import EngineType
from evertune.domain.engines.vllm_args import engine_environ

#: The program `make engines` builds.
SERVER = "llama-server"
#: The quantizer of the same build (lower-bit GGUF file types).
QUANTIZE = "llama-quantize"


def installed_binary(name: str) -> Path | None:
    """`name` from the llama.cpp build for this machine, or None where `make engines` has not
    built it."""
    from evertune.infra.llama_cpp_build import llama_cpp_bin_dir

    folder = llama_cpp_bin_dir()
    return folder / name if folder is not None else None


class LlamaCppEngine(ProcessEngine):
    """One llama-server for an `EngineSpec` of kind "llama.cpp" (see the module doc).

    The spec is validated at construction (`KnobRefused` before any process). `binary`: the
    llama-server to run (default: `make engines`' build; a missing build fails `start` with one
    line saying so). The GGUF file is made, when it must be, in `start`.
    """

    name = "llama.cpp"

    def __init__(
        self,
        spec: EngineSpec,
        *,
        log_dir: Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        served_model_name: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        hardware: HardwareProfile | None = None,
        cpu_cores: Sequence[int] = (),
        binary: Path | None = None,
    ) -> None:
        profile = hardware or detect_local()
        reasons = foreign_knobs(spec, LLAMA_CPP_KNOBS) + refuse_reasons(spec, profile)
        if reasons:
            raise KnobRefused(reasons, hardware=profile.name)
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
        self.binary = binary
        self.gguf: Path | None = None  #: the GGUF file served, once `start` has found or made it

    @property
    def threads(self) -> int:
        """Threads for prompt and generation: one per core it keeps to (else per allowed core)."""
        return len(self.cpu_cores) or len(os.sched_getaffinity(0))

    def command(self) -> tuple[list[str], dict[str, str]]:
        """The command line and environment; known once `start` has found the server and the GGUF."""
        if self.binary is None or self.gguf is None:
            raise EngineNotRunning(f"llama.cpp engine on port {self.port}: its files are found by start()")
        argv = server_command(
            self.spec,
            binary=str(self.binary),
            gguf=str(self.gguf),
            host=self.host,
            port=self.port,
            threads=self.threads,
            served_model_name=self.served_model_name,
        )
        env = {k: v for k, v in engine_environ(os.environ).items() if not k.startswith(KNOB_ENV_PREFIX)}
        if self.scratch is not None:
            env["TMPDIR"] = str(self.scratch)
        env.update(self.extra_env)
        return argv, env

    async def start(self) -> None:
        """Find or make the GGUF file, then start the server (returns at once)."""
        if self.running:
            return
        binary = self.binary or installed_binary(SERVER)
        if binary is None:
            raise EngineStartFailed(
                "llama.cpp's llama-server is not built on this machine: run `make engines`",
                log_file=str(self.log_file),
            )
        self.binary = binary
        self.gguf = await asyncio.to_thread(self._model_file)
        await super().start()

    def _model_file(self) -> Path:
        from evertune.domain.model.gguf_formats import ensure_gguf

        return ensure_gguf(Path(self.spec.model), self.spec.quantization, quantize=installed_binary(QUANTIZE))

    def parse_metrics(self, text: str, *, scraped_at: float) -> EngineMetrics:
        """llama.cpp's /metrics (see `llama_cpp_metrics`)."""
        return parse_llama_cpp_metrics(text, scraped_at=scraped_at)


ENGINE_TYPE = EngineType(
    kind="llama.cpp",
    summary="llama.cpp's llama-server on CPU, serving GGUF files (`make engines` builds it)",
    knobs=LLAMA_CPP_KNOBS,
    refuse=lambda spec, hardware, exists: refuse_reasons(spec, hardware, path_exists=exists),
    build=LlamaCppEngine,  # its constructor takes the factory's arguments
    parse_metrics=parse_llama_cpp_metrics,
    routes=("/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics"),
    top_logprobs=20,
    binds_cores=True,
)
