"""A search's plan, decided from what the shell read (`planning.py`, pure): the space of each
hardware class, the `must_try` order of round 0, and what the plan, the jobs' template and the
summary's context take from the settings."""

from __future__ import annotations

import pytest

from evertune.domain.engines import EngineSpec, get_profile
from evertune.errors import FailedPrecondition
from evertune.searcher.planning import (
    PlanRequest,
    class_limits,
    must_try_keys,
    noise_rule,
    plan_candidates,
    plan_search,
    trial_seed,
)
from evertune.searcher.settings import SearcherSettings
from evertune.searcher.space import SpaceLimits, defaults_key, unpriced_class
from evertune.searcher.strategy import NO_CONFIRMATION, Objective
from evertune.v1 import endpoint_pb2

#: vLLM's defaults on CPU, as an endpoint that sets nothing runs them.
DEFAULTS = EngineSpec(model="/models/tiny", kv_cache_space_gib=2)
#: A live configuration other than the defaults: a small step budget, caching off.
TUNED = DEFAULTS.model_copy(
    update={"max_num_seqs": 8, "max_num_batched_tokens": 256, "enable_prefix_caching": False}
)
#: A small space: the batching knobs alone (one dtype, one execution mode, one block size).
BATCHING = SpaceLimits(
    max_num_seqs=(8, 64, 128),
    max_num_batched_tokens=(256, 2048),
    enable_chunked_prefill=(True,),
    enable_prefix_caching=(True, False),
    cpu_dtypes=(),
    cpu_enforce_eager=(),
    cpu_block_sizes=(),
)
#: The same with both dtypes, both execution modes and 32-token blocks (what the model cannot price).
UNPRICED = BATCHING.model_copy(
    update={
        "cpu_dtypes": ("bfloat16", "float32"),
        "cpu_enforce_eager": (True, False),
        "cpu_block_sizes": (32,),
    }
)
SLO = endpoint_pb2.Slo(ttft_p99_ms=800, ttft_p50_ms=300, itl_p99_ms=100, attainment_target=0.9)


def _request(base: EngineSpec, classes: tuple[str, ...], **changes: object) -> PlanRequest:
    fields: dict[str, object] = {
        "search_id": "search-abc",
        "endpoint": "ep",
        "endpoint_uid": "uid-1",
        "profile_id": "profile-1",
        "objective": Objective.GOODPUT,
        "budget": 8,
        "base": base,
        "engine_model": "tiny",
        "hardware": {name: get_profile(name) for name in classes},
        "pool_replicas": 1,
        "slo": SLO,
        "agreement_threshold": 0.9,
        "peak_rps": 4.0,
        "trace_uri": "file:///traces/profile-1.jsonl",
        "trace_sha256": "ab" * 32,
    }
    fields.update(changes)
    return PlanRequest(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("hardware_class", "simulated"),
    [("cpu", False), ("h200", False), ("sim-cpu", True), ("sim-h200", True)],
)
def test_a_simulated_class_searches_only_what_the_model_prices(hardware_class: str, simulated: bool) -> None:
    limits = class_limits(UNPRICED, hardware_class)
    if simulated:
        assert not limits.try_speculative_ngram
        assert not (limits.cpu_dtypes or limits.cpu_enforce_eager or limits.cpu_block_sizes)
        assert limits.model_copy(update={"try_speculative_ngram": True}) == UNPRICED.model_copy(
            update={"cpu_dtypes": (), "cpu_enforce_eager": (), "cpu_block_sizes": ()}
        )
    else:
        assert limits == UNPRICED


@pytest.mark.parametrize(
    ("classes", "limits"),
    [
        (("cpu",), BATCHING),
        (("cpu",), UNPRICED),
        (("sim-cpu",), UNPRICED),
        (("cpu", "sim-cpu"), UNPRICED),
        (("sim-cpu", "cpu"), UNPRICED),
    ],
)
def test_the_first_class_leads_with_the_base_and_the_others_are_keyed_by_class(
    classes: tuple[str, ...], limits: SpaceLimits
) -> None:
    hardware = {name: get_profile(name) for name in classes}
    candidates = plan_candidates(TUNED, hardware=hardware, limits=limits, max_replicas=1)
    assert candidates[0][0].spec == TUNED and candidates[0][1] == classes[0]
    seen = [name for _, name in candidates]
    assert seen == sorted(seen, key=classes.index)  # class by class, in the request's order
    for candidate, name in candidates:
        assert candidate.key.startswith(f"{name}:") == (name != classes[0])
        if name.startswith("sim-"):  # one dtype and mode: the model prices every candidate
            assert unpriced_class(candidate.spec) == unpriced_class(TUNED)
    assert len({c.key for c, _ in candidates}) == len(candidates)


