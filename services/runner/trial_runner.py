"""One trial, start to end: engine up, warm-up, golden answers, replay at each rate, gates, engine down.

`TrialRunner.run(job)` never raises for anything the trial itself runs into: an invalid job, a
trace it cannot read, an engine that never gets ready or crashes, a deadline passed: each is a
`TrialOutcome` with status "error" or "timeout", its one-line error, and the engine log's tail.
The engine is always stopped before `run` returns (or is cancelled).

Engines come from a `TrialEngineFactory` (by default the engines' registry, any engine kind: vLLM,
llama.cpp, the performance model "sim"); anything with the `TrialEngine` methods serves, which is
how the tests put a small HTTP server in the engine's place.

A config with several replicas runs as an `EngineGroup`: every replica is started and checked, the
warm-up goes to each, the golden answers come from the first (replicas are one config), and each
measured replay spreads over all of them, one conversation per replica in turn
(`evertune.domain.replay.replay` with several targets), so prefix caching works per replica as it would
behind a session-affine balancer.

Each measured replay starts primed (`RunnerSettings.prime_conversations`): the conversations under
way at the trace's cut first get their earlier turns sent, unmeasured, so the engine's prefix cache
holds what a live engine's would (`evertune.domain.replay.priming`). The warm-up replay is not primed.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from evertune.domain.engines import (
    EngineGroup,
    EngineMetrics,
    EngineSpec,
    EngineStartFailed,
    MetricsDelta,
    MetricsUnavailable,
    delta,
    get_profile,
    make_engine,
    make_replicas,
)
from evertune.domain.gate_result import GateResult
from evertune.domain.model.chat import ChatFormat
from evertune.domain.replay import list_models, replay, summarize_run
from evertune.domain.workloads import VoiceWorkload, plan_voice
from evertune.domain.workloads.source import CorpusText
from evertune.errors import EvertuneError, Unavailable
from evertune.infra.logging import get_logger
from evertune.runner.gates import (
    Agreement,
    agreement,
    classify_change,
    correctness_gate,
    slo_gate,
    stability_gate,
)
from evertune.runner.gates.correctness import Closeness, baseline_gate, logprob_closeness
from evertune.runner.golden import GoldenFailed, GoldenSet, collect_golden, golden_set
from evertune.runner.job import TrialPlan, engine_spec, plan_trial
from evertune.runner.measure import RateFigures, at_rate, rate_figures, skip_higher
from evertune.runner.settings import RunnerSettings
from evertune.runner.trace import TraceLookup, TraceSource, TraceUnavailable, open_trace, stored_trace_ref
from evertune.v1 import events_pb2, jobs_pb2

log = get_logger("evertune.runner.trial_runner")

Status = Literal["ok", "error", "timeout", "cancelled"]


class TrialEngine(Protocol):
    """What a trial needs of an engine (VllmEngine has it; so does the tests' stand-in)."""

    @property
    def base_url(self) -> str: ...

    async def start(self) -> None: ...

    async def wait_ready(self, timeout_s: float = ...) -> None: ...

    async def stop(self, timeout_s: float = ...) -> None: ...

    async def health(self) -> Any: ...

    async def scrape_metrics(self) -> Any: ...

    def log_tail(self, n: int = ...) -> list[str]: ...


#: Builds the engine (or `EngineGroup` of replicas) of a trial's spec, its logs under the folder;
#: nothing is started yet.
TrialEngineFactory = Callable[[EngineSpec, Path], TrialEngine]


def engine_urls(engine: TrialEngine) -> list[str]:
    """Where a trial's replay goes: every replica of an `EngineGroup`, else the engine's one URL."""
    return engine.urls if isinstance(engine, EngineGroup) else [engine.base_url]


class EngineCrashed(Unavailable):
    """The engine stopped answering while the trial ran."""


@dataclass(frozen=True)
class Reference:
    """The golden answers of the reference trial, as stored."""

    trial_id: str  #: the reference trial
    golden_set_id: str  #: the set its answers belong to
    chains: list[list[int]]  #: one hash chain per golden prompt
    spec: EngineSpec  #: the config that produced them
    #: the top-k alternatives' hashes per prompt and position (empty: stored without logprobs)
    alternatives: list[list[list[int]]] = field(default_factory=list)


#: Finds a reference trial's golden answers ("trial:<id>" -> Reference, None when not stored).
ReferenceLookup = Callable[[str], Awaitable[Reference | None]]
#: Called at each phase change and finished rate: (phase, rate being replayed, rates done, rates in all).
ProgressCallback = Callable[[events_pb2.TrialPhase, float, int, int], Awaitable[None]]


@dataclass
class TrialOutcome:
    """Everything a finished trial reports (filled in as the trial goes)."""

    job: jobs_pb2.TrialJob  #: the job as received
    started_at: float  #: wall clock (Unix s) when the runner took it
    plan: TrialPlan | None = None  #: the validated plan (None: the job was invalid)
    spec: EngineSpec | None = None  #: the config actually started (runner defaults applied)
    status: Status = "ok"  #: how the run ended
    error: str = ""  #: one line when status is not ok
    log_tail: list[str] = field(default_factory=list)  #: engine log tail (failed trials)
    finished_at: float = 0.0  #: wall clock when it ended
    startup_s: float = math.nan  #: engine start to ready, s
    warmup_s: float = 0.0  #: the warm-up turns, s
    golden_s: float = 0.0  #: collecting the golden answers, s
    replay_s: float = 0.0  #: every replay, warm-up replays included, s
    stop_s: float = 0.0  #: engine stop, s
    rates: list[RateFigures] = field(default_factory=list)  #: measured rates, ascending
    skipped_rates: list[float] = field(default_factory=list)  #: rates not replayed (above a failure)
    gates: list[GateResult] = field(default_factory=list)  #: gate outcomes, in the job's order
    golden: GoldenSet | None = None  #: the golden set answered (None: not collected)
    golden_chains: list[list[int]] = field(default_factory=list)  #: its answers as hash chains
    #: hashes of the top-k alternatives at each position of each answer (golden.GoldenAnswers)
    golden_alternatives: list[list[list[int]]] = field(default_factory=list)
    reference_trial: str = ""  #: trial the correctness gate compared with
    agreement: Agreement | None = None  #: the comparison's figures
    closeness: Closeness | None = None  #: the top-k logprob comparison (lossy changes)
    #: what each engine (replica) did over the replays, from its /metrics (empty: not readable):
    #: prefill and decode time per token, prefix-cache hits; evidence, no gate reads it
    engine_work: list[MetricsDelta] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Ran to the end and every gate passed."""
        return self.status == "ok" and all(g.passed for g in self.gates)

    def fail(self, status: Status, error: str, *, log_tail: list[str] | None = None) -> None:
        self.status = status
        self.error = " ".join(error.split())[:1000]
        if log_tail is not None:
            self.log_tail = log_tail


def default_engine_factory(settings: RunnerSettings) -> TrialEngineFactory:
    """Engines of any kind through the engines' registry (`make_engine`, `make_replicas`).

    On CPU with `split_cores`, the engine is bound to every allowed core but the last, which the
    measuring client keeps (see `client_core`); several replicas split those cores evenly (engines
    that bind to cores: `EngineType.binds_cores`). Each whole server keeps to its cores (process
    affinity, and the engine's own thread binding): binding the threads alone lets vLLM pin its API
    process onto another engine's busy core (services/deployer/cores.py).
    """

    def make(spec: EngineSpec, log_dir: Path) -> TrialEngine:
        # "cpu" is this machine; a named class validates against its profile (an unknown one
        # fails the trial with one line, not the runner's start).
        hardware = None if settings.hardware == "cpu" else get_profile(settings.hardware)
        bind = engine_cores(settings)
        cores = sorted(bind) if bind else None
        if spec.replica_count > 1:
            return make_replicas(spec, log_dir=log_dir, hardware=hardware, cpu_cores=cores)
        return make_engine(spec, log_dir=log_dir, hardware=hardware, cpu_cores=cores or ())

    return make


def engine_cores(settings: RunnerSettings) -> set[int] | None:
    """Cores a CPU engine is bound to (all allowed but the last), or None: no split."""
    if settings.hardware != "cpu" or not settings.split_cores:
        return None
    cores = sorted(os.sched_getaffinity(0))
    return set(cores[:-1]) if len(cores) >= 2 else None


@contextlib.contextmanager
def client_core(settings: RunnerSettings) -> Any:
    """While measuring on CPU, the calling thread (the event loop: the client) keeps the last core."""
    cores = engine_cores(settings)
    if cores is None:
        yield
        return
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, allowed - cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def reference_id(uri: str) -> str:
    """The trial id of a correctness reference URI (`trial:<id>`); "" when it is not one."""
    scheme, _, rest = uri.partition(":")
    return rest.removeprefix("//") if scheme == "trial" and rest else ""


class TrialRunner:
    """Runs trial jobs one at a time for one runner instance."""

    def __init__(
        self,
        settings: RunnerSettings,
        *,
        engine_factory: TrialEngineFactory,
        model_dir: Path | Callable[[], Path],
        log_dir: Path,
        references: ReferenceLookup,
        traces: TraceLookup | None = None,
    ) -> None:
        self.settings = settings
        self.engine_factory = engine_factory
        self._model_dir = model_dir
        self.log_dir = log_dir
        self.references = references
        self.traces = traces  #: reads `clickhouse://` traces (None: this runner has no store)
        self.golden = golden_set(
            count=settings.golden_prompts,
            max_tokens=settings.golden_max_tokens,
            seed=settings.golden_seed,
            recipe=settings.golden_recipe,
        )

    async def model_dir(self) -> Path:
        """The local model a job without one runs (made on first use when given as a callable)."""
        if callable(self._model_dir):
            self._model_dir = await asyncio.to_thread(self._model_dir)
        return self._model_dir

    async def run(
        self, job: jobs_pb2.TrialJob, *, progress: ProgressCallback, cancel: asyncio.Event | None = None
    ) -> TrialOutcome:
        """Run `job` to its outcome (see the module doc); cancelling stops the engine first.

        `cancel` set while the trial runs (its search ended) stops the trial where it is, engine
        included: the outcome is "cancelled", with what was measured so far.
        """
        outcome = TrialOutcome(job=job, started_at=time.time())
        body = asyncio.create_task(self._run(outcome, progress))
        cancelled = asyncio.create_task(cancel.wait()) if cancel is not None else None
        try:
            await asyncio.wait(
                {body} if cancelled is None else {body, cancelled}, return_when=asyncio.FIRST_COMPLETED
            )
            if not body.done():
                body.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await body  # the engine is stopped in _run's finally
                outcome.fail("cancelled", f"the search {job.search_id} ended while the trial ran")
            else:
                body.result()
        except asyncio.CancelledError:  # the runner itself is stopping: stop the trial with it
            body.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await body
            raise
        finally:
            if cancelled is not None:
                cancelled.cancel()
            outcome.finished_at = time.time()
        return outcome

    async def _run(self, outcome: TrialOutcome, progress: ProgressCallback) -> None:
        s = self.settings
        model_dir = await self.model_dir()
        try:
            plan = outcome.plan = plan_trial(outcome.job, slo_headroom=s.slo_headroom)
            outcome.spec = engine_spec(
                plan,
                default_model=str(model_dir),
                simulated=s.simulated,
                cpu_default_kv_gib=s.cpu_default_kv_cache_gib,
                cpu=s.hardware == "cpu",
            )
        except EvertuneError as err:
            outcome.fail("error", f"invalid job: {err}")
            return
        budget = None
        if plan.deadline is not None:
            budget = plan.deadline.timestamp() - time.time()
            if budget <= 0:
                outcome.fail("timeout", "the job's deadline had passed when the runner took it")
                return
        engine: TrialEngine | None = None
        try:
            async with asyncio.timeout(budget) as scope:
                reference = await self._reference(plan)
                trace = await self._trace(plan, model_dir)
                await progress(events_pb2.TRIAL_PHASE_STARTING_ENGINE, 0.0, 0, len(plan.rates_rps))
                engine = self.engine_factory(outcome.spec, self.log_dir)
                started = time.monotonic()
                await engine.start()
                await engine.wait_ready(timeout_s=s.engine_ready_timeout_s)
                outcome.startup_s = time.monotonic() - started
                with client_core(s):
                    await self._measure(engine, plan, trace, reference, outcome, progress)
        except TimeoutError:
            if scope.expired():
                outcome.fail(
                    "timeout",
                    f"deadline passed after {time.time() - outcome.started_at:.0f} s",
                    log_tail=_tail(engine, s),
                )
            else:
                outcome.fail("error", "timed out", log_tail=_tail(engine, s))
        except EngineStartFailed as err:
            outcome.fail("error", str(err), log_tail=err.log_tail or _tail(engine, s))
        except EvertuneError as err:
            outcome.fail("error", str(err), log_tail=_tail(engine, s))
        except Exception as err:  # a bug here must end the trial, not the runner
            log.exception("trial failed unexpectedly", trial=outcome.job.trial_id)
            outcome.fail("error", f"runner error: {type(err).__name__}: {err}", log_tail=_tail(engine, s))
        finally:
            if engine is not None:
                # Shielded: a runner stopped mid-trial (cancelled) must still stop its engine.
                stopping = time.monotonic()
                await asyncio.shield(engine.stop())
                outcome.stop_s = time.monotonic() - stopping

    async def _chat_format(self, spec: EngineSpec | None) -> ChatFormat:
        """How the golden chats are rendered: the chat format of the model the engine serves, or
        of the runner's own model folder where the engine's model is no folder (a GGUF file)."""
        runners = await self.model_dir()
        for folder in (Path(spec.model) if spec else None, runners):
            if folder is not None and (folder / "tokenizer_config.json").is_file():
                return await asyncio.to_thread(ChatFormat.of_folder, folder)
        raise GoldenFailed(
            f"the golden chats cannot be rendered: neither {spec.model if spec else '?'} nor"
            f" {runners} is a model folder with a tokenizer"
        )

    async def _trace(self, plan: TrialPlan, model_dir: Path) -> TraceSource:
        """The job's trace; a `clickhouse://` one is read from the store first."""
        ref = stored_trace_ref(plan.trace_uri)
        stored = None
        if ref is not None:
            if self.traces is None:
                raise TraceUnavailable(f"trace {plan.trace_uri!r}: this runner has no store to read it from")
            stored = await self.traces(ref)
            if stored is None:
                where = f"{ref.database}.profiles" if ref.database else "the store's profiles"
                raise TraceUnavailable(f"trace {plan.trace_uri!r}: no profile {ref.profile_id} in {where}")
        return await asyncio.to_thread(
            open_trace, plan.trace_uri, sha256=plan.trace_sha256, model_dir=model_dir, stored=stored
        )

    async def _reference(self, plan: TrialPlan) -> Reference | None:
        """The correctness reference, checked before any engine starts (a missing one fails early)."""
        gate = plan.gate("correctness")
        if gate is None or plan.baseline or self.settings.simulated:
            return None
        trial_id = reference_id(gate.reference_uri)
        if not trial_id:
            raise CorrectnessReferenceMissing(
                f"the correctness gate needs reference_uri 'trial:<trial id>', got {gate.reference_uri!r}"
            )
        reference = await self.references(trial_id)
        if reference is None:
            raise CorrectnessReferenceMissing(f"reference trial {trial_id} has no stored golden answers")
        if reference.golden_set_id != self.golden.set_id:
            raise CorrectnessReferenceMissing(
                f"reference trial {trial_id} answered golden set {reference.golden_set_id}, "
                f"this runner uses {self.golden.set_id}"
            )
        return reference

    async def _measure(
        self,
        engine: TrialEngine,
        plan: TrialPlan,
        trace: TraceSource,
        reference: Reference | None,
        outcome: TrialOutcome,
        progress: ProgressCallback,
    ) -> None:
        s = self.settings
        url = engine.base_url
        urls = engine_urls(engine)
        total = len(plan.rates_rps)
        await progress(events_pb2.TRIAL_PHASE_WARMUP, 0.0, 0, total)
        phase = time.monotonic()
        if s.warmup_turns:
            warm = plan_voice(VoiceWorkload(duration_s=60, seed=99), text=CorpusText())[: s.warmup_turns]
            for replica_url in urls:
                await replay(warm, target=replica_url, time_scale=1000.0, timeout_s=s.request_timeout_s)
            await self._alive(engine, "warm-up")
        outcome.warmup_s, phase = time.monotonic() - phase, time.monotonic()
        if plan.needs_golden and not s.simulated:
            models = await list_models(url)
            outcome.golden = self.golden
            answers = await collect_golden(
                url,
                self.golden,
                chat=await self._chat_format(outcome.spec),
                model=models[0] if models else "",
                key=s.golden_hash_key,
                concurrency=s.golden_concurrency,
                timeout_s=s.request_timeout_s * 2,
                top_logprobs=s.golden_top_logprobs,
            )
            outcome.golden_chains, outcome.golden_alternatives = answers.chains, answers.alternatives
        outcome.golden_s, phase = time.monotonic() - phase, time.monotonic()
        before = await _scrape(engine)
        for index, rate in enumerate(plan.rates_rps):
            await progress(events_pb2.TRIAL_PHASE_REPLAYING, rate, index, total)
            if plan.warmup_s > 0:
                warm_run = await asyncio.to_thread(
                    trace.run,
                    rate_rps=rate,
                    duration_s=plan.warmup_s,
                    seed=plan.seed,
                    run=f"warmup/{rate:.6g}",
                )
                await replay(
                    warm_run.plan, target=urls, rate=warm_run.multiplier, timeout_s=s.request_timeout_s
                )
            runs = []
            for repeat in range(plan.repeats):
                run_plan = await asyncio.to_thread(
                    trace.run,
                    rate_rps=rate,
                    duration_s=plan.duration_s,
                    seed=plan.seed,
                    run=f"{rate:.6g}/{repeat}",
                )
                result = await replay(
                    run_plan.plan,
                    target=urls,
                    rate=run_plan.multiplier,
                    timeout_s=s.request_timeout_s,
                    prime=s.prime_conversations,
                )
                await self._alive(engine, f"the replay at {rate:g} rps")
                runs.append((summarize_run(result, slo=plan.slo), result.results))
            figures = rate_figures(rate, runs, slo=plan.slo)
            outcome.rates.append(figures)
            if s.skip_rates_above_failure and skip_higher(figures, gate_rate_rps=plan.gate_rate_rps):
                outcome.skipped_rates = list(plan.rates_rps[index + 1 :])
                break
        outcome.replay_s = time.monotonic() - phase
        after = await _scrape(engine)
        if len(before) == len(after):
            outcome.engine_work = [delta(b, a) for b, a in zip(before, after, strict=True)]
        await progress(events_pb2.TRIAL_PHASE_GATES, 0.0, len(outcome.rates), total)
        outcome.gates = [self._gate(name, plan, reference, outcome) for name in (g.name for g in plan.gates)]

    def _gate(
        self, name: str, plan: TrialPlan, reference: Reference | None, outcome: TrialOutcome
    ) -> GateResult:
        s = self.settings
        gate = plan.gate(name)
        assert gate is not None
        if name == "slo":
            return slo_gate(
                figures=at_rate(outcome.rates, plan.gate_rate_rps),
                slo=plan.slo,
                p50_target_ms=plan.ttft_p50_target_ms,
                threshold=gate.threshold,
                rate_rps=plan.gate_rate_rps,
                headroom=plan.slo_headroom,
            )
        if name == "stability":
            return stability_gate(
                rates=outcome.rates,
                gate_rate_rps=plan.gate_rate_rps,
                threshold=gate.threshold,
                tolerance=s.stability_tolerance,
                floor_ms=s.stability_floor_ms,
            )
        if s.simulated:
            return GateResult(
                name=name, passed=False, value=math.nan, threshold=gate.threshold,
                detail="simulated trial: outputs not checked (verify on real hardware)",
            )  # fmt: skip
        if plan.baseline:
            return baseline_gate()
        assert reference is not None and outcome.spec is not None
        outcome.reference_trial = reference.trial_id
        outcome.agreement = agreement(reference.chains, outcome.golden_chains)
        change = classify_change(reference.spec, outcome.spec)
        if _has_alternatives(reference.alternatives, outcome.golden_alternatives):
            outcome.closeness = logprob_closeness(
                reference=reference.chains,
                reference_alternatives=reference.alternatives,
                candidate=outcome.golden_chains,
                candidate_alternatives=outcome.golden_alternatives,
            )
        return correctness_gate(
            change=change, result=outcome.agreement, threshold=gate.threshold, closeness=outcome.closeness
        )

    async def _alive(self, engine: TrialEngine, during: str) -> None:
        healthy = await engine.health()
        if not (all(healthy) if isinstance(healthy, list) else healthy):
            raise EngineCrashed(f"the engine stopped answering /health during {during}")


async def _scrape(engine: TrialEngine) -> list[EngineMetrics]:
    """One /metrics scrape per replica; empty when an engine's cannot be read."""
    try:
        found = await engine.scrape_metrics()
    except MetricsUnavailable as err:
        log.warning("engine metrics unreadable", error=str(err))
        return []
    return list(found) if isinstance(found, list) else [found]


def _has_alternatives(*answer_sets: list[list[list[int]]]) -> bool:
    """Whether every set carries top-k alternatives somewhere (an engine without logprobs sends none)."""
    return all(any(top for answer in answers for top in answer) for answers in answer_sets)


class CorrectnessReferenceMissing(EvertuneError):
    """The correctness gate cannot run: its reference is not named, not stored, or of another set."""


def _tail(engine: TrialEngine | None, settings: RunnerSettings) -> list[str]:
    if engine is None:
        return []
    try:
        return engine.log_tail(settings.log_tail_lines)
    except Exception:  # the tail is a courtesy; a missing log must not hide the real error
        return []
