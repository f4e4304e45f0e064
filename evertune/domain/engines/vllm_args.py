"""Engine spec -> vLLM 0.32 command line and environment, and the per-hardware refusal rules.

Pure: no I/O except the one injected check that a draft model's path exists. A knob left at None
produces no argument, so vLLM applies its own default; an explicit value always produces its
argument, even when it equals the default.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from evertune.domain.engines.config import KNOBS, EngineSpec, foreign_knobs
from evertune.domain.engines.errors import KnobRefused
from evertune.domain.engines.hardware import HardwareProfile

GIB = 2**30
#: `quantization` naming evertune's int8 W8A8 copy of the model (`evertune.domain.model.quantize`):
#: the engine serves the copy, a compressed-tensors checkpoint, instead of the folder.
EVERTUNE_INT8 = "int8-w8a8"
#: Knobs of `EngineSpec` vLLM takes (every one but llama.cpp's own).
VLLM_KNOBS = frozenset(KNOBS) - {"micro_batch_tokens", "flash_attention", "cache_reuse_tokens"}

#: Environment variables that knobs own. The engine shell drops them from the inherited environment
#: so that a knob left at None really means vLLM's default, not whatever the parent had set.
KNOB_ENV_VARS: tuple[str, ...] = ("VLLM_CPU_KVCACHE_SPACE", "VLLM_PLUGINS")

#: vLLM general-plugin name of evertune's kernels (the kernels package registers it under the
#: `vllm.general_plugins` entry-point group); `VLLM_PLUGINS` makes vLLM load it.
EVERTUNE_KERNELS_PLUGIN = "evertune_kernels"
#: evertune settings an engine process keeps (the sim engine finds calibrations under the data dir).
ENGINE_KEPT_SETTINGS = frozenset({"EVERTUNE_DATA_DIR"})
#: Parts of a variable name that mark a secret an engine never needs.
SECRET_NAME_PARTS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "API_KEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
)


def engine_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of evertune's own environment an engine process inherits: no evertune setting but
    the data dir (API tokens, the ClickHouse URL with its password, the prefix secret, NATS URLs)
    and nothing whose name marks a secret (`SECRET_NAME_PARTS`: cloud keys, hub tokens), so a
    model's code, or whoever reads the engine's /proc, learns none of them; nor the knob variables
    the engine's spec sets itself (`KNOB_ENV_VARS`)."""
    return {
        name: value
        for name, value in environ.items()
        if name not in KNOB_ENV_VARS
        and (not name.startswith("EVERTUNE_") or name in ENGINE_KEPT_SETTINGS)
        and not any(part in name.upper() for part in SECRET_NAME_PARTS)
    }


#: Module started as the OpenAI-compatible server (the `vllm` console script looks for a package
#: named vllm, so evertune starts the module).
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"

#: On CPU, tensor parallelism binds each rank to its own cores; evertune asks for at least this many
#: per rank before it lets a CPU config use more than one rank.
MIN_CORES_PER_CPU_RANK = 4


@dataclass(frozen=True)
class VllmArgs:
    """The knob part of a vLLM start: command-line arguments and environment variables."""

    argv: list[str] = field(default_factory=list)  #: arguments after `--model <model>`
    env: dict[str, str] = field(default_factory=dict)  #: variables to set in the engine's environment


def knob_args(spec: EngineSpec, *, hardware: HardwareProfile) -> VllmArgs:
    """vLLM's own argument or variable for every knob the spec sets (replicas: none, see EngineGroup)."""
    argv: list[str] = []
    env: dict[str, str] = {}
    if spec.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(spec.max_num_seqs)]
    if spec.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(spec.max_num_batched_tokens)]
    if spec.enable_chunked_prefill is not None:
        argv.append(_flag("enable-chunked-prefill", spec.enable_chunked_prefill))
    if spec.enable_prefix_caching is not None:
        argv.append(_flag("enable-prefix-caching", spec.enable_prefix_caching))
    if spec.enforce_eager is not None:
        argv.append(_flag("enforce-eager", spec.enforce_eager))
    if spec.dtype is not None:
        argv += ["--dtype", spec.dtype]
    if spec.block_size is not None:
        argv += ["--block-size", str(spec.block_size)]
    if spec.kv_cache_space_gib is not None:
        gib = spec.kv_cache_space_gib
        if hardware.is_cpu and gib == int(gib):
            # The CPU backend's own knob; it takes whole GiB only.
            env["VLLM_CPU_KVCACHE_SPACE"] = str(int(gib))
        else:
            argv += ["--kv-cache-memory-bytes", str(int(gib * GIB))]
    if spec.speculative is not None:
        argv += ["--speculative-config", speculative_json(spec)]
    if spec.quantization == EVERTUNE_INT8:
        argv += ["--quantization", "compressed-tensors"]  # the copy's own format
    elif spec.quantization is not None:
        argv += ["--quantization", spec.quantization]
    if spec.tensor_parallel_size is not None:
        argv += ["--tensor-parallel-size", str(spec.tensor_parallel_size)]
    if spec.max_model_len is not None:
        argv += ["--max-model-len", str(spec.max_model_len)]
    if spec.kernels == "evertune":
        env["VLLM_PLUGINS"] = EVERTUNE_KERNELS_PLUGIN
    return VllmArgs(argv=argv, env=env)


def speculative_json(spec: EngineSpec) -> str:
    """The `--speculative-config` JSON of the spec's speculative settings."""
    assert spec.speculative is not None
    sc = spec.speculative
    config: dict[str, object] = {"method": sc.method, "num_speculative_tokens": sc.num_speculative_tokens}
    if sc.draft_model:
        config["model"] = sc.draft_model
    if sc.prompt_lookup_max is not None:
        config["prompt_lookup_max"] = sc.prompt_lookup_max
    return json.dumps(config, separators=(",", ":"), sort_keys=True)


