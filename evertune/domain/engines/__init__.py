"""evertune.domain.engines: the engines evertune serves, behind one interface.

- `config`: `EngineSpec`, the validated engine config, and its one conversion from/to the wire.
- `protocol`: `Engine` (what every engine is), `EngineFactory`, `EngineType` (a kind's registration).
- `registry`: `ENGINES` by kind; `make_engine` / `make_replicas`, the one way to build engines;
  `refuse_reasons`, `knob_refusals`, `validate` for any kind.
- `hardware`: `HardwareProfile`s (this machine, named accelerators) for validation.
- `process`: `ProcessEngine`, the shell every engine runs in (start, ready, health, stop, metrics).
- `vllm_args` / `vllm`: vLLM's knobs -> arguments and refusal rules (pure); `VllmEngine`.
- `llama_cpp_args` / `llama_cpp`: the same for llama.cpp's `llama-server`; `LlamaCppEngine`.
- `sim`: `SimEngine`, the performance model served as an engine (kind "sim").
- `metrics`: the /metrics parser, `EngineMetrics`, and `delta` between two scrapes.
- `replicas`: several replicas of one config as one (`EngineGroup`), `split_cores`.
"""

from evertune.domain.engines.config import KNOBS, EngineSpec, SpeculativeSpec
from evertune.domain.engines.errors import (
    EngineNotRunning,
    EngineStartFailed,
    InvalidEngineConfig,
    KnobRefused,
    MetricsUnavailable,
)
from evertune.domain.engines.hardware import NAMED_PROFILES, HardwareProfile, detect_local, get_profile
from evertune.domain.engines.metrics import EngineMetrics, Histogram, MetricsDelta, delta, parse_metrics
from evertune.domain.engines.protocol import Engine, EngineFactory, EngineType
from evertune.domain.engines.registry import (
    ENGINES,
    engine_type,
    knob_refusals,
    make_engine,
    make_replicas,
    refuse_reasons,
    validate,
)
from evertune.domain.engines.replicas import EngineGroup, split_cores
from evertune.domain.engines.sim import SimEngine
from evertune.domain.engines.vllm import VllmEngine
from evertune.domain.engines.vllm_args import knob_args, server_command

__all__ = [
    "ENGINES",
    "KNOBS",
    "NAMED_PROFILES",
    "Engine",
    "EngineFactory",
    "EngineGroup",
    "EngineMetrics",
    "EngineNotRunning",
    "EngineSpec",
    "EngineStartFailed",
    "EngineType",
    "HardwareProfile",
    "Histogram",
    "InvalidEngineConfig",
    "KnobRefused",
    "MetricsDelta",
    "MetricsUnavailable",
    "SimEngine",
    "SpeculativeSpec",
    "VllmEngine",
    "delta",
    "detect_local",
    "engine_type",
    "get_profile",
    "knob_args",
    "knob_refusals",
    "make_engine",
    "make_replicas",
    "parse_metrics",
    "refuse_reasons",
    "server_command",
    "split_cores",
    "validate",
]
