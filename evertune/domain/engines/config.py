"""The engine config as a validated domain object, and its one conversion from and to the wire.

`EngineSpec` is what the runner and the deployer hand to an engine backend: the engine kind, the
model, and the knobs. Every knob is optional: `None` means "the engine's own default", which stays
distinguishable from an explicit value equal to that default (as `optional` fields on the wire).

This module checks what a config is on its own (types, ranges, which speculative fields go with
which method). Whether a config can run on some hardware is `vllm_args.refuse_reasons`.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evertune.domain.engines.errors import InvalidEngineConfig
from evertune.v1 import endpoint_pb2

EngineKind = Literal["vllm", "sim", "llama.cpp"]
Dtype = Literal["auto", "bfloat16", "float16", "float32"]
Kernels = Literal["vllm", "evertune"]
SpeculativeMethod = Literal["ngram", "eagle", "eagle3", "mtp", "draft_model"]

#: Speculative methods that need a separate draft model; "ngram" looks up the prompt and "mtp" uses
#: the target model's own multi-token-prediction heads.
DRAFT_METHODS: frozenset[str] = frozenset({"eagle", "eagle3", "draft_model"})


class SpeculativeSpec(BaseModel):
    """Speculative decoding settings (vLLM `--speculative-config`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: How draft tokens are proposed: "ngram", "eagle", "eagle3", "mtp" or "draft_model".
    method: SpeculativeMethod
    #: Tokens proposed per step.
    num_speculative_tokens: int = Field(ge=1, le=64)
    #: Draft model (local path) for "eagle", "eagle3" and "draft_model"; None for the others.
    draft_model: str | None = None
    #: Longest n-gram looked up in the prompt for "ngram", in tokens (None = engine default).
    prompt_lookup_max: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _fields_fit_method(self) -> Self:
        if self.method in DRAFT_METHODS and not self.draft_model:
            raise ValueError(f"speculative method {self.method!r} needs a draft_model")
        if self.method not in DRAFT_METHODS and self.draft_model:
            raise ValueError(f"speculative method {self.method!r} takes no draft_model")
        if self.method != "ngram" and self.prompt_lookup_max is not None:
            raise ValueError("prompt_lookup_max only applies to the 'ngram' speculative method")
        return self


class EngineSpec(BaseModel):
    """How one engine instance (or a group of identical replicas) is started."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: "vllm" (a real vLLM server), "llama.cpp" (llama.cpp's server) or "sim" (evertune's
    #: performance model). Which knobs each takes: `registry.ENGINES`.
    kind: EngineKind = "vllm"
    #: Model the engine loads: a local folder (or a hub id where the hub can be reached).
    model: str = Field(min_length=1)
    #: Most sequences scheduled in one step (`--max-num-seqs`).
    max_num_seqs: int | None = Field(default=None, gt=0)
    #: Token budget of one scheduler step (`--max-num-batched-tokens`).
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    #: Split long prefills into chunks that share steps with decodes.
    enable_chunked_prefill: bool | None = None
    #: Reuse KV blocks of shared prompt prefixes.
    enable_prefix_caching: bool | None = None
    #: Run eagerly: no torch.compile, no CUDA graphs (much faster start, slower steps).
    enforce_eager: bool | None = None
    #: Weight and activation dtype.
    dtype: Dtype | None = None
    #: KV cache block size, in tokens per block.
    block_size: int | None = Field(default=None, gt=0)
    #: Memory given to the KV cache of ONE replica, in GiB.
    kv_cache_space_gib: float | None = Field(default=None, gt=0)
    #: Speculative decoding; None = none.
    speculative: SpeculativeSpec | None = None
    #: Weights format: vLLM's `--quantization` method or "int8-w8a8" (evertune's int8 copy);
    #: llama.cpp's GGUF file type ("q4_1", "q8_0", ...). None = as the checkpoint is.
    quantization: str | None = Field(default=None, min_length=1)
    #: Tensor-parallel degree, in devices per replica.
    tensor_parallel_size: int | None = Field(default=None, gt=0)
    #: Engine replicas behind the deployment (None = 1); each gets its own port and KV space.
    replicas: int | None = Field(default=None, gt=0)
    #: Longest request context (prompt + completion), in tokens.
    max_model_len: int | None = Field(default=None, gt=0)
    #: Attention/GEMM kernels: vLLM's own, or evertune's tuned Triton kernels via the vLLM plugin.
    kernels: Kernels | None = None
    #: llama.cpp's physical batch, tokens computed in one pass (`-ub`).
    micro_batch_tokens: int | None = Field(default=None, gt=0)
    #: llama.cpp's flash attention on or off (None: the build's `auto`).
    flash_attention: bool | None = None
    #: llama.cpp's reuse of cached prompt chunks of at least this many tokens (`--cache-reuse`).
    cache_reuse_tokens: int | None = Field(default=None, ge=0)

    @property
    def replica_count(self) -> int:
        """Replicas to start (1 when unset)."""
        return self.replicas or 1

    @classmethod
    def from_proto(cls, config: endpoint_pb2.EngineConfig, *, default_model: str = "") -> EngineSpec:
        """The spec of a wire `EngineConfig`; raises `InvalidEngineConfig` with one line if invalid.

        An empty `model` on the wire means "the endpoint's model": pass it as `default_model`.
        An empty `engine` means "vllm".
        """
        fields: dict[str, object] = {
            "kind": config.engine or "vllm",
            "model": config.model or default_model,
        }
        for name in _OPTIONAL_SCALARS:
            if config.HasField(name):
                fields[name] = getattr(config, name)
        if config.HasField("speculative"):
            spec = config.speculative
            fields["speculative"] = {
                "method": spec.method,
                "num_speculative_tokens": spec.num_speculative_tokens,
                "draft_model": spec.draft_model or None,
                "prompt_lookup_max": spec.prompt_lookup_max if spec.HasField("prompt_lookup_max") else None,
            }
        return cls.parse(fields)

    @classmethod
    def parse(cls, fields: dict[str, object]) -> EngineSpec:
        """Validate plain fields (e.g. from JSON or a CLI); raises `InvalidEngineConfig` with one line."""
        try:
            return cls.model_validate(fields)
        except ValidationError as err:
            raise InvalidEngineConfig(f"invalid engine config: {_first_error(err)}") from None

    def to_proto(self) -> endpoint_pb2.EngineConfig:
        """The wire form; knobs left at None stay unset."""
        config = endpoint_pb2.EngineConfig(engine=self.kind, model=self.model)
        for name in _OPTIONAL_SCALARS:
            value = getattr(self, name)
            if value is not None:
                setattr(config, name, value)
        if self.speculative is not None:
            spec = self.speculative
            config.speculative.method = spec.method
            config.speculative.num_speculative_tokens = spec.num_speculative_tokens
            config.speculative.draft_model = spec.draft_model or ""
            if spec.prompt_lookup_max is not None:
                config.speculative.prompt_lookup_max = spec.prompt_lookup_max
        return config


#: Scalar knobs that are `optional` on the wire and `X | None` here, under the same name.
_OPTIONAL_SCALARS: tuple[str, ...] = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "enforce_eager",
    "dtype",
    "block_size",
    "kv_cache_space_gib",
    "quantization",
    "tensor_parallel_size",
    "replicas",
    "kernels",
    "max_model_len",
    "micro_batch_tokens",
    "flash_attention",
    "cache_reuse_tokens",
)
#: Every knob of an `EngineSpec`: what is not the kind or the model.
KNOBS: tuple[str, ...] = (*_OPTIONAL_SCALARS, "speculative")


def foreign_knobs(spec: EngineSpec, accepted: frozenset[str]) -> list[str]:
    """One line for every knob `spec` sets that its engine does not take (`accepted`)."""
    return [
        f"knob {name} is not a knob of engine {spec.kind!r}"
        for name in KNOBS
        if getattr(spec, name) is not None and name not in accepted
    ]


def _first_error(err: ValidationError) -> str:
    """`field: reason` of the first error pydantic found, on one line."""
    first = err.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    reason = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {reason}" if where else reason