def server_command(
    spec: EngineSpec,
    *,
    hardware: HardwareProfile,
    python: str,
    host: str,
    port: int,
    served_model_name: str | None = None,
    model: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The whole command line of one vLLM API server for `spec`, and the knob environment.
    `model`: the folder served when it is not `spec.model` (evertune's int8 copy of it)."""
    args = knob_args(spec, hardware=hardware)
    served = model or spec.model
    argv = [python, "-m", API_SERVER_MODULE, "--model", served, "--host", host, "--port", str(port)]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    return argv + args.argv, dict(args.env)


def refuse_reasons(
    spec: EngineSpec,
    hardware: HardwareProfile,
    *,
    path_exists: Callable[[str], bool] = os.path.exists,
) -> list[str]:
    """Why `spec` cannot run on `hardware` (one line each); empty when it can."""
    reasons: list[str] = []
    if spec.kind != "vllm":
        reasons.append(f"engine kind {spec.kind!r} is not 'vllm'")

    tp = spec.tensor_parallel_size or 1
    replicas = spec.replica_count
    if hardware.is_cpu:
        if tp > 1 and hardware.cores < tp * MIN_CORES_PER_CPU_RANK:
            reasons.append(
                f"tensor_parallel_size {tp} needs at least {tp * MIN_CORES_PER_CPU_RANK} cores on cpu "
                f"({MIN_CORES_PER_CPU_RANK} per rank), this machine has {hardware.cores}"
            )
        if replicas * tp > hardware.cores:
            reasons.append(
                f"{replicas} replicas x {tp} ranks need {replicas * tp} cores, "
                f"this machine has {hardware.cores}"
            )
        if replicas > 1 and spec.kv_cache_space_gib is None:
            reasons.append(
                "replicas > 1 on cpu need kv_cache_space_gib: vLLM's CPU default claims most of the memory "
                "for each replica"
            )
    else:
        if tp > hardware.devices:
            reasons.append(
                f"tensor_parallel_size {tp} exceeds the {hardware.devices} devices of {hardware.name}"
            )
        elif replicas * tp > hardware.devices:
            reasons.append(
                f"{replicas} replicas x tensor_parallel_size {tp} need {replicas * tp} devices, "
                f"{hardware.name} has {hardware.devices}"
            )

    if spec.dtype is not None and spec.dtype not in hardware.supported_dtypes:
        reasons.append(f"dtype {spec.dtype!r} is not supported on {hardware.name}")
    if spec.quantization is not None and spec.quantization not in hardware.supported_quantization:
        known = ", ".join(sorted(hardware.supported_quantization))
        reasons.append(
            f"quantization {spec.quantization!r} cannot run on {hardware.name} (supported: {known})"
        )
    if spec.block_size is not None and spec.block_size % hardware.block_size_multiple:
        reasons.append(
            f"block_size {spec.block_size} must be a multiple of {hardware.block_size_multiple} "
            f"on {hardware.name}"
        )

    seqs = spec.max_num_seqs or hardware.default_max_num_seqs
    batched = spec.max_num_batched_tokens
    if spec.max_num_seqs is not None or batched is not None:
        budget = batched if batched is not None else hardware.default_max_num_batched_tokens
        if budget < seqs:
            reasons.append(f"max_num_batched_tokens ({budget}) must be >= max_num_seqs ({seqs})")
    if (
        spec.enable_chunked_prefill is False
        and batched is not None
        and spec.max_model_len is not None
        and batched < spec.max_model_len
    ):
        reasons.append(
            f"with chunked prefill off, max_num_batched_tokens ({batched}) must be >= max_model_len "
            f"({spec.max_model_len}): a prompt must fit in one step"
        )

    if spec.kv_cache_space_gib is not None:
        if hardware.is_cpu:
            total = replicas * spec.kv_cache_space_gib
            if total >= hardware.memory_gib:
                reasons.append(
                    f"{replicas} replicas x kv_cache_space_gib {spec.kv_cache_space_gib:g} = {total:g} GiB "
                    f"does not fit in {hardware.memory_gib:g} GiB of memory"
                )
        elif spec.kv_cache_space_gib >= hardware.memory_gib:
            reasons.append(
                f"kv_cache_space_gib {spec.kv_cache_space_gib:g} does not fit in the "
                f"{hardware.memory_gib:g} GiB of one {hardware.name} device"
            )

    if spec.speculative is not None and spec.speculative.draft_model:
        draft = spec.speculative.draft_model
        if not path_exists(draft):
            reasons.append(f"speculative draft_model {draft!r} is not a local path (nothing is downloaded)")

    if spec.kernels is not None and spec.kernels not in hardware.kernels:
        offered = ", ".join(sorted(hardware.kernels))
        reasons.append(f"kernels {spec.kernels!r} are not available on {hardware.name} (it offers {offered})")
    return reasons


def validate(
    spec: EngineSpec,
    hardware: HardwareProfile,
    *,
    path_exists: Callable[[str], bool] = os.path.exists,
) -> None:
    """Raise `KnobRefused` with every reason `spec` cannot run on `hardware` as a vLLM engine
    (llama.cpp's knobs set: one line each); return if it can."""
    reasons = foreign_knobs(spec, VLLM_KNOBS) + refuse_reasons(spec, hardware, path_exists=path_exists)
    if reasons:
        raise KnobRefused(reasons, hardware=hardware.name)


def _flag(name: str, on: bool) -> str:
    """vLLM's boolean flag pair: `--name` or `--no-name`."""
    return f"--{name}" if on else f"--no-{name}"
