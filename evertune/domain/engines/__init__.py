"""evertune.domain.engines: the engine backend shared by the runner and the deployer.

- `config`: `EngineSpec`, the validated engine config, and its one conversion from/to the wire.
- `hardware`: `HardwareProfile`s (this machine, named accelerators) for validation.
- `vllm_args`: pure mapping of knobs to vLLM's arguments and environment, and refusal rules.
- `vllm`: `VllmEngine` / `EngineGroup`, the process shell (start, ready, health, stop, metrics).
- `metrics`: the /metrics parser, `EngineMetrics`, and `delta` between two scrapes.
- `replicas`: start, wait on and stop several replicas as one (`EngineGroup`, the runner).
- `sim`: `SimEngine`, the performance model served as an engine (kind "sim").
- `backend`: `make_engine(spec, ...)`, the one way to start an engine of any kind.
"""

from evertune.domain.engines.backend import make_engine
from evertune.domain.engines.config import EngineSpec, SpeculativeSpec
from evertune.domain.engines.errors import (
    EngineNotRunning,
    EngineStartFailed,
    InvalidEngineConfig,
    KnobRefused,
    MetricsUnavailable,
)
from evertune.domain.engines.hardware import NAMED_PROFILES, HardwareProfile, detect_local, get_profile
from evertune.domain.engines.metrics import EngineMetrics, Histogram, MetricsDelta, delta, parse_metrics
from evertune.domain.engines.sim import SimEngine
from evertune.domain.engines.vllm import EngineGroup, VllmEngine
from evertune.domain.engines.vllm_args import (
    knob_args,
    knob_refusals,
    refuse_reasons,
    server_command,
    validate,
)

__all__ = [
    "NAMED_PROFILES",
    "EngineGroup",
    "EngineMetrics",
    "EngineNotRunning",
    "EngineSpec",
    "EngineStartFailed",
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
    "get_profile",
    "knob_args",
    "knob_refusals",
    "make_engine",
    "parse_metrics",
    "refuse_reasons",
    "server_command",
    "validate",
]
