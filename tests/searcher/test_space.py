"""The candidate space: the base first, knob constraints honoured, hardware refusals filtered, no
duplicates, and lossy knobs marked."""

from __future__ import annotations

from evertune.domain.engines import EngineSpec, get_profile, knob_refusals, refuse_reasons
from evertune.domain.engines.hardware import cpu_profile
from evertune.searcher.space import (
    LLAMA_CPP_SLOT_CONTEXT,
    SpaceLimits,
    UnpricedClass,
    candidate_space,
    config_key,
    defaults_in_live_dtype_key,
    defaults_key,
    defaults_seat_key,
    engine_defaults,
    is_lossy,
    unpriced_class,
    unpriced_keys,
    unpriced_representatives,
)

CPU = cpu_profile(cores=2, memory_gib=11.5)
BASE = EngineSpec(model="/models/tiny", kv_cache_space_gib=2)


#: The batching knobs alone: one dtype and one execution mode (the base's).
BATCHING_ONLY = SpaceLimits(cpu_dtypes=(), cpu_enforce_eager=(), cpu_block_sizes=())
#: The batching knobs and the dtype, in the base's execution mode.
WITH_DTYPES = SpaceLimits(cpu_enforce_eager=(), cpu_block_sizes=())


def test_cpu_space_respects_vllm_constraints_and_starts_with_the_base() -> None:
    space = candidate_space(base=BASE, hardware=CPU, limits=BATCHING_ONLY, max_replicas=1)
    assert space[0].spec == BASE and not space[0].lossy
    for c in space[1:]:
        spec = c.spec
        # Knobs the base leaves to vLLM stay unset where the candidate takes vLLM's default.
        seqs = spec.max_num_seqs or CPU.default_max_num_seqs
        budget = spec.max_num_batched_tokens or CPU.default_max_num_batched_tokens
        assert budget >= seqs
        assert spec.max_num_seqs != CPU.default_max_num_seqs
        assert spec.max_num_batched_tokens != CPU.default_max_num_batched_tokens
        assert spec.enable_chunked_prefill in (None, False) and spec.enable_prefix_caching in (None, False)
        if spec.enable_chunked_prefill is False:
            assert budget >= 8192
        assert spec.kv_cache_space_gib == 2 and spec.replicas is None
        assert not c.lossy and c.devices == 0
        assert refuse_reasons(spec, CPU, path_exists=lambda _p: True) == []
    assert len({c.key for c in space}) == len(space)
    # 7 seq limits (4-256) x 6 budgets (256-8192, every budget >= every limit) x 2 caching, chunked
    # on; plus chunked off at budget 8192 (7 seq limits x 2 caching); the base's own configuration
    # (128 sequences, 2048 tokens, chunking and caching on: vLLM's defaults) among them, first
    assert len(space) == 42 * 2 + 7 * 2
    assert {c.spec.max_num_seqs for c in space} == {4, 8, 16, 32, 64, None, 256}
    assert min(c.spec.max_num_batched_tokens or 2048 for c in space) == 256


def test_an_explicit_base_knob_stays_explicit() -> None:
    base = BASE.model_copy(update={"max_num_seqs": 128, "enable_prefix_caching": True})
    space = candidate_space(base=base, hardware=CPU, limits=SpaceLimits(), max_replicas=1)
    assert all(c.spec.max_num_seqs is not None for c in space)
    assert all(c.spec.enable_prefix_caching is not None for c in space)


def test_max_model_len_decides_when_chunking_can_be_off() -> None:
    base = BASE.model_copy(update={"max_model_len": 2048})
    space = candidate_space(base=base, hardware=CPU, limits=SpaceLimits(), max_replicas=1)
    unchunked = [c.spec for c in space if c.spec.enable_chunked_prefill is False]
    assert unchunked and min(s.max_num_batched_tokens or 2048 for s in unchunked) == 2048
    assert {s.max_num_batched_tokens for s in unchunked} >= {None, 4096, 8192}


