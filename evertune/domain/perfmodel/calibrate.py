"""Fit the efficiency factors of a hardware profile to measured trials (pure; no I/O).

A measured point is one fixed shape run on a real engine: `concurrency` requests with distinct
prompts of `prompt_tokens` tokens, all sent at once, each generating `max_tokens` tokens, with the
engine's knobs. Its measures are the median TTFT and the median inter-token gap the client saw.
The model predicts both by simulating the same shape (the scheduler included, so chunking,
batching and queueing behind other prefills are modelled, not fitted).

The fit minimises the sum of squared log ratios (predicted / measured) over every measure of every
point, by Nelder-Mead on the logarithms of the six factors of `Efficiency` (`FACTORS`), from two
starts. Residuals are reported as relative errors, (predicted - measured) / measured, per point
and measure, with their median and maximum of absolute values.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.hardware import HardwareProfile
from evertune.domain.perfmodel.arch import ModelArch
from evertune.domain.perfmodel.simulate import block_size_of, simulate
from evertune.domain.perfmodel.steptime import Efficiency
from evertune.domain.perfmodel.workload import SimInput, synthetic
from evertune.errors import InvalidArgument

#: The measures a point carries.
MEASURES = ("ttft_ms", "itl_ms")


@dataclass(frozen=True)
class CalibrationPoint:
    """One measured shape (see the module doc)."""

    name: str  #: label, e.g. "n4-p1024-m16"
    concurrency: int  #: requests sent at once
    prompt_tokens: int  #: prompt length of each
    max_tokens: int  #: tokens each generates
    ttft_ms: float  #: measured median time to first token
    itl_ms: float  #: measured median inter-token gap (NaN when max_tokens is 1)
    knobs: dict[str, object] = field(default_factory=dict)  #: EngineSpec knobs the engine ran with
    prefix_tokens: int = 0  #: leading prompt tokens all its requests share (prefix-cache hits)
    prefix_warm: bool = False  #: the shared prefix was sent alone just before (it is in the cache)

    @classmethod
    def parse(cls, data: dict[str, object]) -> CalibrationPoint:
        """A point from JSON; one-line `InvalidArgument` when a field is missing or wrong."""
        try:
            point = cls(
                name=str(
                    data.get("name")
                    or f"n{data['concurrency']}-p{data['prompt_tokens']}-m{data['max_tokens']}"
                ),
                concurrency=int(data["concurrency"]),  # type: ignore[call-overload]
                prompt_tokens=int(data["prompt_tokens"]),  # type: ignore[call-overload]
                max_tokens=int(data["max_tokens"]),  # type: ignore[call-overload]
                ttft_ms=float(data["ttft_ms"]),  # type: ignore[arg-type]
                itl_ms=float(data.get("itl_ms", math.nan)),  # type: ignore[arg-type]
                knobs=dict(data.get("knobs") or {}),  # type: ignore[call-overload]
                prefix_tokens=int(data.get("prefix_tokens", 0)),  # type: ignore[call-overload]
                prefix_warm=bool(data.get("prefix_warm", False)),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise InvalidArgument(f"bad calibration point {data!r:.80}: {err}") from None
        if point.concurrency < 1 or point.prompt_tokens < 1 or point.max_tokens < 1 or not point.ttft_ms > 0:
            raise InvalidArgument(f"calibration point {point.name}: counts must be >= 1 and ttft_ms > 0")
        return point

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "concurrency": self.concurrency,
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "ttft_ms": self.ttft_ms,
            "itl_ms": self.itl_ms,
            "knobs": self.knobs,
            "prefix_tokens": self.prefix_tokens,
            "prefix_warm": self.prefix_warm,
        }


@dataclass(frozen=True)
class Residual:
    """The model against one measure of one point."""

    name: str  #: the point's name
    measure: str  #: "ttft_ms" or "itl_ms"
    measured: float  #: what the engine did
    predicted: float  #: what the model says
    rel_err: float  #: (predicted - measured) / measured


@dataclass(frozen=True)
class Fit:
    """The outcome of a calibration."""

    efficiency: Efficiency  #: the fitted factors
    residuals: tuple[Residual, ...]  #: per point and measure
    loss: float  #: sum of squared log ratios at the optimum
    evaluations: int  #: model evaluations the search made
    at_bound: tuple[str, ...] = ()  #: factors that ended at the search's bound (the data do not pin them)

    @property
    def median_abs_err(self) -> float:
        return statistics.median(abs(r.rel_err) for r in self.residuals) if self.residuals else math.nan

    @property
    def max_abs_err(self) -> float:
        return max((abs(r.rel_err) for r in self.residuals), default=math.nan)


def predict(
    point: CalibrationPoint,
    *,
    model: ModelArch,
    hardware: HardwareProfile,
    efficiency: Efficiency,
    base: EngineSpec,
) -> dict[str, float]:
    """The model's median TTFT and inter-token gap (ms) for a point's shape."""
    spec = base.model_copy(update=point.knobs) if point.knobs else base
    warm, inputs = _shape_inputs(
        point.concurrency,
        point.prompt_tokens,
        point.max_tokens,
        block_size_of(spec, hardware),
        point.prefix_tokens,
        point.name,
        point.prefix_warm,
    )
    summary = simulate(inputs, spec, hardware, model, efficiency=efficiency, warm=warm).summary
    return {"ttft_ms": summary.ttft_ms.p50, "itl_ms": summary.itl_ms.p50}


@functools.lru_cache(maxsize=256)
def _shape_inputs(
    count: int,
    prompt_tokens: int,
    max_tokens: int,
    block_size: int,
    prefix_tokens: int,
    tag: str,
    warm: bool = False,
) -> tuple[tuple[SimInput, ...], tuple[SimInput, ...]]:
    """The simulator's inputs of a shape, after the requests that warm it (cached: a fit simulates
    each shape hundreds of times). With `warm`, one more request with the same prefix warms it."""
    inputs = synthetic(
        count=count + (1 if warm else 0),
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        block_size=block_size,
        prefix_tokens=prefix_tokens,
        tag=tag,
    )
    if not warm:
        return (), tuple(inputs)
    return (inputs[-1],), tuple(inputs[:-1])


def residuals(
    points: Sequence[CalibrationPoint],
    *,
    model: ModelArch,
    hardware: HardwareProfile,
    efficiency: Efficiency,
    base: EngineSpec,
) -> list[Residual]:
    """Relative errors of the model with `efficiency` on every measure of every point."""
    out: list[Residual] = []
    for point in points:
        predicted = predict(point, model=model, hardware=hardware, efficiency=efficiency, base=base)
        for measure in MEASURES:
            measured = float(getattr(point, measure))
            if not measured > 0 or math.isnan(predicted[measure]):
                continue
            out.append(
                Residual(
                    name=point.name,
                    measure=measure,
                    measured=measured,
                    predicted=predicted[measure],
                    rel_err=(predicted[measure] - measured) / measured,
                )
            )
    return out


#: The fitted factors, in the order of the search vector (each searched as its logarithm).
FACTORS = ("compute", "bandwidth", "attention", "step_overhead_s", "seq_overhead_s", "request_overhead_s")
#: FACTORS and the per-prompt-token request overhead: what measured replays (`fit_runs`) pin, where
#: prompts are long and mostly served from the prefix cache (fixed shapes without hits cannot tell
#: it from prefill compute).
RUN_FACTORS = (*FACTORS, "request_overhead_per_token_s")
#: Bounds of the search, in natural log: a factor ends in [e^-30, e^3] (an efficiency may exceed 1
#: where a profile's peak understates what the engine reaches, e.g. weights that stay in cache).
LOG_LOW, LOG_HIGH = -30.0, 3.0


def _efficiency(theta: Sequence[float], factors: Sequence[str] = FACTORS) -> Efficiency:
    return Efficiency(**{name: math.exp(t) for name, t in zip(factors, theta, strict=True)})


#: Where the search starts (two starts, the better optimum kept).
DEFAULT_STARTS = (
    Efficiency(
        compute=0.3,
        bandwidth=0.3,
        attention=0.3,
        step_overhead_s=1e-3,
        seq_overhead_s=1e-4,
        request_overhead_s=1e-3,
        request_overhead_per_token_s=1e-6,
    ),
    Efficiency(
        compute=0.05,
        bandwidth=0.05,
        attention=0.05,
        step_overhead_s=1e-2,
        seq_overhead_s=1e-3,
        request_overhead_s=1e-2,
        request_overhead_per_token_s=1e-5,
    ),
)


def search(
    loss_of: Callable[[Efficiency], float],
    *,
    factors: Sequence[str],
    starts: Sequence[Efficiency],
    iterations: int,
) -> tuple[Efficiency, float, int, tuple[str, ...]]:
    """Minimise `loss_of` over the logarithms of `factors` (Nelder-Mead from each start, restarted
    once from its optimum; bounded to [LOG_LOW, LOG_HIGH]): (best factors, loss, evaluations,
    factors that ended at a bound)."""

    def loss(theta: list[float]) -> float:
        if any(t > LOG_HIGH or t < LOG_LOW for t in theta):
            return math.inf
        return loss_of(_efficiency(theta, factors))

    best: tuple[list[float], float] | None = None
    evaluations = 0
    for start in starts:
        theta0 = [math.log(max(float(getattr(start, name)), 1e-9)) for name in factors]
        theta, value, evals = nelder_mead(loss, theta0, iterations=iterations)
        # Restart once from the optimum: Nelder-Mead can stall on a collapsed simplex.
        theta, value, more = nelder_mead(loss, theta, step=0.5, iterations=iterations)
        evaluations += evals + more
        if best is None or value < best[1]:
            best = (theta, value)
    assert best is not None
    at_bound = tuple(
        name for name, t in zip(factors, best[0], strict=True) if t > LOG_HIGH - 0.05 or t < LOG_LOW + 0.05
    )
    return _efficiency(best[0], factors), best[1], evaluations, at_bound


def nelder_mead(
    f: Callable[[list[float]], float],
    start: Sequence[float],
    *,
    step: float = 1.0,
    iterations: int = 300,
    tol: float = 1e-9,
) -> tuple[list[float], float, int]:
    """Minimise `f` from `start` (standard reflection/expansion/contraction/shrink); returns
    (best point, its value, evaluations)."""
    n = len(start)
    simplex = [list(start)]
    for i in range(n):
        vertex = list(start)
        vertex[i] += step
        simplex.append(vertex)
    values = [f(v) for v in simplex]
    evals = n + 1
    for _ in range(iterations):
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if values[-1] - values[0] < tol:
            break
        centroid = [sum(v[j] for v in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        reflected = [c + (c - w) for c, w in zip(centroid, worst, strict=True)]
        fr = f(reflected)
        evals += 1
        if fr < values[0]:
            expanded = [c + 2 * (c - w) for c, w in zip(centroid, worst, strict=True)]
            fe = f(expanded)
            evals += 1
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = [c + 0.5 * (w - c) for c, w in zip(centroid, worst, strict=True)]
            fc = f(contracted)
            evals += 1
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best] + [
                    [b + 0.5 * (x - b) for b, x in zip(best, v, strict=True)] for v in simplex[1:]
                ]
                values = [values[0]] + [f(v) for v in simplex[1:]]
                evals += n
    i = min(range(n + 1), key=values.__getitem__)
    return simplex[i], values[i], evals


def fit(
    points: Sequence[CalibrationPoint],
    *,
    model: ModelArch,
    hardware: HardwareProfile,
    base: EngineSpec,
    starts: Sequence[Efficiency] = (),
    iterations: int = 300,
) -> Fit:
    """Fit the six factors to `points` (see the module doc)."""
    if len(points) < 2:
        raise InvalidArgument(f"calibration needs at least 2 measured points, got {len(points)}")

    def loss_of(efficiency: Efficiency) -> float:
        total = 0.0
        for r in residuals(points, model=model, hardware=hardware, efficiency=efficiency, base=base):
            total += math.log((r.predicted + 1e-12) / r.measured) ** 2
        return total

    efficiency, value, evaluations, at_bound = search(
        loss_of, factors=FACTORS, starts=list(starts) or DEFAULT_STARTS, iterations=iterations
    )
    return Fit(
        efficiency=efficiency,
        residuals=tuple(residuals(points, model=model, hardware=hardware, efficiency=efficiency, base=base)),
        loss=value,
        evaluations=evaluations,
        at_bound=at_bound,
    )


#: The measures of a replayed run.
RUN_MEASURES = ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms")


@dataclass(frozen=True)
class MeasuredRun:
    """One replay of a workload on a real engine, as the model needs it to predict the same run."""

    name: str  #: label, e.g. "default@2.0rps"
    inputs: tuple[SimInput, ...]  #: the replayed plan, prepared (`workload.prepare`), at rate 1
    spec: EngineSpec  #: the engine's knobs
    rate: float  #: the plan's arrivals were divided by this (2.0 = twice its own rate)
    ttft_p50_ms: float  #: measured TTFT median
    ttft_p99_ms: float  #: measured TTFT 99th percentile
    itl_p50_ms: float  #: measured inter-token gap median
    #: Requests the engine served before the run, whose prompt blocks may still be in its prefix
    #: cache: simulated first, one at a time, and not scored.
    warm: tuple[SimInput, ...] = ()


def predict_run(
    run: MeasuredRun, *, model: ModelArch, hardware: HardwareProfile, efficiency: Efficiency
) -> dict[str, float]:
    """The model's figures of a measured run (same plan, rate and knobs, the cache warmed by
    `run.warm`), by simulation."""
    summary = simulate(
        run.inputs, run.spec, hardware, model, efficiency=efficiency, rate=run.rate, warm=run.warm
    ).summary
    return {
        "ttft_p50_ms": summary.ttft_ms.p50,
        "ttft_p99_ms": summary.ttft_ms.p99,
        "itl_p50_ms": summary.itl_ms.p50,
    }


def run_residuals(
    runs: Sequence[MeasuredRun], *, model: ModelArch, hardware: HardwareProfile, efficiency: Efficiency
) -> list[Residual]:
    """Relative errors of the model with `efficiency` on every measure of every run."""
    out: list[Residual] = []
    for run in runs:
        predicted = predict_run(run, model=model, hardware=hardware, efficiency=efficiency)
        for measure in RUN_MEASURES:
            measured = float(getattr(run, measure))
            if not measured > 0 or math.isnan(predicted[measure]):
                continue
            out.append(
                Residual(
                    name=run.name,
                    measure=measure,
                    measured=measured,
                    predicted=predicted[measure],
                    rel_err=(predicted[measure] - measured) / measured,
                )
            )
    return out


def fit_runs(
    runs: Sequence[MeasuredRun],
    *,
    model: ModelArch,
    hardware: HardwareProfile,
    points: Sequence[CalibrationPoint] = (),
    base: EngineSpec | None = None,
    factors: Sequence[str] = RUN_FACTORS,
    starts: Sequence[Efficiency] = DEFAULT_STARTS,
    iterations: int = 300,
) -> Fit:
    """Fit `factors` to measured replays, and fixed-shape `points` (on `base`) if given: the squared
    log ratios of every measure of every run and point, as `fit` does for points alone (the runs'
    prefix-cache hits and queueing are simulated, not fitted)."""
    if not runs and len(points) < 2:
        raise InvalidArgument("calibration needs at least 1 measured run or 2 measured points")
    if points and base is None:
        raise InvalidArgument("fitting fixed-shape points needs the base EngineSpec they ran on")

    def all_residuals(efficiency: Efficiency) -> list[Residual]:
        out = run_residuals(runs, model=model, hardware=hardware, efficiency=efficiency)
        if points and base is not None:
            out += residuals(points, model=model, hardware=hardware, efficiency=efficiency, base=base)
        return out

    def loss_of(efficiency: Efficiency) -> float:
        total = 0.0
        for r in all_residuals(efficiency):
            total += math.log((r.predicted + 1e-12) / r.measured) ** 2
        return total

    efficiency, value, evaluations, at_bound = search(
        loss_of, factors=factors, starts=starts, iterations=iterations
    )
    return Fit(
        efficiency=efficiency,
        residuals=tuple(all_residuals(efficiency)),
        loss=value,
        evaluations=evaluations,
        at_bound=at_bound,
    )
