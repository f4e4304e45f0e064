"""Planted changes to a model folder: copies whose weights are wrong in a known way, so the
correctness gate can be measured against changes that must fail (`evertune bench gate`, the
runner's engine tests).

`make_variant(base, out, change)` writes an evertune model folder beside any other: the base's
`config.json`, generation config and tokenizer files byte for byte, a new `model.safetensors`
(same tensor names, shapes and dtype as the base's), and its own marker (`evertune-model.json`)
with the SHA-256 of every file, written last. The marker's `size` is `<base size>+<change name>`
(`smollm2-135m+noise0.02s1`), so `make_model` never takes a variant for its base, and a `variant`
entry records the change and the base's weights (`base_weights_sha256`). Deterministic: the same
base and change give byte-identical files. Idempotent and safe to race as `make_model` is (built in
a temporary sibling under a lock, moved into place); a non-empty folder that is not an evertune
model is refused with one line.

The changes (`WeightNoise`, `BrokenScale`):

- `WeightNoise(relative, seed)`: seeded Gaussian noise on every projection matrix of every layer
  (`*_proj.weight`: attention q/k/v/o, MLP gate/up/down; embeddings, output head and norms are
  left alone), of standard deviation `relative` x the root mean square of the tensor's nonzero
  entries, added to the nonzero entries (an exact zero is structure, such as the random-weight
  models' reserved channel, not a weight to perturb). So ||W' - W|| / ||W|| is `relative` per
  tensor, up to the storage dtype's rounding. Each tensor draws from its own generator, seeded by
  (seed, tensor name), so the noise does not depend on the order of tensors. A model whose weights
  came through 4-bit quantization already carries rounding of about 0.1 x RMS; what noise of
  a few percent does to greedy answers is what `bench gate` measures.
- `BrokenScale(layer, projection, factor)`: one layer's projection matrix times `factor`: what a
  per-tensor quantization scale read wrong gives (a scale off by a power of two: an exponent
  read one off; a scale read from the wrong tensor). Every other tensor is the base's, bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evertune.domain.model.folder import MARKER, MODEL_FILES, ModelInfo, locked, read_info, replacing
from evertune.errors import FailedPrecondition, InvalidArgument
from evertune.infra.file_hash import sha256_of

#: The weights file of a model folder (the one file a variant rewrites).
WEIGHTS = "model.safetensors"
#: Projections a `BrokenScale` may name (the `<name>.weight` of a Llama layer).
PROJECTIONS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)


@dataclass(frozen=True)
class WeightNoise:
    """Gaussian noise of `relative` x each projection's RMS on every projection (see the module doc)."""

    relative: float  #: noise standard deviation / the tensor's RMS (0.02: 2%)
    seed: int = 0  #: seed of the noise

    @property
    def name(self) -> str:
        """Short name, part of the variant's size (`noise0.02s1`)."""
        return f"noise{self.relative:g}s{self.seed}"


@dataclass(frozen=True)
class BrokenScale:
    """Layer `layer`'s `projection` times `factor` (a quantization scale read wrong)."""

    layer: int  #: layer index
    projection: str = "mlp.down_proj"  #: one of `PROJECTIONS`
    factor: float = 4.0  #: the wrong factor

    @property
    def name(self) -> str:
        """Short name, part of the variant's size (`scale-l12-down_proj-x4`)."""
        return f"scale-l{self.layer}-{self.projection.rsplit('.', 1)[-1]}-x{self.factor:g}"

    @property
    def tensor(self) -> str:
        """The tensor it changes."""
        return f"model.layers.{self.layer}.{self.projection}.weight"


Change = WeightNoise | BrokenScale


