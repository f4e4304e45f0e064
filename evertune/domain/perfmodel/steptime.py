"""How long one engine step takes: a roofline over the step's FLOPs and bytes, plus overheads.

    time = max(gemm_flops / (peak * compute_eff) + attention_flops / (peak * attention_eff),
               bytes / (bandwidth * bandwidth_eff))
           + step_overhead_s + seq_overhead_s * scheduled_sequences

Attention gets its own efficiency: its kernels reach a different share of peak than the matrix
multiplies (on the CPU backend far more: the tiny model's 256-wide GEMMs are inefficient, its
attention kernel is not). Apart from the step, each request pays `request_overhead_s` plus
`request_overhead_per_token_s` per prompt token once before the engine sees it (the API server's
input processing and tokenizing, which covers the whole prompt even when the engine then finds most
of it in the prefix cache): the simulator delays its arrival by that much.

FLOPs of a step (`arch` = `ModelArch`, T new tokens, S sampled tokens):
- matrix multiplies: 2 * T * layers * layer_params, and 2 * S * hidden * vocab for the output head
  (only sampled positions go through it);
- attention: 4 * layers * heads * head_dim per (query, key) pair; a chunk of n new tokens after c
  computed ones has n*c + n*(n+1)/2 pairs (causal).

Bytes of a step: every weight once; the KV of each scheduled request's context once (read) and the
new tokens' KV (write); activations in and out of each layer (2 * T * layers * (2*hidden +
intermediate) elements).

Tensor parallelism divides the work over `tp` devices and ignores the all-reduce (a known gap).
The efficiency factors are what `evertune model calibrate` fits for a hardware profile.
"""

from __future__ import annotations

from dataclasses import dataclass

from evertune.domain.engines.hardware import HardwareProfile
from evertune.domain.perfmodel.arch import ModelArch
from evertune.errors import InvalidArgument


@dataclass(frozen=True)
class Efficiency:
    """How far an engine falls short of the hardware's peaks, and its fixed costs per step."""

    compute: float = 0.5  #: share of peak FLOP/s the matrix multiplies reach
    bandwidth: float = 0.7  #: share of peak memory bandwidth the step reaches
    attention: float = 0.3  #: share of peak FLOP/s the attention kernels reach
    step_overhead_s: float = 0.0  #: fixed seconds per step (scheduling, launch, sampling setup)
    seq_overhead_s: float = 0.0  #: seconds per scheduled sequence (input prep, sampling, detokenizing)
    request_overhead_s: float = 0.0  #: seconds per request before the engine sees it (API server)
    #: seconds per prompt token before the engine sees it (the API server tokenizing the whole prompt,
    #: cached prefix or not)
    request_overhead_per_token_s: float = 0.0

    def __post_init__(self) -> None:
        if not (self.compute > 0 and self.bandwidth > 0 and self.attention > 0):
            raise InvalidArgument(
                f"efficiency factors must be positive, got compute {self.compute}, "
                f"bandwidth {self.bandwidth}, attention {self.attention}"
            )
        overheads = (self.step_overhead_s, self.seq_overhead_s, self.request_overhead_s)
        if min(*overheads, self.request_overhead_per_token_s) < 0:
            raise InvalidArgument("overheads must not be negative")


@dataclass(frozen=True)
class StepCost:
    """The per-step constants of one (model, hardware, efficiency, tp), precomputed for speed."""

    flops_per_token: float  #: matrix-multiply FLOPs of one new token
    flops_per_sample: float  #: output-head FLOPs of one sampled token
    flops_per_pair: float  #: attention FLOPs of one (query, key) pair
    fixed_bytes: float  #: weights read once per step
    bytes_per_token: float  #: activations and the KV write of one new token
    bytes_per_context: float  #: KV read of one context token of a scheduled request
    flop_s: float  #: effective matrix-multiply FLOP/s (peak * compute efficiency * tp)
    attention_flop_s: float  #: effective attention FLOP/s (peak * attention efficiency * tp)
    byte_s: float  #: effective bytes/s (bandwidth * bandwidth efficiency * tp)
    step_overhead_s: float  #: fixed seconds per step
    seq_overhead_s: float  #: seconds per scheduled sequence

    @classmethod
    def of(
        cls, arch: ModelArch, hardware: HardwareProfile, efficiency: Efficiency, *, tp: int = 1
    ) -> StepCost:
        if hardware.peak_flops <= 0 or hardware.memory_bandwidth <= 0:
            raise InvalidArgument(f"hardware {hardware.name!r} has no peak FLOP/s or bandwidth figures")
        act_elems = 2 * arch.layers * (2 * arch.hidden + arch.intermediate)
        return cls(
            flops_per_token=2.0 * arch.layers * arch.layer_params,
            flops_per_sample=2.0 * arch.hidden * arch.vocab,
            flops_per_pair=4.0 * arch.layers * arch.heads * arch.head_dim,
            fixed_bytes=float(arch.weight_bytes),
            bytes_per_token=float(act_elems * arch.dtype_bytes + arch.kv_bytes_per_token),
            bytes_per_context=float(arch.kv_bytes_per_token),
            flop_s=hardware.peak_flops * efficiency.compute * tp,
            attention_flop_s=hardware.peak_flops * efficiency.attention * tp,
            byte_s=hardware.memory_bandwidth * efficiency.bandwidth * tp,
            step_overhead_s=efficiency.step_overhead_s,
            seq_overhead_s=efficiency.seq_overhead_s,
        )

    def flops(self, *, tokens: int, samples: int, pairs: float) -> float:
        """FLOPs of a step with `tokens` new tokens, `samples` sampled, `pairs` attention pairs."""
        return tokens * self.flops_per_token + samples * self.flops_per_sample + pairs * self.flops_per_pair

    def bytes(self, *, tokens: int, context: int) -> float:
        """Bytes a step moves with `tokens` new tokens over `context` tokens of scheduled context."""
        return self.fixed_bytes + tokens * self.bytes_per_token + context * self.bytes_per_context

    def time(self, *, tokens: int, samples: int, pairs: float, context: int, seqs: int) -> float:
        """Seconds of one step (see the module doc)."""
        compute = (
            tokens * self.flops_per_token + samples * self.flops_per_sample
        ) / self.flop_s + pairs * self.flops_per_pair / self.attention_flop_s
        memory = (
            self.fixed_bytes + tokens * self.bytes_per_token + context * self.bytes_per_context
        ) / self.byte_s
        return (compute if compute > memory else memory) + self.step_overhead_s + self.seq_overhead_s * seqs


def step_shape(computed: list[int], new: list[int], known: list[int]) -> tuple[int, int, float, int, int]:
    """(tokens, samples, pairs, context, seqs) of a step whose i-th request had `computed[i]` tokens
    computed, computes `new[i]` more, and knows `known[i]` tokens (it samples when it reaches them)."""
    tokens = samples = context = 0
    pairs = 0.0
    for c, n, k in zip(computed, new, known, strict=True):
        tokens += n
        context += c
        pairs += n * c + n * (n + 1) / 2
        if c + n == k:
            samples += 1
    return tokens, samples, pairs, context, len(new)
