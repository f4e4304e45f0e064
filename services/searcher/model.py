"""The performance model as a search uses it: predict, rank, re-calibrate from measured trials (pure).

`SearchModel` holds one profile's trace, prepared for the simulator, the endpoint's SLO and the
efficiency factors of each hardware class. Everything here is CPU-bound and synchronous: the
service runs it in a worker thread.

Predicting one candidate (`predict`), on the rate ladder the trials replay (`rates`: the profile's
peak x each multiplier of the search's ladder, the gate rate = peak x headroom among them):

1. simulate at the gate rate: the SLO is met there or the candidate is infeasible (no more runs);
2. simulate at the target rate (the peak): the headline p50 TTFT;
3. for goodput and cost, bisect the ladder's higher rates (extended beyond its top by `EXTEND`,
   for the model only) for the first one that misses the SLO.

Goodput from a ladder (`goodput_of`, the same function for measured trials): the highest rate
meeting the SLO below the first one that misses it, interpolated linearly in attainment between
that pair (the rate where attainment crosses the SLO's share), so candidates on the same ladder
step are still told apart. All rates meeting it: the highest rate (a lower bound).

Only the trace's first `horizon_s` seconds (at each rate) are simulated: the trials replay a
minute or two a rate, and a shorter simulation keeps ranking the whole space fast.

Re-calibration (`recalibrate`): `perfmodel.calibrate.fit` fits six factors to fixed shapes (n
prompts of one length sent at once), which trials do not carry. A search instead fits one speed
factor `s` per hardware class (compute, bandwidth and attention efficiencies x s, overheads / s) so
that the model's p50 TTFT at each measured rate matches the trials' (least squares of the log
ratios, golden-section search on log s). One factor is all a handful of trials can pin; it still
reorders candidates, because queueing is not linear in speed (a faster engine makes high-batch
candidates feasible that were not).

Knobs the roofline cannot price (`space.unpriced_class`: the dtype and the execution mode on CPU;
how fast an ISA runs bf16, or what torch.compile buys, is no figure of the hardware profile) are
priced by measurement instead. When the model knows the live configuration's class (`live_class`),
the hardware class's factor is fitted on trials of that class only, and each other class that has
a measured trial gets a factor of its own relative to it (`class_speed`, the same fit over that
class's trials). Until then a candidate of another class is predicted as its twin in the live class
and marked `Prediction.unpriced`; afterwards it is priced like any other. On the AMX Xeon one fp32
trial then prices every fp32 candidate about 4x slower than its bf16 twin; on an AVX2-only CPU the
sign flips. Nothing here knows which.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from evertune.domain.engines import HardwareProfile
from evertune.domain.perfmodel import Efficiency, ModelArch, SimInput, simulate
from evertune.domain.perfmodel.simulate import block_size_of, workload_rps
from evertune.domain.perfmodel.workload import primer_inputs
from evertune.domain.slo import Slo
from evertune.errors import InvalidArgument
from evertune.searcher.space import Candidate, UnpricedClass, unpriced_class
from evertune.searcher.strategy import Figures

#: Bounds of log(s) in the speed fit, relative to the prior factors (e^-6 ... e^6).
LOG_SPEED_BOUND = 6.0
#: Golden-section iterations of the speed fit (the bracket shrinks to 0.618^n of its width: 0.5%).
FIT_ITERATIONS = 16
#: Rates the model tries above the trial ladder's top (multiples of it), to rank candidates that
#: meet the SLO all the way up the ladder.
EXTEND: tuple[float, ...] = (1.5, 2.0, 3.0, 4.0)
#: Most recent trials the speed fit uses (each adds its target- and gate-rate points).
FIT_TRIALS = 6


@dataclass(frozen=True)
class RatePoint:
    """Figures at one offered rate (predicted or measured)."""

    rate_rps: float  #: offered rate, requests/s
    attainment: float  #: share of requests meeting the SLO (0..1)
    ttft_p50_ms: float  #: median TTFT, ms
    ttft_p99_ms: float  #: 99th-percentile TTFT, ms
    errors: int = 0  #: failed requests (measured only)


@dataclass(frozen=True)
class Prediction:
    """What the model says about one candidate."""

    figures: Figures  #: headline figures (the strategy's input)
    points: tuple[RatePoint, ...]  #: every rate simulated, ascending
    #: True: the candidate's dtype or execution mode differs from the live configuration's and no
    #: trial of that class has been measured, so these are its twin's figures; False: priced;
    #: None: the model was not told the live configuration's class
    unpriced: bool | None = None


@dataclass(frozen=True)
class Measured:
    """A real trial's figures, as the re-calibration takes them."""

    candidate: Candidate  #: configuration measured
    hardware_class: str  #: where it ran
    points: tuple[RatePoint, ...]  #: measured rates


