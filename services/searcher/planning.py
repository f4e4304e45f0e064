"""A search's plan, decided from what the shell read (pure: no I/O, no clock).

`plan_search(request, settings=, limits=)` turns a `PlanRequest` (the endpoint's live
configuration, its hardware classes, the profile's figures, where the trace lies) and the searcher's
settings into a `SearchSetup`:

- the candidate space of each hardware class, the first class's candidates first with the live
  configuration at their head (the baseline), those of the other classes keyed `<class>:<key>`.
  A simulated class (`sim-*`) searches the batching knobs alone: the performance model prices
  neither n-gram drafts, a dtype, the execution mode nor (for a sim engine's searches) the block size
  (`class_limits`);
- the `must_try` order of round 0: vLLM's defaults first (the figure a winner must never be worse
  than), then one representative of each dtype and execution mode the model cannot price
  (`must_try_keys`);
- the `SearchPlan` orchestrate runs, the `JobTemplate` every trial job shares, and the summary's
  `Context`;
- the KV block sizes the performance model must hash the trace at (one per block size the space
  holds).

A live configuration the first class's engines refuse is FAILED_PRECONDITION.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evertune.domain.engines import EngineSpec, HardwareProfile
from evertune.domain.perfmodel.simulate import block_size_of
from evertune.domain.slo import Slo
from evertune.errors import FailedPrecondition
from evertune.searcher.jobs import JobTemplate
from evertune.searcher.orchestrate import SearchPlan
from evertune.searcher.settings import SearcherSettings
from evertune.searcher.space import (
    Candidate,
    SpaceLimits,
    candidate_space,
    defaults_key,
    defaults_seat_key,
    unpriced_keys,
    unpriced_representatives,
)
from evertune.searcher.strategy import NO_CONFIRMATION, NoiseRule, Objective
from evertune.searcher.summary import Context
from evertune.v1 import endpoint_pb2


@dataclass(frozen=True)
class PlanRequest:
    """What planning a search needs, read and checked by the shell."""

    search_id: str  #: search id (trial ids, the jobs' seed and the plan derive from it)
    endpoint: str  #: endpoint name
    endpoint_uid: str  #: the endpoint's immutable id (carried by every job)
    profile_id: str  #: profile searched against
    objective: Objective  #: what "best" means
    budget: int  #: most real trials
    base: EngineSpec  #: the live configuration, its model the folder the model reads
    engine_model: str  #: the live configuration's model as the endpoint names it (jobs carry it)
    #: profile of each hardware class searched, in the request's order (the first: the baseline's)
    hardware: Mapping[str, HardwareProfile]
    pool_replicas: int  #: the endpoint's hardware pool's `max_replicas` (at least 1)
    slo: endpoint_pb2.Slo  #: the endpoint's SLO as stored
    agreement_threshold: float  #: the endpoint's correctness agreement threshold
    peak_rps: float  #: the profile's peak rate (the search's target rate)
    trace_uri: str  #: where runners read the profile's trace (file:// URI)
    trace_sha256: str  #: SHA-256 of the trace file


@dataclass(frozen=True)
class SearchSetup:
    """The decisions `plan_search` made (see the module doc)."""

    plan: SearchPlan  #: what orchestrate searches
    template: JobTemplate  #: what every trial job of the search shares
    context: Context  #: what the summary needs besides the result
    block_sizes: tuple[int, ...]  #: KV block sizes the space holds, ascending (the model hashes each)
    gate_rps: float  #: rate the SLO gate is judged at (the peak x headroom)


def class_limits(limits: SpaceLimits, hardware_class: str) -> SpaceLimits:
    """The space's limits on `hardware_class`: a simulated class (`sim-*`) drops what the model
    cannot price (n-gram drafts, dtypes, the execution mode) and the block size (a sim engine's
    searches keep the space they had: half the candidates to rank)."""
    if not hardware_class.startswith("sim-"):
        return limits
    return limits.model_copy(
        update={
            "try_speculative_ngram": False,
            "cpu_dtypes": (),
            "cpu_enforce_eager": (),
            "cpu_block_sizes": (),
        }
    )


def plan_candidates(
    base: EngineSpec,
    *,
    hardware: Mapping[str, HardwareProfile],
    limits: SpaceLimits,
    max_replicas: int,
) -> list[tuple[Candidate, str]]:
    """Every class's candidates with their class, the first class's first (unprefixed keys), the
    others keyed `<class>:<key>`. FAILED_PRECONDITION when the first class refuses the base."""
    classes = list(hardware)
    first = classes[0]
    candidates: list[tuple[Candidate, str]] = []
    for name in classes:
        space = candidate_space(
            base=base, hardware=hardware[name], limits=class_limits(limits, name), max_replicas=max_replicas
        )
        for c in space:
            candidates.append((c if name == first else dataclasses.replace(c, key=f"{name}:{c.key}"), name))
    if not candidates or candidates[0][0].spec != base:
        raise FailedPrecondition(f"the live configuration cannot run on {first}: the engines refuse it there")
    return candidates


def must_try_keys(space: Sequence[Candidate], *, hardware: HardwareProfile) -> tuple[str, ...]:
    """Round 0's forced candidates of `space` (its first the baseline): vLLM's defaults first (the
    figure a winner must never be worse than), then the dtypes and execution modes the model cannot
    price, each once."""
    base = space[0]
    defaults = defaults_key(space, base=base, hardware=hardware)
    return tuple(
        dict.fromkeys([*([defaults] if defaults else []), *unpriced_representatives(space, base=base)])
    )


def noise_rule(settings: SearcherSettings, *, objective: Objective, simulated: bool) -> NoiseRule:
    """How a search confirms its leader: repeated interleaved pairs on real hardware; none on a
    simulated class, whose trials repeat exactly."""
    if simulated:
        return NO_CONFIRMATION
    return NoiseRule(
        confirm_pairs=settings.confirm_pairs,
        min_pairs=settings.min_pairs,
        confidence=settings.noise_confidence,
        min_floor=settings.noise_min_floor,
        lower_is_better=objective is Objective.P50_TTFT,
    )


def trial_seed(search_id: str) -> int:
    """The seed every trial of a search replays its trace with (the same for all: comparable)."""
    return int(hashlib.sha256(search_id.encode()).hexdigest()[:8], 16)


def plan_search(request: PlanRequest, *, settings: SearcherSettings, limits: SpaceLimits) -> SearchSetup:
    """The search's plan, job template and summary context (see the module doc)."""
    s = request
    first = next(iter(s.hardware))
    candidates = plan_candidates(
        s.base,
        hardware=s.hardware,
        limits=limits,
        max_replicas=min(s.pool_replicas, settings.max_replicas),
    )
    # (defaults, must-try and unpriced keys are looked up among every class's candidates, priced
    # by the first class's hardware)
    space = [c for c, _ in candidates]
    baseline = candidates[0][0]
    defaults = defaults_key(space, base=baseline, hardware=s.hardware[first])
    plan = SearchPlan(
        search_id=s.search_id,
        baseline=baseline,
        baseline_class=first,
        candidates=candidates,
        budget=s.budget,
        objective=s.objective,
        eta=settings.eta,
        min_gain=settings.min_gain,
        noise=noise_rule(settings, objective=s.objective, simulated=first.startswith("sim-")),
        must_try=must_try_keys(space, hardware=s.hardware[first]),
        unpriced=tuple(unpriced_keys(space, base=baseline)),
        # vLLM's defaults are measured as they are, even where they stand for their class too
        representatives=tuple(k for k in unpriced_representatives(space, base=baseline) if k != defaults),
        defaults_seat=defaults_seat_key(space, base=baseline, hardware=s.hardware[first]),
    )
    template = JobTemplate(
        search_id=s.search_id,
        endpoint=s.endpoint,
        endpoint_uid=s.endpoint_uid,
        profile_id=s.profile_id,
        trace_uri=s.trace_uri,
        trace_sha256=s.trace_sha256,
        slo=s.slo,
        target_rps=s.peak_rps,
        ladder=settings.rate_ladder,
        duration_s=settings.trial_duration_s,
        warmup_s=settings.trial_warmup_s,
        repeats=settings.trial_repeats,
        seed=trial_seed(s.search_id),
        gates=tuple(settings.gates),
        agreement_threshold=s.agreement_threshold,
        timeout_s=settings.trial_timeout_s,
        engine_model=s.engine_model,
        headroom=settings.headroom,
    )
    context = Context(
        base=s.base,
        slo=Slo.from_proto(s.slo),
        p50_target_ms=s.slo.ttft_p50_ms,
        target_rps=s.peak_rps,
        headroom=settings.headroom,
        objective=s.objective,
        min_gain=settings.min_gain,
        budget=s.budget,
        defaults_key=defaults,
    )
    block_sizes = tuple(sorted({block_size_of(c.spec, s.hardware[name]) for c, name in candidates}))
    return SearchSetup(
        plan=plan,
        template=template,
        context=context,
        block_sizes=block_sizes,
        gate_rps=s.peak_rps * settings.headroom,
    )


__all__ = [
    "PlanRequest",
    "SearchSetup",
    "class_limits",
    "must_try_keys",
    "noise_rule",
    "plan_candidates",
    "plan_search",
    "trial_seed",
]
