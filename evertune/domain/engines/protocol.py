"""What every engine is, whatever serves it: the `Engine` protocol, the `EngineFactory` that builds
one, and the `EngineType` an engine kind registers (`registry.py`).

An engine is one OpenAI-compatible server process for an `EngineSpec`: started, waited for, health
checked, scraped for metrics (read into the same `EngineMetrics` whatever the engine's own metric
names), stopped without leaving a process behind. vLLM, the sim engine and llama.cpp all run in
`process.ProcessEngine`; the tests' stand-ins do too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.hardware import HardwareProfile
from evertune.domain.engines.metrics import EngineMetrics, MetricsParser


class Engine(Protocol):
    """One engine server (see the module doc); `async with` starts it, waits and stops it."""

    spec: EngineSpec  #: what it serves, with which knobs
    cpu_cores: list[int]  #: cores the server keeps to (empty: any); set before `start`
    startup_s: float | None  #: seconds from start() to ready, once ready

    @property
    def base_url(self) -> str: ...

    @property
    def model_name(self) -> str: ...

    @property
    def log_file(self) -> Path: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def running(self) -> bool: ...

    def log_tail(self, n: int = ...) -> list[str]: ...

    async def start(self) -> None: ...

    async def wait_ready(self, timeout_s: float = ...) -> None: ...

    async def health(self) -> bool: ...

    async def scrape_metrics(self) -> EngineMetrics: ...

    async def stop(self, timeout_s: float = ...) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class EngineFactory(Protocol):
    """Builds the engine of ONE replica of `spec` (validated: `KnobRefused` before any process).

    `hardware`: the machine it runs on (None: this one); `port`: None picks a free one;
    `cpu_cores`: the cores it keeps to (engines that cannot be bound ignore them)."""

    def __call__(
        self,
        spec: EngineSpec,
        *,
        log_dir: Path,
        port: int | None = None,
        hardware: HardwareProfile | None = None,
        served_model_name: str | None = None,
        cpu_cores: Sequence[int] = (),
    ) -> Engine: ...


#: Why a spec cannot run on some hardware, one line each: `(spec, hardware, path_exists)`.
RefusalRule = Callable[[EngineSpec, HardwareProfile, Callable[[str], bool]], list[str]]


@dataclass(frozen=True)
class EngineType:
    """What an engine kind registers (`registry.ENGINES`): how to build one, what it accepts."""

    kind: str  #: the `EngineSpec.kind` (wire: `EngineConfig.engine`) it serves
    summary: str  #: one line for docs and the CLI
    #: `EngineSpec` knobs it accepts; setting any other is refused, naming the knob and the engine
    knobs: frozenset[str]
    #: its own refusal rules for the knobs it accepts (hardware, combinations, paths)
    refuse: RefusalRule
    build: EngineFactory  #: one replica of a spec of this kind
    #: its /metrics text -> `EngineMetrics` (for readers that know only its URL, the profiler)
    parse_metrics: MetricsParser
    routes: tuple[str, ...]  #: the OpenAI routes it serves under `base_url`
    #: most alternatives per token its completions return with `logprobs` (0: none)
    top_logprobs: int
    #: whether `cpu_cores` binds it (its threads follow the cores it is given)
    binds_cores: bool
