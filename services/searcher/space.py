"""The candidate space of a search: engine configurations a hardware class can run (pure).

The space is the product of each knob's values (`SpaceLimits`, set in the searcher's settings)
around a base configuration (the live one), filtered by the engines' own refusal rules for the
hardware (`evertune.domain.engines.knob_refusals`) and by vLLM's constraints between knobs:

- `max_num_batched_tokens >= max_num_seqs` (vLLM refuses a step budget below its sequence limit);
- chunked prefill off needs a step budget that holds a whole prompt: `max_num_batched_tokens >=
  max_model_len` (when the model length is not set, the step budget must be at least 8192);
- replicas x tensor-parallel devices fit the node (accelerators) and `max_replicas`.

On CPU the dtype is a knob of its own (`SpaceLimits.cpu_dtypes`): bf16 against fp32 flips sign with
the ISA (AMX or AVX512-BF16 against AVX2 only), so the space holds both and trials decide. So is the
execution mode (`SpaceLimits.cpu_enforce_eager`): eager against torch.compile, vLLM's default. On an
AMX Xeon (2 cores, `bench loop --quick`, the grown voice traffic, 2 windows each) compiled measured
p50 TTFT 50-52 ms against eager's 63 ms with every other knob equal; eager engines start faster,
which is why a person sets it. The performance model prices neither, so neither is ranked by it:
round 0 measures them (`unpriced_keys`, `unpriced_representatives`).

On CPU vLLM's weights format can be one (`SpaceLimits.cpu_quantization`, none by default):
"int8-w8a8" is evertune's int8 copy of the model. And the engine can be a knob too
(`SpaceLimits.cpu_engines`, vLLM alone by default): with "llama.cpp" the space adds llama.cpp's
configurations of the same model, one per GGUF file type (`SpaceLimits.cpu_gguf_types`), slot
count (`llama_cpp_slots`), prompt cache and replica count, each slot holding the base's context
(`LLAMA_CPP_SLOT_CONTEXT` when the base sets none). The performance model prices neither an engine
nor a weights format it has not measured: each (engine, format) is an unpriced class like a dtype,
measured by a representative and then calibrated.

Knobs that change outputs (quantization, speculative decoding, a different kernel set, the dtype,
another engine) make a candidate `lossy`: the correctness gate then asks for the endpoint's
agreement threshold instead of token-for-token equality. Compiled against eager execution is the
same arithmetic fused and reordered, which the gate holds to the exact rule (every answer equal,
or close by top-k logprobs), as it does prefix caching.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from evertune.domain.engines import EngineSpec, HardwareProfile, SpeculativeSpec, knob_refusals

#: Step budget below which chunked prefill cannot be turned off when `max_model_len` is unknown.
UNCHUNKED_MIN_BUDGET = 8192
#: What `--dtype auto` runs on vLLM-CPU for an fp32 or bf16 checkpoint.
CPU_AUTO_DTYPE = "bfloat16"
#: Context of one llama.cpp slot when the base sets no `max_model_len`, tokens (a voice agent's
#: longest turns, system prompt and history included, fit with room).
LLAMA_CPP_SLOT_CONTEXT = 4096
#: vLLM weights formats on CPU the performance model cannot price (each an unpriced class).
CPU_WEIGHT_FORMATS = frozenset({"int8-w8a8"})


class SpaceLimits(BaseModel):
    """Values each knob may take in a search (`None` in a tuple = leave the knob to vLLM)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: `--max-num-seqs` values (a small limit keeps decode steps short on a CPU; 4 is the least
    #: that still batches a voice endpoint's overlapping turns)
    max_num_seqs: tuple[int, ...] = (4, 8, 16, 32, 64, 128, 256)
    #: `--max-num-batched-tokens` values (with chunked prefill, the prefill chunk a step may carry:
    #: a small budget splits a long prompt into short steps that decodes can interleave with)
    max_num_batched_tokens: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192)
    #: chunked prefill on/off
    enable_chunked_prefill: tuple[bool, ...] = (True, False)
    #: prefix caching on/off
    enable_prefix_caching: tuple[bool, ...] = (True, False)
    #: tensor-parallel degrees tried on accelerators (CPU: 1)
    tensor_parallel_size: tuple[int, ...] = (1, 2, 4, 8)
    #: try evertune's Triton kernels where the hardware has them
    try_evertune_kernels: bool = True
    #: try n-gram speculative decoding on accelerators (lossy)
    try_speculative_ngram: bool = True
    #: quantization methods tried on accelerators when the hardware supports them (lossy)
    quantization: tuple[str, ...] = ("fp8",)
    #: weight/activation dtypes tried on CPU (lossy). Which wins depends on the ISA (bf16 is fast
    #: with AMX or AVX512-BF16 and emulated on AVX2), so both are measured; nothing picks by vendor.
    cpu_dtypes: tuple[str, ...] = ("bfloat16", "float32")
    #: `--enforce-eager` values tried on CPU (True: eager, False: torch.compile, vLLM's default).
    #: Accelerators keep the base's mode.
    cpu_enforce_eager: tuple[bool, ...] = (True, False)
    #: `--block-size` values tried on CPU besides the base's (vLLM's default there: 128 tokens a
    #: KV block). Prefix caching reuses whole blocks, so a smaller block reuses more of a voice
    #: conversation's resent history. Accelerators keep the base's (their default is 16).
    cpu_block_sizes: tuple[int, ...] = (32,)
    #: weights formats vLLM serves on CPU besides the checkpoint's ("int8-w8a8": evertune's int8
    #: copy; lossy, an unpriced class of its own)
    cpu_quantization: tuple[str, ...] = ()
    #: engine kinds tried on CPU besides the base's ("llama.cpp" needs `make engines`)
    cpu_engines: tuple[str, ...] = ()
    #: GGUF file types llama.cpp serves in the space (lossy but for the folder's own dtype)
    cpu_gguf_types: tuple[str, ...] = ("bf16", "q8_0")
    #: llama.cpp slot counts (`--parallel`) tried
    llama_cpp_slots: tuple[int, ...] = (4, 8)