def test_a_base_the_first_class_refuses_is_a_failed_precondition() -> None:
    # tensor parallelism over 2 devices: a CPU engine refuses it
    refused = TUNED.model_copy(update={"tensor_parallel_size": 2})
    with pytest.raises(FailedPrecondition, match="cannot run on cpu"):
        plan_candidates(refused, hardware={"cpu": get_profile("cpu")}, limits=BATCHING, max_replicas=1)


@pytest.mark.parametrize(
    ("base", "limits", "expect_defaults", "expect_unpriced"),
    [
        (DEFAULTS, BATCHING, False, 0),  # the live configuration is vLLM's defaults: nothing forced
        (TUNED, BATCHING, True, 0),  # the defaults, measured beside the winner
        # fp32 compiled and bf16 eager: one of each other dtype and mode (the block size it prices)
        (DEFAULTS, UNPRICED, False, 2),
        (TUNED, UNPRICED, True, 2),  # the defaults first, then what the model cannot price
    ],
)
def test_round_0_measures_the_defaults_first_then_what_the_model_cannot_price(
    base: EngineSpec, limits: SpaceLimits, expect_defaults: bool, expect_unpriced: int
) -> None:
    cpu = get_profile("cpu")
    space = [c for c, _ in plan_candidates(base, hardware={"cpu": cpu}, limits=limits, max_replicas=1)]
    must_try = must_try_keys(space, hardware=cpu)
    defaults = defaults_key(space, base=space[0], hardware=cpu)
    assert (defaults is not None) == expect_defaults
    if defaults is not None:
        assert must_try[0] == defaults
    by_key = {c.key: c for c in space}
    unpriced = [k for k in must_try if unpriced_class(by_key[k].spec) != unpriced_class(base)]
    assert len(unpriced) == expect_unpriced
    assert len(set(must_try)) == len(must_try) and space[0].key not in must_try


@pytest.mark.parametrize("classes", [("cpu",), ("sim-cpu",), ("cpu", "h200")])
@pytest.mark.parametrize("objective", [Objective.GOODPUT, Objective.P50_TTFT])
def test_the_plan_template_and_context_take_the_settings_and_the_request(
    classes: tuple[str, ...], objective: Objective
) -> None:
    settings = SearcherSettings(
        eta=3, min_gain=0.1, headroom=1.5, rate_ladder=(1.0, 1.5, 2.0), trial_duration_s=20.0, max_replicas=4
    )
    request = _request(TUNED, classes, objective=objective, pool_replicas=2)
    setup = plan_search(request, settings=settings, limits=BATCHING)
    plan, template, context = setup.plan, setup.template, setup.context
    assert plan.search_id == template.search_id == "search-abc"
    assert plan.baseline.spec == TUNED and plan.baseline_class == classes[0]
    assert (plan.budget, plan.objective, plan.eta, plan.min_gain) == (8, objective, 3, 0.1)
    simulated = classes[0].startswith("sim-")
    assert plan.noise == noise_rule(settings, objective=objective, simulated=simulated)
    assert (plan.noise is NO_CONFIRMATION) == simulated
    assert plan.must_try == must_try_keys([c for c, _ in plan.candidates], hardware=get_profile(classes[0]))
    assert {name for _, name in plan.candidates} == set(classes)
    assert max(c.spec.replicas or 1 for c, _ in plan.candidates) <= 2  # the pool's, under the setting
    assert template.endpoint_uid == "uid-1" and template.engine_model == "tiny"
    assert (template.ladder, template.duration_s, template.headroom) == ((1.0, 1.5, 2.0), 20.0, 1.5)
    assert template.seed == trial_seed("search-abc") and template.slo == SLO
    assert context.slo.ttft_ms == 800 and context.p50_target_ms == 300 and context.target_rps == 4.0
    assert context.objective is objective and context.defaults_key == plan.must_try[0]
    assert setup.gate_rps == pytest.approx(6.0)
    assert setup.block_sizes == tuple(sorted(set(setup.block_sizes))) and setup.block_sizes


def test_the_seed_is_the_search_ids_and_differs_between_searches() -> None:
    assert trial_seed("search-abc") == trial_seed("search-abc") != trial_seed("search-abd")


def test_vllms_defaults_are_measured_as_they_are_never_swapped_for_their_classs_twin() -> None:
    """From fp32 with vLLM's other defaults, the defaults are bf16's representative too; round 0
    measures them as they are, and only the other representatives carry the model's best knobs."""
    fp32 = DEFAULTS.model_copy(update={"dtype": "float32"})
    plan = plan_search(_request(fp32, ("cpu",)), settings=SearcherSettings(), limits=UNPRICED).plan
    space = [c for c, _ in plan.candidates]
    defaults = defaults_key(space, base=plan.baseline, hardware=get_profile("cpu"))
    assert defaults is not None and defaults in plan.must_try
    assert defaults not in plan.representatives
    assert plan.representatives and set(plan.representatives) < set(plan.must_try)
