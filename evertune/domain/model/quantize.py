"""An int8 W8A8 copy of a model folder, in the compressed-tensors format vLLM serves as it is.

`make_int8_w8a8(base, out)` writes an evertune model folder whose projection matrices (every
`model.layers.*.*_proj.weight`: attention q/k/v/o, MLP gate/up/down) are int8 with one float32
scale per output channel (`*_proj.weight_scale`, shape `[out, 1]`), and whose `config.json` is the
base's plus a `quantization_config` that tells vLLM to quantize the activations too: each token's
input to a projection to int8 at run time (dynamic, per token, symmetric). That is the scheme
llm-compressor calls W8A8 int8 (`int-quantized` format); vLLM reads it as `CompressedTensorsW8A8Int8`
(`_is_dynamic_token_w8a8`). The embeddings, the norms and the output head (tied or not; `lm_head`
is in the config's `ignore` list) are the base's tensors as they are, in the base's dtype.

The weight math (`quantize_rows`) is round to nearest: per output row, scale = max|w| / 127 and
q = round(w / scale) (ties to even), so q is in [-127, 127] and |w - q x scale| <= scale / 2. A row
of exact zeros (the random-weight models' reserved channel: row 0 of `o_proj` and `down_proj`)
gets scale 1 and q = 0: any scale reproduces it exactly, and 0 would make 0/0.

Same conventions as the planted changes (`variants.py`): the base's generation config and tokenizer
files byte for byte, a new `model.safetensors` and `config.json`, and a marker written last with the
SHA-256 of every file. The marker's `size` is `<base size>+int8-w8a8`, so `make_model` never takes
the copy for its base, and a `quantization` entry records the scheme and the base's weights
(`base_weights_sha256`). Deterministic (the same base gives byte-identical files), idempotent and
safe to race (built in a temporary sibling under a lock, moved into place); a base that is not an
evertune folder, or already quantized, and a non-empty `out` that is not an evertune model are
refused with one line.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evertune.domain.model.folder import MARKER, MODEL_FILES, locked, read_info, replacing
from evertune.errors import FailedPrecondition
from evertune.infra.file_hash import sha256_of

if TYPE_CHECKING:
    import torch

#: The weights file of a model folder.
WEIGHTS = "model.safetensors"
#: The scheme's short name: part of the copy's size (`smollm2-135m+int8-w8a8`).
SCHEME = "int8-w8a8"
#: The largest int8 magnitude a symmetric scale maps to (-128 is never used).
QMAX = 127
#: The compressed-tensors format of int8 weights stored as int8 (what llm-compressor writes for W8A8
#: int8; vLLM 0.32 treats it and `naive-quantized` alike: both are activation-quantization formats).
FORMAT = "int-quantized"


def quantization_config() -> dict[str, Any]:
    """The `quantization_config` of `config.json`: W8A8 int8, per-channel symmetric weights, dynamic
    per-token symmetric activations, every Linear but the output head."""

    def args(strategy: str, dynamic: bool) -> dict[str, Any]:
        return {
            "actorder": None,
            "block_structure": None,
            "dynamic": dynamic,
            "group_size": None,
            "num_bits": 8,
            "observer": None if dynamic else "minmax",
            "observer_kwargs": {},
            "strategy": strategy,
            "symmetric": True,
            "type": "int",
        }

    return {
        "config_groups": {
            "group_0": {
                "input_activations": args("token", dynamic=True),
                "output_activations": None,
                "targets": ["Linear"],
                "weights": args("channel", dynamic=False),
            }
        },
        "format": FORMAT,
        "ignore": ["lm_head"],
        "kv_cache_scheme": None,
        "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
    }


def is_projection(name: str, ndim: int) -> bool:
    """Whether the tensor `name` (of `ndim` dimensions) is a projection matrix the scheme quantizes."""
    return name.startswith("model.layers.") and name.endswith("_proj.weight") and ndim == 2


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`weight` ([out, in], any float dtype) as int8 values and float32 scales of shape [out, 1],
    one per output row: scale = max|w| / 127, q = round(w / scale) (to nearest, ties to even).
    An all-zero row gets scale 1. Pure: the same tensor gives the same result."""
    import torch

    if weight.ndim != 2 or not weight.is_floating_point():
        raise ValueError(f"expected a 2-D float matrix, got {tuple(weight.shape)} {weight.dtype}")
    values = weight.float()
    peak = values.abs().amax(dim=1, keepdim=True)
    scale = torch.where(peak > 0, peak / QMAX, torch.ones_like(peak))
    q = torch.round(values / scale).clamp_(-QMAX, QMAX).to(torch.int8)
    return q, scale


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The float32 matrix the int8 values and per-row scales stand for (q x scale)."""
    return q.float() * scale


def quantized_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`weights` (tensor name -> tensor) with every projection matrix as int8 and its
    `<name>_scale` (float32, [out, 1]) added; every other tensor as it is."""
    out: dict[str, torch.Tensor] = {}
    for name in sorted(weights):
        tensor = weights[name]
        if is_projection(name, tensor.ndim):
            out[name], out[f"{name}_scale"] = quantize_rows(tensor)
        else:
            out[name] = tensor
    return out