@dataclass(frozen=True)
class Recalibration:
    """One re-calibration of one hardware class."""

    hardware_class: str  #: class re-calibrated
    speed: float  #: fitted speed factor relative to the prior factors (1 = unchanged)
    points: int  #: measured rate points used
    error_before: float  #: median |predicted/measured - 1| of p50 TTFT with the previous factors
    error_after: float  #: the same with the fitted factor
    #: the dtype and execution mode whose own factor was fitted, relative to the hardware class's;
    #: None: the hardware class's factor itself
    knob_class: UnpricedClass | None = None


def meets(point: RatePoint, *, slo: Slo, p50_target_ms: float) -> bool:
    """The runner's SLO gate rule: attainment reaches the share and the p50 target (if any) holds."""
    if point.errors and point.attainment <= 0:
        return False
    if point.attainment < slo.share:
        return False
    return not (p50_target_ms > 0 and not point.ttft_p50_ms <= p50_target_ms)


def goodput_of(points: Sequence[RatePoint], *, slo: Slo, p50_target_ms: float) -> float:
    """Goodput of a ladder (see the module doc); 0 when the lowest rate already misses."""
    ladder = sorted(points, key=lambda p: p.rate_rps)
    last: RatePoint | None = None
    for point in ladder:
        if meets(point, slo=slo, p50_target_ms=p50_target_ms):
            last = point
            continue
        if last is None:
            return 0.0
        drop = last.attainment - point.attainment
        share = (last.attainment - slo.share) / drop if drop > 0 else 0.0
        return last.rate_rps + (point.rate_rps - last.rate_rps) * min(max(share, 0.0), 0.999)
    return last.rate_rps if last is not None else 0.0


def scaled(efficiency: Efficiency, speed: float) -> Efficiency:
    """`efficiency` made `speed` times faster (efficiencies x speed, overheads / speed)."""
    return Efficiency(
        compute=efficiency.compute * speed,
        bandwidth=efficiency.bandwidth * speed,
        attention=efficiency.attention * speed,
        step_overhead_s=efficiency.step_overhead_s / speed,
        seq_overhead_s=efficiency.seq_overhead_s / speed,
        request_overhead_s=efficiency.request_overhead_s / speed,
        request_overhead_per_token_s=efficiency.request_overhead_per_token_s / speed,
    )