def test_gpu_space_fits_the_node_and_marks_lossy_knobs() -> None:
    h200 = get_profile("h200")
    limits = SpaceLimits(
        max_num_seqs=(64,),
        max_num_batched_tokens=(4096,),
        enable_chunked_prefill=(True,),
        enable_prefix_caching=(True,),
    )
    base = EngineSpec(model="/models/llama")
    space = candidate_space(base=base, hardware=h200, limits=limits, max_replicas=8)
    for c in space:
        tp = c.spec.tensor_parallel_size or 1
        assert tp * c.spec.replica_count <= h200.devices == 8
        assert c.devices == tp * c.spec.replica_count
        assert c.lossy == (
            c.spec.quantization is not None
            or c.spec.speculative is not None
            or (c.spec.kernels or "vllm") != "vllm"
        )
    assert any(c.spec.quantization == "fp8" for c in space)
    assert any(c.spec.speculative is not None and c.spec.speculative.method == "ngram" for c in space)
    # tp 1 and 1 replica are the base's unset defaults
    assert {(c.spec.tensor_parallel_size, c.spec.replicas) for c in space} >= {(8, None), (None, 8), (2, 4)}


def test_a_sim_base_is_searched_like_vllm() -> None:
    base = BASE.model_copy(update={"kind": "sim"})
    space = candidate_space(base=base, hardware=CPU, limits=SpaceLimits(), max_replicas=1)
    assert len(space) > 1 and all(c.spec.kind == "sim" for c in space)


def test_keys_are_stable_and_lossiness_follows_outputs() -> None:
    assert config_key(BASE) == config_key(EngineSpec(model="/models/tiny", kv_cache_space_gib=2.0))
    assert config_key(BASE) != config_key(BASE.model_copy(update={"max_num_seqs": 8}))
    assert not is_lossy(BASE.model_copy(update={"max_num_seqs": 8, "replicas": 2}), BASE)
    assert is_lossy(BASE.model_copy(update={"dtype": "float16"}), BASE)
    assert is_lossy(BASE.model_copy(update={"kernels": "evertune"}), BASE)


def test_cpu_space_holds_both_dtypes_and_marks_the_change_lossy() -> None:
    """bf16 against fp32 flips sign with the ISA, so the space holds every batching point in both;
    vLLM-CPU's `auto` (bf16 for the local fp32 checkpoint) stays unset, not tried twice."""
    without = candidate_space(base=BASE, hardware=CPU, limits=BATCHING_ONLY, max_replicas=1)
    space = candidate_space(base=BASE, hardware=CPU, limits=WITH_DTYPES, max_replicas=1)
    assert len(space) == 2 * len(without)
    assert {c.spec.dtype for c in space} == {None, "float32"}
    assert all(c.lossy == (c.spec.dtype == "float32") for c in space)
    fp32_base = BASE.model_copy(update={"dtype": "float32"})
    from_fp32 = candidate_space(base=fp32_base, hardware=CPU, limits=WITH_DTYPES, max_replicas=1)
    assert {c.spec.dtype for c in from_fp32} == {"float32", "bfloat16"}
    assert from_fp32[0].spec == fp32_base


def test_the_dtype_the_model_cannot_price_is_measured_as_the_base_with_that_dtype() -> None:
    space = candidate_space(base=BASE, hardware=CPU, limits=WITH_DTYPES, max_replicas=1)
    [key] = unpriced_representatives(space, base=space[0])
    [twin] = [c for c in space if c.key == key]
    assert twin.spec == BASE.model_copy(update={"dtype": "float32"})
    plain = candidate_space(base=BASE, hardware=CPU, limits=BATCHING_ONLY, max_replicas=1)
    assert unpriced_representatives(plain, base=plain[0]) == []