def quantized_size(base_size: str) -> str:
    """The `size` a quantized copy's marker carries: `<base size>+int8-w8a8`."""
    return f"{base_size}+{SCHEME}"


def make_int8_w8a8(base: Path, out: Path) -> Path:
    """Write the int8 W8A8 copy of the model folder `base` at `out` and return `out` (see the module
    doc; `read_info(out)` is its marker). `base` must be a complete evertune model folder that is
    not quantized already (`FailedPrecondition`)."""
    from safetensors.torch import load_file, save_file

    base = base.expanduser().absolute()
    out = out.expanduser().absolute()
    info = read_info(base)
    if info is None:
        raise FailedPrecondition(f"{base} is not an evertune model folder (no readable {MARKER})")
    config = json.loads((base / "config.json").read_text())
    if "quantization_config" in config or _quantization_of(base):
        raise FailedPrecondition(f"{base} is quantized already; quantize its unquantized base instead")
    base_sha = info.files.get(WEIGHTS, "")
    size = quantized_size(info.size)
    with locked(out):
        if out.exists() and not out.is_dir():
            raise FailedPrecondition(f"{out} is a file, not a model folder")
        existing = read_info(out) if out.is_dir() else None
        if (
            existing is not None
            and existing.size == size
            and _quantization_of(out).get("base_weights_sha256") == base_sha
        ):
            return out
        if existing is None and out.is_dir() and any(out.iterdir()):
            raise FailedPrecondition(f"{out} is not empty and not an evertune model; refusing to write there")
        with replacing(out) as building:
            weights = quantized_weights(load_file(str(base / WEIGHTS)))
            if not any(name.endswith("_proj.weight_scale") for name in weights):
                raise FailedPrecondition(f"{base} has no projection matrices (model.layers.*_proj.weight)")
            config["quantization_config"] = quantization_config()
            (building / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
            for name in MODEL_FILES:
                if name not in ("config.json", WEIGHTS):
                    shutil.copyfile(base / name, building / name)
            save_file(weights, str(building / WEIGHTS), metadata={"format": "pt"})
            (building / WEIGHTS).chmod(0o644)
            marker = asdict(info) | {
                "size": size,
                "files": {name: sha256_of(building / name) for name in MODEL_FILES},
                "quantization": {
                    "scheme": SCHEME,
                    "format": f"compressed-tensors {FORMAT}",
                    "weights": "int8, symmetric, one float32 scale per output channel, round to nearest",
                    "activations": "int8, symmetric, dynamic per token",
                    "quantized": "model.layers.*_proj.weight",
                    "base_weights_sha256": base_sha,
                },
            }
            (building / MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
    return out


def _quantization_of(folder: Path) -> dict[str, Any]:
    """The `quantization` entry of a folder's marker ({} when it has none)."""
    try:
        entry = json.loads((folder / MARKER).read_text())["quantization"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return entry if isinstance(entry, dict) else {}