@dataclass
class SearchModel:
    """The model of one search (see the module doc)."""

    inputs: Sequence[SimInput]  #: the profile's trace, prepared (arrival order)
    arch: ModelArch  #: the served model's architecture
    hardware: Mapping[str, HardwareProfile]  #: profile of each hardware class searched
    efficiency: dict[str, Efficiency]  #: current factors of each class (re-calibration changes them)
    slo: Slo  #: the endpoint's SLO (ttft = its p99 target)
    p50_target_ms: float  #: the SLO's median TTFT target (0 = none)
    target_rps: float  #: the profile's peak rate
    ladder: tuple[float, ...]  #: rate multipliers of the target, ascending (1 and the headroom in it)
    headroom: float  #: the gate rate is target x headroom
    horizon_s: float = 120.0  #: seconds of the trace simulated at each rate
    goodput: bool = True  #: climb the ladder above the gate rate (goodput and cost objectives)
    speed: dict[str, float] = field(default_factory=dict)  #: fitted speed factor of each class
    #: the live configuration's dtype and execution mode (None: not told; every trial then fits the
    #: hardware class's one factor and nothing is marked unpriced)
    live_class: UnpricedClass | None = None
    #: fitted factor of each measured (hardware class, dtype and execution mode) other than the
    #: live configuration's, relative to the hardware class's factors
    class_speed: dict[tuple[str, UnpricedClass], float] = field(default_factory=dict)
    #: the same trace prepared at each KV block size the space holds (prefix-cache hits count whole
    #: blocks, so each size hashes the prompts its own way); empty: every candidate is simulated on
    #: `inputs`, whatever its block size
    inputs_by_block_size: Mapping[int, Sequence[SimInput]] = field(default_factory=dict)
    #: the trials prime the conversations under way at the trace's cut (the runner's
    #: `prime_conversations`, on by default): each simulated window starts with their histories in
    #: the prefix cache (`perfmodel.workload.primer_inputs`)
    primed: bool = True
    simulations: int = 0  #: simulations run so far (a repeated one is answered from memory)
    #: each simulation's point by (candidate key, hardware class, rate, factors): a search asks for
    #: the same ones again (every round ranks the whole space; the re-calibration's fit re-predicts
    #: the latest trials), and a simulation is a pure function of them and the fields above
    _points: dict[tuple[str, str, float, Efficiency], RatePoint] = field(
        default_factory=dict, init=False, repr=False
    )

    def __post_init__(self) -> None:
        if len(self.inputs) < 2:
            raise InvalidArgument("the profile's trace has fewer than 2 requests: nothing to rank")
        if not self.target_rps > 0:
            raise InvalidArgument("the profile's peak rate must be > 0 to rank candidates")
        self._base_rps = workload_rps(self.inputs)

    @property
    def gate_rps(self) -> float:
        return self.target_rps * self.headroom

    @property
    def rates(self) -> tuple[float, ...]:
        """The ladder in requests/s, ascending, target and gate rates included."""
        rates = sorted({round(self.target_rps * m, 9) for m in (*self.ladder, 1.0, self.headroom)})
        return tuple(rates)

    @property
    def model_rates(self) -> tuple[float, ...]:
        """The ladder and, for ranking only, rates beyond its top (x EXTEND): candidates that all
        meet the SLO at the top would otherwise tie there."""
        top = self.rates[-1]
        return (*self.rates, *(round(top * m, 9) for m in EXTEND))

    def _window(self, rate_rps: float, block_size: int) -> Sequence[SimInput]:
        """The trace's first `horizon_s` seconds at `rate_rps` (at least 2 requests), hashed in
        blocks of `block_size` tokens where it was prepared so."""
        inputs = self.inputs_by_block_size.get(block_size, self.inputs)
        if self.inputs_by_block_size and block_size not in self.inputs_by_block_size:
            raise ValueError(f"the trace was not prepared for KV blocks of {block_size} tokens")
        limit = self.horizon_s * rate_rps / self._base_rps
        first = inputs[0].arrival_s
        cut = [x for x in inputs if x.arrival_s - first < limit]
        return cut if len(cut) >= 2 else inputs[:2]

    def _run(self, candidate: Candidate, hardware_class: str, rate_rps: float, eff: Efficiency) -> RatePoint:
        key = (candidate.key, hardware_class, rate_rps, eff)
        point = self._points.get(key)
        if point is None:
            point = self._points[key] = self._simulate(candidate, hardware_class, rate_rps, eff)
        return point

    def _simulate(
        self, candidate: Candidate, hardware_class: str, rate_rps: float, eff: Efficiency
    ) -> RatePoint:
        self.simulations += 1
        spec = candidate.spec.model_copy(update={"kind": "vllm"})
        hardware = self.hardware[hardware_class]
        block_size = block_size_of(spec, hardware)
        window = self._window(rate_rps, block_size)
        figures = simulate(
            window,
            spec,
            hardware,
            self.arch,
            efficiency=eff,
            slo=self.slo,
            rate=rate_rps / self._base_rps,
            warm=primer_inputs(window, block_size=block_size) if self.primed else (),
        )
        s = figures.summary
        return RatePoint(
            rate_rps=rate_rps,
            attainment=s.attainment or 0.0,
            ttft_p50_ms=s.ttft_ms.p50,
            ttft_p99_ms=s.ttft_ms.p99,
            errors=s.errors,
        )

    def _knob_class(self, candidate: Candidate) -> UnpricedClass | None:
        """The candidate's dtype and execution mode when they differ from the live configuration's
        (None: the same, or the live class unknown)."""
        knobs = unpriced_class(candidate.spec)
        return None if self.live_class is None or knobs == self.live_class else knobs

    def _efficiency_of(self, candidate: Candidate, hardware_class: str) -> Efficiency:
        """The class's factors, times the candidate's dtype-and-mode factor where one was fitted."""
        eff = self.efficiency[hardware_class]
        knobs = self._knob_class(candidate)
        speed = self.class_speed.get((hardware_class, knobs), 1.0) if knobs is not None else 1.0
        return eff if speed == 1.0 else scaled(eff, speed)

    def unpriced(self, candidate: Candidate, hardware_class: str) -> bool | None:
        """Whether the candidate's dtype or execution mode is one no trial has priced yet (None:
        the live class unknown)."""
        if self.live_class is None:
            return None
        knobs = self._knob_class(candidate)
        return knobs is not None and (hardware_class, knobs) not in self.class_speed

    def predict(self, candidate: Candidate, hardware_class: str) -> Prediction:
        """The candidate's predicted figures (see the module doc)."""
        eff = self._efficiency_of(candidate, hardware_class)
        unpriced = self.unpriced(candidate, hardware_class)
        rule = {"slo": self.slo, "p50_target_ms": self.p50_target_ms}
        try:
            gate = self._run(candidate, hardware_class, self.gate_rps, eff)
        except InvalidArgument:  # e.g. no KV block fits: the engine would not start
            return Prediction(figures=Figures(0.0, math.inf, meets_slo=False), points=(), unpriced=unpriced)
        target = self._run(candidate, hardware_class, self.target_rps, eff)
        points = [target, gate]
        ok = meets(gate, **rule)  # type: ignore[arg-type]
        if ok and self.goodput:
            # Bisect the ladder above the gate rate for its first rate that misses the SLO (the
            # SLO is taken to fail monotonically with the rate): log2 of the ladder's steps runs.
            above = [r for r in self.model_rates if r > self.gate_rps * (1 + 1e-9)]
            low, high = -1, len(above)  # above[low] meets (the gate, for -1); above[high] misses
            while high - low > 1:
                mid = (low + high) // 2
                point = self._run(candidate, hardware_class, above[mid], eff)
                points.append(point)
                if meets(point, **rule):  # type: ignore[arg-type]
                    low = mid
                else:
                    high = mid
        points.sort(key=lambda p: p.rate_rps)
        figures = Figures(
            goodput_rps=goodput_of(points, **rule),  # type: ignore[arg-type]
            ttft_p50_ms=target.ttft_p50_ms,
            meets_slo=ok,
            ttft_p99_ms=gate.ttft_p99_ms,
            attainment=gate.attainment,
        )
        return Prediction(figures=figures, points=tuple(points), unpriced=unpriced)

    def rank(self, candidates: Sequence[tuple[Candidate, str]]) -> tuple[dict[str, Prediction], float]:
        """Predictions of (candidate, hardware class) pairs by candidate key, and the wall seconds."""
        started = time.perf_counter()
        out = {c.key: self.predict(c, hw) for c, hw in candidates}
        return out, time.perf_counter() - started

    # --- re-calibration -----------------------------------------------------------------------
    def _log_errors(self, measured: Sequence[Measured], hardware_class: str, speed: float) -> list[float]:
        """log(predicted / measured) p50 TTFT at the target and gate rates of the latest trials, with
        each trial's factors made `speed` times faster."""
        out: list[float] = []
        keep = (self.target_rps, self.gate_rps)
        for trial in measured[-FIT_TRIALS:]:
            eff = scaled(self._efficiency_of(trial.candidate, hardware_class), speed)
            for point in trial.points:
                if not any(math.isclose(point.rate_rps, r, rel_tol=1e-6) for r in keep):
                    continue
                if point.errors or not (point.ttft_p50_ms > 0 and math.isfinite(point.ttft_p50_ms)):
                    continue
                try:
                    predicted = self._run(trial.candidate, hardware_class, point.rate_rps, eff).ttft_p50_ms
                except InvalidArgument:
                    continue
                if predicted > 0 and math.isfinite(predicted):
                    out.append(math.log(predicted / point.ttft_p50_ms))
        return out

    def _fit(
        self, measured: Sequence[Measured], hardware_class: str
    ) -> tuple[float, list[float], list[float]]:
        """(speed, log errors before, after): the factor that best fits `measured` on top of their
        current factors (1 when nothing fits better); empty errors when no point could be used."""
        before = self._log_errors(measured, hardware_class, 1.0)
        if not before:
            return 1.0, before, before

        def loss(log_speed: float) -> float:
            errors = self._log_errors(measured, hardware_class, math.exp(log_speed))
            return sum(e * e for e in errors) / len(errors) if errors else math.inf

        log_speed = _golden_section(loss, -LOG_SPEED_BOUND, LOG_SPEED_BOUND, FIT_ITERATIONS)
        after = self._log_errors(measured, hardware_class, math.exp(log_speed))
        if sum(e * e for e in after) >= sum(e * e for e in before):
            return 1.0, before, before  # the fit found nothing better: keep the factors
        return math.exp(log_speed), before, after

    def recalibrate(self, measured: Sequence[Measured]) -> list[Recalibration]:
        """Fit each hardware class's speed factor to its measured trials of the live class (all of
        them when the live class is unknown), then each other measured dtype-and-mode class's own
        factor on top of it; keep them (see the module doc)."""
        reports: list[Recalibration] = []
        for hardware_class in sorted({m.hardware_class for m in measured}):
            mine = [m for m in measured if m.hardware_class == hardware_class]
            by_class: dict[UnpricedClass | None, list[Measured]] = {}
            for m in mine:
                by_class.setdefault(self._knob_class(m.candidate), []).append(m)
            live = by_class.pop(None, [])
            speed, before, after = self._fit(live, hardware_class)
            if before:
                self.efficiency[hardware_class] = scaled(self.efficiency[hardware_class], speed)
                self.speed[hardware_class] = self.speed.get(hardware_class, 1.0) * speed
                reports.append(_report(hardware_class, speed, before, after))
            for knobs, trials in by_class.items():
                assert knobs is not None
                speed, before, after = self._fit(trials, hardware_class)
                if before:
                    key = (hardware_class, knobs)
                    self.class_speed[key] = self.class_speed.get(key, 1.0) * speed
                    reports.append(_report(hardware_class, speed, before, after, knob_class=knobs))
        return reports