def _check(change: Change) -> None:
    if isinstance(change, WeightNoise):
        if not (0.0 < change.relative <= 10.0):
            raise InvalidArgument(
                f"noise must be within (0, 10] of the weights' RMS, not {change.relative:g}"
            )
        if change.seed < 0:
            raise InvalidArgument(f"noise seed must be >= 0, not {change.seed}")
    elif isinstance(change, BrokenScale):
        if change.projection not in PROJECTIONS:
            raise InvalidArgument(
                f"unknown projection {change.projection!r}; one of: {', '.join(PROJECTIONS)}"
            )
        if change.layer < 0 or not (change.factor == change.factor) or change.factor in (0.0, 1.0):
            raise InvalidArgument(
                f"a broken scale needs a layer >= 0 and a factor other than 0 and 1: {change}"
            )
    else:
        raise InvalidArgument(f"unknown model change {change!r}")


def _tensor_seed(seed: int, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") & (2**63 - 1)


def changed_weights(weights: dict[str, Any], change: Change) -> dict[str, Any]:
    """`weights` (tensor name -> torch tensor) with `change` applied; the others as they are.

    Pure in its inputs: the same weights and change give the same tensors."""
    import torch

    _check(change)
    out = dict(weights)
    if isinstance(change, BrokenScale):
        if change.tensor not in weights:
            raise InvalidArgument(
                f"the model has no tensor {change.tensor} (layer {change.layer} out of range?)"
            )
        tensor = weights[change.tensor]
        out[change.tensor] = (tensor.float() * change.factor).to(tensor.dtype)
        return out
    for name in sorted(weights):
        tensor = weights[name]
        if not (name.startswith("model.layers.") and name.endswith("_proj.weight") and tensor.ndim == 2):
            continue
        values = tensor.float()
        nonzero = values != 0
        if not bool(nonzero.any()):
            continue
        rms = values[nonzero].pow(2).mean().sqrt()
        generator = torch.Generator(device="cpu").manual_seed(_tensor_seed(change.seed, name))
        noise = torch.randn(values.shape, generator=generator, dtype=torch.float32)
        out[name] = (values + noise * (change.relative * rms) * nonzero).to(tensor.dtype)
    return out


def variant_size(base: ModelInfo, change: Change) -> str:
    """The `size` a variant's marker carries: `<base size>+<change name>`."""
    return f"{base.size}+{change.name}"


def make_variant(base: Path, out: Path, change: Change) -> Path:
    """Write the variant of the model folder `base` with `change` at `out` and return `out` (see
    the module doc). `base` must be a complete evertune model folder (`FailedPrecondition`)."""
    from safetensors.torch import load_file, save_file

    _check(change)
    base = base.expanduser().absolute()
    out = out.expanduser().absolute()
    info = read_info(base)
    if info is None:
        raise FailedPrecondition(f"{base} is not an evertune model folder (no readable {MARKER})")
    base_sha = info.files.get(WEIGHTS, "")
    size = variant_size(info, change)
    with locked(out):
        if out.exists() and not out.is_dir():
            raise FailedPrecondition(f"{out} is a file, not a model folder")
        existing = read_info(out) if out.is_dir() else None
        if existing is not None and existing.size == size and _variant_of(out) == base_sha:
            return out
        if existing is None and out.is_dir() and any(out.iterdir()):
            raise FailedPrecondition(f"{out} is not empty and not an evertune model; refusing to write there")
        with replacing(out) as building:
            for name in MODEL_FILES:
                if name != WEIGHTS:
                    shutil.copyfile(base / name, building / name)
            weights = changed_weights(load_file(str(base / WEIGHTS)), change)
            save_file(weights, str(building / WEIGHTS), metadata={"format": "pt"})
            (building / WEIGHTS).chmod(0o644)
            marker = asdict(info) | {
                "size": size,
                "files": {name: sha256_of(building / name) for name in MODEL_FILES},
                "variant": {"kind": type(change).__name__, **asdict(change), "base_weights_sha256": base_sha},
            }
            (building / MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
    return out


def _variant_of(folder: Path) -> str:
    """The base weights' SHA-256 a variant's marker names ("" when it is not a variant)."""
    try:
        return str(json.loads((folder / MARKER).read_text())["variant"]["base_weights_sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""