def test_cpu_space_holds_both_execution_modes_and_keeps_the_change_exact() -> None:
    """Eager against compiled (vLLM's default) is in the space for every batching point and dtype;
    a compiled candidate of a base that leaves the mode unset stays unset, not tried twice; the
    change is the same arithmetic reordered, held to the exact rule like prefix caching."""
    with_dtypes = candidate_space(base=BASE, hardware=CPU, limits=WITH_DTYPES, max_replicas=1)
    space = candidate_space(base=BASE, hardware=CPU, limits=SpaceLimits(cpu_block_sizes=()), max_replicas=1)
    assert len(space) == 2 * len(with_dtypes)
    assert {c.spec.enforce_eager for c in space} == {None, True}
    assert not any(c.lossy for c in space if c.spec.dtype is None)
    eager_base = BASE.model_copy(update={"enforce_eager": True})
    from_eager = candidate_space(
        base=eager_base, hardware=CPU, limits=SpaceLimits(cpu_block_sizes=()), max_replicas=1
    )
    assert {c.spec.enforce_eager for c in from_eager} == {True, False}
    assert from_eager[0].spec == eager_base and len(from_eager) == len(space)
    # accelerators keep the base's mode
    gpu = get_profile("h200")
    assert {
        c.spec.enforce_eager
        for c in candidate_space(base=BASE, hardware=gpu, limits=SpaceLimits(), max_replicas=1)
    } == {None}


def test_the_mode_the_model_cannot_price_is_measured_after_the_dtypes() -> None:
    """The model prices neither the dtype nor compilation: round 0 measures the base with the other
    dtype, then the base in the other execution mode; they are never ranked by the model."""
    base = BASE.model_copy(update={"enforce_eager": True, "enable_prefix_caching": False})
    space = candidate_space(base=base, hardware=CPU, limits=SpaceLimits(), max_replicas=1)
    by_key = {c.key: c for c in space}
    dtype_twin, mode_twin = (by_key[k].spec for k in unpriced_representatives(space, base=space[0]))
    assert dtype_twin == base.model_copy(update={"dtype": "float32"})
    assert mode_twin == base.model_copy(update={"enforce_eager": False})
    unpriced = set(unpriced_keys(space, base=space[0]))
    assert unpriced == {c.key for c in space if c.spec.dtype == "float32" or c.spec.enforce_eager is False}
    # vLLM's defaults compile: beside an eager endpoint they are an unpriced candidate too
    defaults = engine_defaults(base, CPU)
    assert defaults.enforce_eager is False and defaults_key(space, base=space[0], hardware=CPU) in unpriced


def test_the_engines_defaults_are_in_the_space_beside_a_hand_set_base() -> None:
    base = BASE.model_copy(update={"enable_prefix_caching": False, "max_num_seqs": 32})
    defaults = engine_defaults(base, CPU)
    # what the base sets is set to the engine's default; what it leaves unset stays unset
    assert defaults.enable_prefix_caching is True and defaults.max_num_seqs == CPU.default_max_num_seqs
    assert defaults.max_num_batched_tokens is None and defaults.dtype is None
    assert defaults.kv_cache_space_gib == base.kv_cache_space_gib
    space = candidate_space(base=base, hardware=CPU, limits=SpaceLimits(), max_replicas=1)
    assert space[1].spec == defaults and space[1].key == config_key(defaults)
    assert defaults_key(space, base=space[0], hardware=CPU) == space[1].key


def test_a_base_on_the_engines_defaults_has_no_defaults_candidate_of_its_own() -> None:
    space = candidate_space(base=BASE, hardware=CPU, limits=SpaceLimits(), max_replicas=1)
    assert engine_defaults(BASE, CPU) == BASE
    assert defaults_key(space, base=space[0], hardware=CPU) is None