def _report(
    hardware_class: str,
    speed: float,
    before: Sequence[float],
    after: Sequence[float],
    *,
    knob_class: UnpricedClass | None = None,
) -> Recalibration:
    return Recalibration(
        hardware_class=hardware_class,
        speed=speed,
        points=len(before),
        error_before=_median_abs(before),
        error_after=_median_abs(after),
        knob_class=knob_class,
    )


def _median_abs(log_errors: Sequence[float]) -> float:
    """Median of |exp(e) - 1| (relative error of the prediction)."""
    values = sorted(abs(math.exp(e) - 1) for e in log_errors)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def _golden_section(f: object, low: float, high: float, iterations: int) -> float:
    """Minimum of a unimodal `f` on [low, high] by golden-section search."""
    assert callable(f)
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iterations):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    return float((a + b) / 2)


def with_speed(model: SearchModel, hardware_class: str, speed: float) -> SearchModel:
    """A copy of `model` whose class runs `speed` times faster (tests and the benchmark's truth)."""
    efficiency = dict(model.efficiency)
    efficiency[hardware_class] = scaled(efficiency[hardware_class], speed)
    return replace(model, efficiency=efficiency, speed={}, class_speed=dict(model.class_speed), simulations=0)


class ThreadedModel:
    """A `SearchModel` behind the async `ModelPort` of `run_search`: each call in a worker thread."""

    def __init__(self, model: SearchModel) -> None:
        self.model = model

    async def rank(self, candidates: Sequence[tuple[Candidate, str]]) -> tuple[dict[str, Prediction], float]:
        return await asyncio.to_thread(self.model.rank, candidates)

    async def recalibrate(self, measured: Sequence[Measured]) -> list[Recalibration]:
        return await asyncio.to_thread(self.model.recalibrate, measured)