@dataclass(frozen=True)
class Candidate:
    """One configuration of the space."""

    spec: EngineSpec  #: the full engine configuration (base knobs plus the searched ones)
    key: str  #: stable id of the configuration (12 hex of a hash of its knobs)
    lossy: bool  #: changes outputs beyond batching effects (agreement threshold applies)
    devices: int  #: accelerators it occupies (replicas x tensor-parallel; 0 on CPU)


def config_key(spec: EngineSpec) -> str:
    """A stable 12-hex id of a configuration's knobs."""
    blob = json.dumps(spec.model_dump(mode="json", exclude_none=True), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def is_lossy(spec: EngineSpec, base: EngineSpec) -> bool:
    """Whether `spec` may answer differently from `base` beyond batching (engine, quantization,
    dtype, speculative method, kernels)."""
    return (
        spec.kind != base.kind
        or spec.quantization != base.quantization
        or spec.dtype != base.dtype
        or spec.speculative != base.speculative
        or (spec.kernels or "vllm") != (base.kernels or "vllm")
    )


def _eager(spec: EngineSpec) -> bool:
    """Whether the engine runs eager (unset: vLLM compiles)."""
    return bool(spec.enforce_eager)


def _hardware_options(
    hardware: HardwareProfile, limits: SpaceLimits, base: EngineSpec
) -> list[dict[str, object]]:
    """Combinations of the lossy and parallelism knobs for the hardware (one dict of knobs each):
    the dtype and the execution mode on CPU; tensor parallelism, kernels, speculative decoding and
    quantization on accelerators."""
    if hardware.is_cpu:
        dtypes = [base.dtype, *(d for d in limits.cpu_dtypes if d in hardware.supported_dtypes)]
        modes = [_eager(base), *limits.cpu_enforce_eager]
        blocks = [base.block_size or hardware.default_block_size, *limits.cpu_block_sizes]
        formats = [
            base.quantization,
            *(q for q in limits.cpu_quantization if q in hardware.supported_quantization),
        ]
        return [
            {"dtype": d, "enforce_eager": e, "block_size": b, "quantization": q}
            for d, e, b, q in itertools.product(
                dict.fromkeys(dtypes), dict.fromkeys(modes), dict.fromkeys(blocks), dict.fromkeys(formats)
            )
        ]
    tps = [tp for tp in limits.tensor_parallel_size if tp <= hardware.devices] or [1]
    kernels: list[str | None] = [base.kernels]
    if limits.try_evertune_kernels and "evertune" in hardware.kernels and base.kernels != "evertune":
        kernels.append("evertune")
    speculative: list[SpeculativeSpec | None] = [base.speculative]
    if limits.try_speculative_ngram and base.speculative is None:
        speculative.append(SpeculativeSpec(method="ngram", num_speculative_tokens=3, prompt_lookup_max=4))
    quantization: list[str | None] = [base.quantization]
    quantization += [
        q for q in limits.quantization if q in hardware.supported_quantization and q != base.quantization
    ]
    return [
        {"tensor_parallel_size": tp, "kernels": k, "speculative": s, "quantization": q}
        for tp, k, s, q in itertools.product(tps, kernels, speculative, quantization)
    ]


def engine_default_values(hardware: HardwareProfile) -> dict[str, object]:
    """What the engine runs on `hardware` for each searched knob left unset."""
    defaults: dict[str, object] = {
        "max_num_seqs": hardware.default_max_num_seqs,
        "max_num_batched_tokens": hardware.default_max_num_batched_tokens,
        "enable_chunked_prefill": True,
        "enable_prefix_caching": True,
        "replicas": 1,
        "tensor_parallel_size": 1,
        "enforce_eager": False,  # torch.compile on CPU, CUDA graphs on accelerators
        "block_size": hardware.default_block_size,
    }
    if hardware.is_cpu:
        # vLLM-CPU's `--dtype auto` runs fp32 and bf16 checkpoints (evertune's local model is fp32)
        # as bf16: x86's supported list puts bf16 first.
        defaults["dtype"] = CPU_AUTO_DTYPE
    return defaults


def _as_base_leaves(spec: EngineSpec, base: EngineSpec, hardware: HardwareProfile) -> EngineSpec:
    """`spec` with each knob the base leaves unset put back to unset where the value is the engine's
    own default there, so the base's own configuration is not tried twice under another key."""
    update = {
        name: None
        for name, default in engine_default_values(hardware).items()
        if getattr(base, name) is None and getattr(spec, name) == default
    }
    return spec.model_copy(update=update) if update else spec


def engine_defaults(base: EngineSpec, hardware: HardwareProfile) -> EngineSpec:
    """vLLM's own defaults for the endpoint: `base` with every searched knob at the engine's default
    on `hardware` (no quantization, speculative decoding or evertune kernels), written as the space
    writes it. What the endpoint sets that a search does not tune (model, length, KV cache) stays."""
    spec = base.model_copy(
        update={
            **engine_default_values(hardware),
            "quantization": None,
            "speculative": None,
            "kernels": None,
        }
    )
    return _as_base_leaves(spec, base, hardware)


def candidate_space(
    *, base: EngineSpec, hardware: HardwareProfile, limits: SpaceLimits, max_replicas: int
) -> list[Candidate]:
    """Every configuration of the space that the hardware can run, the base's own first if valid,
    then the engine's defaults (`engine_defaults`) when they differ and the hardware runs them.

    Ordered deterministically (by knob values), no duplicates.
    """
    seen: set[str] = set()
    out: list[Candidate] = []

    def add(spec: EngineSpec) -> None:
        spec = _as_base_leaves(spec, base, hardware)
        key = config_key(spec)
        if key in seen or knob_refusals(spec, hardware):
            return
        seen.add(key)
        devices = 0 if hardware.is_cpu else (spec.tensor_parallel_size or 1) * spec.replica_count
        out.append(Candidate(spec=spec, key=key, lossy=is_lossy(spec, base), devices=devices))

    add(base)
    add(engine_defaults(base, hardware))
    for options in _hardware_options(hardware, limits, base):
        tp = int(options.get("tensor_parallel_size") or 1)  # type: ignore[call-overload]
        for seqs, budget, chunked, caching, replicas in itertools.product(
            limits.max_num_seqs,
            limits.max_num_batched_tokens,
            limits.enable_chunked_prefill,
            limits.enable_prefix_caching,
            range(1, max_replicas + 1),
        ):
            if budget < seqs:
                continue
            if not chunked and budget < (base.max_model_len or UNCHUNKED_MIN_BUDGET):
                continue
            if not hardware.is_cpu and tp * replicas > hardware.devices:
                continue
            knobs = {
                **options,
                "max_num_seqs": seqs,
                "max_num_batched_tokens": budget,
                "enable_chunked_prefill": chunked,
                "enable_prefix_caching": caching,
                "replicas": replicas,
            }
            add(base.model_copy(update=knobs))
    if hardware.is_cpu:
        for spec in _other_engines(base, limits, max_replicas):
            add(spec)
    return out


def _other_engines(base: EngineSpec, limits: SpaceLimits, max_replicas: int) -> list[EngineSpec]:
    """The configurations of the engines other than the base's in `limits.cpu_engines` (llama.cpp:
    file type x slots x prompt cache x replicas, each slot the base's context)."""
    if "llama.cpp" not in limits.cpu_engines or base.kind == "llama.cpp":
        return []
    return [
        EngineSpec(
            kind="llama.cpp",
            model=base.model,
            quantization=file_type,
            max_num_seqs=slots,
            max_model_len=base.max_model_len or LLAMA_CPP_SLOT_CONTEXT,
            enable_prefix_caching=caching,
            replicas=replicas,
        )
        for file_type, slots, caching, replicas in itertools.product(
            limits.cpu_gguf_types,
            limits.llama_cpp_slots,
            limits.enable_prefix_caching,
            range(1, max_replicas + 1),
        )
    ]


def defaults_key(
    candidates: Sequence[Candidate], *, base: Candidate, hardware: HardwareProfile
) -> str | None:
    """Key of the candidate that is the engine's defaults on `hardware`, None when that is the base
    itself or not in the space. A search measures it whatever the model predicts: "never worse than
    vLLM's defaults" needs the defaults measured beside the winner, not predicted."""
    key = config_key(engine_defaults(base.spec, hardware))
    return key if key != base.key and any(c.key == key for c in candidates) else None


def defaults_in_live_dtype_key(
    candidates: Sequence[Candidate], *, base: Candidate, hardware: HardwareProfile
) -> str | None:
    """Key of the engine's defaults with the base's dtype, None when the defaults already run it,
    or that configuration is the base or not in the space. On CPU vLLM's default dtype is bf16; for
    an endpoint set to fp32 the defaults are another dtype, which the model cannot price, and this
    twin is the configuration the model can weigh in their place."""
    defaults = engine_defaults(base.spec, hardware)
    if defaults.dtype == base.spec.dtype:
        return None
    twin = defaults.model_copy(update={"dtype": base.spec.dtype})
    return next((c.key for c in candidates if c.spec == twin and c.key != base.key), None)


def defaults_seat_key(
    candidates: Sequence[Candidate], *, base: Candidate, hardware: HardwareProfile
) -> str | None:
    """Key of the candidate that stands for the engine's defaults when round 0 weighs them against
    the model's best: the defaults themselves when they run the base's dtype, else their twin in
    it (`defaults_in_live_dtype_key`: vLLM-CPU's bf16 is emulated on an AVX2-only CPU, where an
    endpoint runs fp32 for that reason). Either keeps the defaults' execution mode (compiled),
    which a person sets to eager for faster starts, not for faster serving. None: not in the space,
    or the base itself."""
    if engine_defaults(base.spec, hardware).dtype != base.spec.dtype:
        return defaults_in_live_dtype_key(candidates, base=base, hardware=hardware)
    return defaults_key(candidates, base=base, hardware=hardware)


class UnpricedClass(NamedTuple):
    """What the performance model cannot price of a configuration (its predictions compare
    configurations of one class only)."""

    engine: str  #: the engine kind ("sim" counts as the vLLM it models)
    #: llama.cpp's GGUF file type; vLLM's weights format evertune makes (`CPU_WEIGHT_FORMATS`);
    #: None: the checkpoint's own (a quantization the roofline prices, fp8 on accelerators, is not
    #: a class of its own)
    weights: str | None
    dtype: str | None  #: vLLM's dtype as it runs (unset and "auto": bf16); None for llama.cpp
    eager: bool  #: vLLM runs eager (no torch.compile); False for llama.cpp


def unpriced_class(spec: EngineSpec) -> UnpricedClass:
    """What the performance model cannot price of a configuration: its engine and weights format,
    its dtype and execution mode. The dtype is named as it runs: unset and "auto" are bf16
    (vLLM-CPU's `auto`; a space varies the dtype on CPU only), so a space built around fp32, whose
    bf16 candidates say "bfloat16", and one built around vLLM's defaults, whose say nothing, name
    the same classes."""
    if spec.kind == "llama.cpp":
        return UnpricedClass(engine="llama.cpp", weights=spec.quantization, dtype=None, eager=False)
    dtype = CPU_AUTO_DTYPE if spec.dtype in (None, "auto") else spec.dtype
    weights = spec.quantization if spec.quantization in CPU_WEIGHT_FORMATS else None
    return UnpricedClass(engine="vllm", weights=weights, dtype=dtype, eager=_eager(spec))


def unpriced_keys(candidates: Sequence[Candidate], *, base: Candidate) -> list[str]:
    """Keys of the candidates the performance model cannot price against `base`: another dtype or
    execution mode. The model predicts them exactly as their twins with the base's, so ranking them
    by it would pick one by the tie-break; only a trial tells (see `unpriced_representatives`)."""
    return [c.key for c in candidates if unpriced_class(c.spec) != unpriced_class(base.spec)]


def unpriced_representatives(candidates: Sequence[Candidate], *, base: Candidate) -> list[str]:
    """Keys of the candidates a search must measure because the performance model cannot price
    what sets them apart: for each dtype other than the base's, the base's own knobs with that
    dtype; then for the other execution mode, the base's own knobs in that mode (or, when the space
    lacks one, the first candidate of that dtype or mode); then for each other engine and weights
    format, its candidate in the base's dtype and mode (else its first). The model's roofline has no
    figure for how fast an ISA runs each dtype or format, for what compilation buys, or for another
    engine; a trial has."""
    live = unpriced_class(base.spec)
    classes = list(dict.fromkeys(unpriced_class(c.spec) for c in candidates))
    same_engine = [c for c in classes if (c.engine, c.weights) == (live.engine, live.weights)]
    wanted = [c for c in same_engine if c.dtype != live.dtype and c.eager == live.eager]
    wanted += [c for c in same_engine if c.dtype == live.dtype and c.eager != live.eager]
    for engine, weights in dict.fromkeys((c.engine, c.weights) for c in classes):
        if (engine, weights) == (live.engine, live.weights):
            continue
        kin = [c for c in classes if (c.engine, c.weights) == (engine, weights)]
        wanted.append(next((c for c in kin if (c.dtype, c.eager) == (live.dtype, live.eager)), kin[0]))
    keys: list[str] = []
    for unpriced in wanted:
        alike = [c for c in candidates if unpriced_class(c.spec) == unpriced]
        exact = [c for c in alike if _priced(c.spec) == _priced(base.spec)]
        if alike:
            keys.append((exact or alike)[0].key)
    return keys


def class_twin(candidates: Iterable[Candidate], *, knobs: Candidate, of_class: Candidate) -> Candidate | None:
    """The candidate with `knobs`' priced knobs in `of_class`'s unpriced class (dtype, execution
    mode, engine and weights), or None when the space holds no such twin."""
    wanted, priced = unpriced_class(of_class.spec), _priced(knobs.spec)
    return next(
        (c for c in candidates if unpriced_class(c.spec) == wanted and _priced(c.spec) == priced), None
    )


def _priced(spec: EngineSpec) -> EngineSpec:
    """`spec` without what the performance model cannot price (its twins compare equal)."""
    return spec.model_copy(
        update={"dtype": None, "enforce_eager": None, "kind": "vllm", "quantization": None}
    )
