"""Performance model of vLLM: a discrete-event simulation of its V1 scheduler and a step-time model.

- `arch`: `ModelArch` from a model's `config.json` (known architectures only).
- `scheduler`: `Scheduler`, `BlockPool`, `SimRequest`: vLLM V1's scheduling, prefix cache, preemption.
- `steptime`: `Efficiency` (the calibrated factors) and `StepCost` (roofline per step).
- `des`: `run`, the event loop (arrivals, step starts, step and decode-stretch ends), `EventQueue`.
- `workload`: `prepare` planned requests into `SimInput`s (token counts, block hashes), `synthetic`.
- `simulate`: `simulate(workload, config, hardware, model) -> SimFigures`, `sim_goodput`.
- `calibrate` / `calibration` / `measure`: fit (to fixed shapes, `fit`; to measured replays and
  shapes, `fit_runs`), store and measure the efficiency factors.
- `server`: the `sim` engine's OpenAI-compatible server (`python -m evertune.domain.perfmodel.server`).
See docs/perfmodel.md.
"""

from evertune.domain.perfmodel.arch import KNOWN_ARCHITECTURES, ModelArch, load_arch
from evertune.domain.perfmodel.calibrate import CalibrationPoint, Fit, MeasuredRun, Residual, fit, fit_runs
from evertune.domain.perfmodel.calibration import calibration_path, load_efficiency, save_calibration
from evertune.domain.perfmodel.scheduler import BlockPool, Scheduler, SchedulerConfig, SimRequest, StepPlan
from evertune.domain.perfmodel.simulate import SimFigures, resolve, sim_goodput, simulate
from evertune.domain.perfmodel.steptime import Efficiency, StepCost
from evertune.domain.perfmodel.workload import PromptTokens, SimInput, prepare, synthetic

__all__ = [
    "KNOWN_ARCHITECTURES",
    "BlockPool",
    "CalibrationPoint",
    "Efficiency",
    "Fit",
    "MeasuredRun",
    "ModelArch",
    "PromptTokens",
    "Residual",
    "Scheduler",
    "SchedulerConfig",
    "SimFigures",
    "SimInput",
    "SimRequest",
    "StepCost",
    "StepPlan",
    "calibration_path",
    "fit",
    "fit_runs",
    "load_arch",
    "load_efficiency",
    "prepare",
    "resolve",
    "save_calibration",
    "sim_goodput",
    "simulate",
    "synthetic",
]
