"""Engine spec -> llama.cpp `llama-server` command line, and the refusal rules (pure, no I/O but
the injected check that the model exists).

What evertune's knobs mean on llama.cpp (docs/engines.md has the table):

- `max_num_seqs` -> `--parallel`: slots, the requests decoded together (llama.cpp's default,
  "auto", is 4 slots sharing one KV pool of the model's training context);
- `max_model_len` -> `--kv-unified-per-slot`: the context of one slot, the KV pool then sized to
  slots x that. Unset, llama.cpp splits the model's training context between explicit slots
  (8,192 tokens over `--parallel 8` leaves 1,024 a request): set it with `max_num_seqs`;
- `max_num_batched_tokens` -> `--batch-size` (the logical batch); `micro_batch_tokens` ->
  `--ubatch-size` (tokens computed in one pass);
- `enable_prefix_caching` -> `--cache-prompt` / `--no-cache-prompt` (a slot reuses the prompt
  prefix it last saw; on by default);
- `flash_attention` -> `--flash-attn on|off`; `cache_reuse_tokens` -> `--cache-reuse`;
- `quantization` -> which GGUF file type is served (`GGUF_TYPES`);
- threads follow the cores the engine is given (`--threads`, `--threads-batch`).

A knob left at None gives no argument: llama.cpp's own default. llama-server also reads
`LLAMA_ARG_*` variables; the engine's environment drops them (`KNOB_ENV_PREFIX`), so an unset knob
means the default, not whatever the parent had set.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.hardware import HardwareProfile

#: The GGUF file types evertune serves on llama.cpp (`EngineSpec.quantization`), lower case as
#: `llama-quantize` names them: float, 8-bit, and the lower-bit formats the gate must judge.
#: `evertune.domain.model.gguf_formats` makes them (the same list; not imported here: it loads torch).
GGUF_TYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_k_m", "q2_k")
#: llama-server reads its options from variables of this prefix too.
KNOB_ENV_PREFIX = "LLAMA_ARG_"
#: Knobs of `EngineSpec` llama.cpp takes.
LLAMA_CPP_KNOBS = frozenset(
    {
        "max_num_seqs",
        "max_num_batched_tokens",
        "micro_batch_tokens",
        "max_model_len",
        "enable_prefix_caching",
        "flash_attention",
        "cache_reuse_tokens",
        "quantization",
        "replicas",
    }
)


def knob_args(spec: EngineSpec, *, threads: int) -> list[str]:
    """llama-server's argument for every knob the spec sets, and the threads."""
    argv = ["--threads", str(threads), "--threads-batch", str(threads)]
    if spec.max_num_seqs is not None:
        argv += ["--parallel", str(spec.max_num_seqs)]
    if spec.max_model_len is not None:
        argv += ["--kv-unified-per-slot", str(spec.max_model_len)]
    if spec.max_num_batched_tokens is not None:
        argv += ["--batch-size", str(spec.max_num_batched_tokens)]
    if spec.micro_batch_tokens is not None:
        argv += ["--ubatch-size", str(spec.micro_batch_tokens)]
    if spec.flash_attention is not None:
        argv += ["--flash-attn", "on" if spec.flash_attention else "off"]
    if spec.cache_reuse_tokens is not None:
        argv += ["--cache-reuse", str(spec.cache_reuse_tokens)]
    if spec.enable_prefix_caching is not None:
        argv.append("--cache-prompt" if spec.enable_prefix_caching else "--no-cache-prompt")
    return argv


def server_command(
    spec: EngineSpec,
    *,
    binary: str,
    gguf: str,
    host: str,
    port: int,
    threads: int,
    served_model_name: str | None = None,
) -> list[str]:
    """The whole command line of one llama-server for `spec`, serving the GGUF file `gguf`."""
    argv = [binary, "--model", gguf, "--host", host, "--port", str(port), "--metrics", "--no-webui"]
    if served_model_name:
        argv += ["--alias", served_model_name]
    return argv + knob_args(spec, threads=threads)


def refuse_reasons(
    spec: EngineSpec,
    hardware: HardwareProfile,
    *,
    path_exists: Callable[[str], bool] = os.path.exists,
) -> list[str]:
    """Why llama.cpp cannot serve `spec` on `hardware` (one line each); empty when it can. The
    knobs it does not take at all are the registry's to refuse."""
    reasons: list[str] = []
    if spec.kind != "llama.cpp":
        reasons.append(f"engine kind {spec.kind!r} is not 'llama.cpp'")
    if not hardware.is_cpu:
        reasons.append(f"engine 'llama.cpp' is built for CPU only here, not {hardware.name!r}")
    if spec.quantization is not None and spec.quantization not in GGUF_TYPES:
        reasons.append(
            f"quantization {spec.quantization!r} is not a GGUF file type engine 'llama.cpp' serves"
            f" ({', '.join(GGUF_TYPES)})"
        )
    if spec.replica_count > hardware.cores:
        reasons.append(
            f"{spec.replica_count} replicas need {spec.replica_count} cores,"
            f" this machine has {hardware.cores}"
        )
    batch = spec.max_num_batched_tokens
    if spec.cache_reuse_tokens and spec.enable_prefix_caching is False:
        reasons.append("cache_reuse_tokens needs the prompt cache (enable_prefix_caching)")
    if batch is not None and spec.micro_batch_tokens is not None and spec.micro_batch_tokens > batch:
        reasons.append(
            f"micro_batch_tokens {spec.micro_batch_tokens} is more than max_num_batched_tokens {batch}"
        )
    if not path_exists(spec.model):
        reasons.append(f"model {spec.model!r} does not exist")
    return reasons