def test_for_an_fp32_endpoint_the_defaults_twin_keeps_fp32_and_the_defaults_other_knobs() -> None:
    """On CPU vLLM's default dtype is bf16: an endpoint set to fp32 has its defaults in another
    dtype (unpriced by the model), and their twin in fp32 is in the space to stand in for them."""
    base = BASE.model_copy(update={"dtype": "float32", "enable_prefix_caching": False})
    space = candidate_space(base=base, hardware=CPU, limits=SpaceLimits(), max_replicas=1)
    defaults = engine_defaults(base, CPU)
    assert defaults.dtype == "bfloat16"
    key = defaults_in_live_dtype_key(space, base=space[0], hardware=CPU)
    [twin] = [c for c in space if c.key == key]
    assert twin.spec == defaults.model_copy(update={"dtype": "float32"})
    assert twin.spec.enable_prefix_caching is True and not twin.lossy
    # a bf16 (vLLM's own) endpoint: the defaults run its dtype already, no twin
    bf16 = candidate_space(
        base=BASE.model_copy(update={"enable_prefix_caching": False}),
        hardware=CPU,
        limits=SpaceLimits(),
        max_replicas=1,
    )
    assert defaults_in_live_dtype_key(bf16, base=bf16[0], hardware=CPU) is None


def test_the_defaults_seat_is_the_defaults_in_the_live_dtype_and_the_engines_mode() -> None:
    """Round 0's seat for vLLM's defaults: the defaults themselves beside a bf16 endpoint (compiled
    beside an eager one), their fp32 twin beside an fp32 endpoint; none when the base is them."""
    eager = BASE.model_copy(update={"enforce_eager": True, "enable_prefix_caching": False})
    space = candidate_space(base=eager, hardware=CPU, limits=SpaceLimits(), max_replicas=1)
    by_key = {c.key: c.spec for c in space}
    seat = by_key[str(defaults_seat_key(space, base=space[0], hardware=CPU))]
    assert seat == engine_defaults(eager, CPU)
    assert seat.enforce_eager is False and seat.enable_prefix_caching is True and seat.dtype is None
    fp32 = eager.model_copy(update={"dtype": "float32"})
    space = candidate_space(base=fp32, hardware=CPU, limits=SpaceLimits(), max_replicas=1)
    by_key = {c.key: c.spec for c in space}
    seat = by_key[str(defaults_seat_key(space, base=space[0], hardware=CPU))]
    assert seat == engine_defaults(fp32, CPU).model_copy(update={"dtype": "float32"})
    assert seat.enforce_eager is False
    plain = candidate_space(base=BASE, hardware=CPU, limits=SpaceLimits(), max_replicas=1)
    assert defaults_seat_key(plain, base=plain[0], hardware=CPU) is None


def test_cpu_space_tries_a_smaller_kv_block_and_keeps_the_default_unset() -> None:
    """vLLM-CPU's default block is 128 tokens; 32 is in the space for every other point (prefix
    caching reuses whole blocks). A base that leaves the size unset keeps it unset at 128, so the
    base is not tried twice; accelerators keep the base's size."""
    without = candidate_space(base=BASE, hardware=CPU, limits=SpaceLimits(cpu_block_sizes=()), max_replicas=1)
    space = candidate_space(base=BASE, hardware=CPU, limits=SpaceLimits(), max_replicas=1)
    assert len(space) == 2 * len(without)
    assert {c.spec.block_size for c in space} == {None, 32}
    assert space[0].spec == BASE and not any(c.lossy for c in space if c.spec.dtype is None)
    assert all(refuse_reasons(c.spec, CPU, path_exists=lambda _p: True) == [] for c in space)
    from_32 = candidate_space(
        base=BASE.model_copy(update={"block_size": 32}), hardware=CPU, limits=SpaceLimits(), max_replicas=1
    )
    assert {c.spec.block_size for c in from_32} == {32, 128} and from_32[0].spec.block_size == 32
    # vLLM's defaults for a base set to 32 name the default size, 128
    assert defaults_key(from_32, base=from_32[0], hardware=CPU) in {
        c.key for c in from_32 if c.spec.block_size == 128
    }
    gpu = get_profile("h200")
    assert {
        c.spec.block_size
        for c in candidate_space(base=BASE, hardware=gpu, limits=SpaceLimits(), max_replicas=1)
    } == {None}


