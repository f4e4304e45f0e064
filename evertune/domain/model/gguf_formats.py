"""The GGUF file of a model in a given file type, made once and kept: what the llama.cpp engine
serves (`ensure_gguf`).

A model is an evertune model folder (or any plain Llama folder) or a `.gguf` file:

- a folder is written as GGUF by `gguf_export.export_gguf` for the file types it writes (F32, F16,
  BF16, Q8_0, Q4_0, Q4_1); the lower-bit types the `gguf` package cannot write (Q4_K_M, Q2_K) are
  made by the `llama-quantize` of the same llama.cpp build from the folder's F32 file. Unset, the
  file type is the folder's own dtype (bf16, f16 or f32): nothing rounded that was not already.
- a `.gguf` file is served as it is; another file type is made from it by `llama-quantize
  --allow-requantize` (through its dequantized values: a lossy step on top of the file's own).

Files are kept beside the model, `<folder>.gguf/<type>-<weights>-v<N>.gguf` (`<file>.<type>.gguf`
for a GGUF), where `<weights>` is the first 12 hex digits of the SHA-256 of the folder's weights
and N is `EXPORT_VERSION`: a changed model or exporter makes a new file, never a stale one. Each is
made under a lock and moved into place, so two engines starting at once make it once.

So every format of the real model derives from the weights of its shipped Q4_1 GGUF (the folder
evertune made from it): Q8_0 and F16 sit close to the folder, the lower-bit ones are what the
correctness gate is for.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from evertune.domain.model.folder import locked, read_info
from evertune.domain.model.gguf_export import FORMATS, export_gguf
from evertune.errors import FailedPrecondition, InvalidArgument
from evertune.infra.file_hash import sha256_of

#: Bumped when `export_gguf` writes different bytes for the same folder: old files are not reused.
EXPORT_VERSION = 1
#: File types made by `llama-quantize` (llama.cpp's names), from the F32 export.
QUANTIZED_BY_LLAMA_CPP = ("Q4_K_M", "Q2_K")
#: The folder's dtype -> the file type that stores it exactly.
_EXACT = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}
#: Longest a `llama-quantize` run may take, seconds (about 5 s for SmolLM2-135M here).
QUANTIZE_TIMEOUT_S = 600.0


def file_types() -> tuple[str, ...]:
    """Every file type `ensure_gguf` makes, lower case as `EngineSpec.quantization` names them."""
    return tuple(name.lower() for name in (*FORMATS, *QUANTIZED_BY_LLAMA_CPP))


def ensure_gguf(model: Path, file_type: str | None, *, quantize: Path | None) -> Path:
    """The GGUF file of `model` in `file_type` (see the module doc), made if it is not there yet.

    `quantize`: the `llama-quantize` program (None where llama.cpp is not built: the file types it
    makes are then refused with one line). Raises `InvalidArgument` for an unknown file type or a
    model that is neither a folder nor a `.gguf` file.
    """
    wanted = file_type.upper() if file_type else None
    if wanted is not None and wanted.lower() not in file_types():
        raise InvalidArgument(
            f"quantization {file_type!r} is not a GGUF file type ({', '.join(file_types())})"
        )
    if model.is_file() and model.suffix == ".gguf":
        if wanted is None:
            return model
        return _quantized(model, model.with_name(f"{model.stem}.{wanted.lower()}.gguf"), wanted, quantize)
    if not (model / "config.json").is_file():
        raise InvalidArgument(f"model {str(model)!r} is neither a model folder nor a .gguf file")
    info = read_info(model)
    if wanted is None:
        wanted = _EXACT.get(info.dtype if info else "bfloat16", "BF16")
    weights = info.files.get("model.safetensors") if info else None
    digest = (weights or sha256_of(model / "model.safetensors"))[:12]
    out = model.with_name(f"{model.name}.gguf") / f"{wanted.lower()}-{digest}-v{EXPORT_VERSION}.gguf"
    if wanted in FORMATS:
        # export_gguf writes a temporary file and renames it: a file there is whole
        return out if out.is_file() else export_gguf(model, out, file_type=wanted)
    return _quantized(ensure_gguf(model, "f32", quantize=quantize), out, wanted, quantize)


def _quantized(source: Path, out: Path, file_type: str, quantize: Path | None) -> Path:
    """`source` requantized to `file_type` by llama.cpp's quantizer, at `out`."""
    if quantize is None:
        raise FailedPrecondition(
            f"GGUF file type {file_type.lower()} is made by llama.cpp's llama-quantize, which is not"
            " built on this machine: run `make engines`"
        )
    with locked(out):
        if out.is_file():
            return out
        temp = out.with_name(f".{out.name}.tmp")
        argv = [str(quantize), "--allow-requantize", str(source), str(temp), file_type]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=QUANTIZE_TIMEOUT_S, check=False)
        if done.returncode != 0:
            temp.unlink(missing_ok=True)
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise FailedPrecondition(f"llama-quantize to {file_type} failed ({done.returncode}): {tail[0]}")
        temp.replace(out)
    return out