def test_a_dtype_class_is_named_as_it_runs_whichever_base_the_space_was_built_around() -> None:
    """Around vLLM's defaults the bf16 candidates leave the dtype unset; around fp32 they say
    "bfloat16". A model priced on one space ranks the other's cells (bench search does): the
    classes must be the same (a mismatch left bf16 cells unpriced and the ranking at 0.447)."""
    fp32 = BASE.model_copy(update={"dtype": "float32"})
    around_defaults = candidate_space(base=BASE, hardware=CPU, limits=WITH_DTYPES, max_replicas=1)
    around_fp32 = candidate_space(base=fp32, hardware=CPU, limits=WITH_DTYPES, max_replicas=1)
    assert {unpriced_class(c.spec) for c in around_defaults} == {unpriced_class(c.spec) for c in around_fp32}
    assert (
        unpriced_class(BASE)
        == unpriced_class(BASE.model_copy(update={"dtype": "auto"}))
        == UnpricedClass(engine="vllm", weights=None, dtype="bfloat16", eager=False)
    )


def test_llama_cpp_joins_a_cpu_space_only_when_asked_each_format_an_unpriced_class() -> None:
    plain = candidate_space(base=BASE, hardware=CPU, limits=WITH_DTYPES, max_replicas=1)
    assert all(c.spec.kind == "vllm" for c in plain)
    limits = WITH_DTYPES.model_copy(
        update={"cpu_engines": ("llama.cpp",), "cpu_gguf_types": ("bf16", "q8_0")}
    )
    space = candidate_space(base=BASE, hardware=CPU, limits=limits, max_replicas=1)
    llama = [c for c in space if c.spec.kind == "llama.cpp"]
    # file type x slots (4, 8) x prompt cache (on: llama.cpp's default, written unset; off)
    assert len(llama) == 2 * 2 * 2 and all(c.lossy for c in llama)
    assert {c.spec.quantization for c in llama} == {"bf16", "q8_0"}
    assert all(c.spec.max_model_len == LLAMA_CPP_SLOT_CONTEXT and c.spec.block_size is None for c in llama)
    # vLLM's knobs never reach a llama.cpp candidate (they would be refused), nor the reverse
    assert all(knob_refusals(c.spec, CPU) == [] for c in space)
    base = next(c for c in space if c.spec == BASE)
    representatives = {
        unpriced_class(c.spec) for c in space if c.key in unpriced_representatives(space, base=base)
    }
    assert {cls for cls in representatives if cls.engine == "llama.cpp"} == {
        UnpricedClass(engine="llama.cpp", weights="bf16", dtype=None, eager=False),
        UnpricedClass(engine="llama.cpp", weights="q8_0", dtype=None, eager=False),
    }
    assert {c.key for c in llama} <= set(unpriced_keys(space, base=base))


def test_vllms_int8_copy_joins_a_cpu_space_only_when_asked_as_a_class_of_its_own() -> None:
    limits = WITH_DTYPES.model_copy(update={"cpu_quantization": ("int8-w8a8",)})
    plain = candidate_space(base=BASE, hardware=CPU, limits=WITH_DTYPES, max_replicas=1)
    space = candidate_space(base=BASE, hardware=CPU, limits=limits, max_replicas=1)
    int8 = [c for c in space if c.spec.quantization == "int8-w8a8"]
    assert not any(c.spec.quantization for c in plain)
    # the same cells in int8 (each a lossy change)
    assert int8 and all(c.lossy for c in int8)
    assert {c.spec.model_copy(update={"quantization": None}) for c in int8} <= {c.spec for c in plain}
    base = next(c for c in space if c.spec == BASE)
    [representative] = [
        key
        for key in unpriced_representatives(space, base=base)
        if unpriced_class(next(c.spec for c in space if c.key == key)).weights == "int8-w8a8"
    ]
    twin = next(c for c in space if c.key == representative)
    assert twin.spec == BASE.model_copy(update={"quantization": "int8-w8a8"})  # the base's own knobs
