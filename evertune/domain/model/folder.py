"""A model folder vLLM serves: `make_model` writes one, `ensure_model` makes it where it is missing.

The folder is a Hugging Face Llama model (`config.json`, `generation_config.json`,
`model.safetensors`, `tokenizer.json`, `tokenizer_config.json`, `special_tokens_map.json`) plus
evertune's marker `evertune-model.json` (size, seed, format version, SHA-256 of every file). The
marker is written last: a folder with a marker is complete.

Writing is safe against crashes and concurrent makers: files are built in a temporary sibling
folder and moved into place under a lock (`flock`) on a sibling lock file.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

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
from evertune.errors import FailedPrecondition

#: Bump when the corpus, tokenizer, config or weight recipe changes: folders of another version are remade.
FORMAT_VERSION = 1
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


@dataclass(frozen=True)
class ModelInfo:
    """What the marker of a model folder says."""

    version: int  #: FORMAT_VERSION it was made with
    size: str  #: "tiny" or "small"
    seed: int  #: seed of the random weights
    parameters: int  #: number of parameters
    files: dict[str, str]  #: file name -> SHA-256 (hex) of its bytes


def default_model_dir(data_dir: Path, size: str = "tiny", seed: int = 0) -> Path:
    """Where the embedded default keeps a model: `<data_dir>/models/evertune-<size>-s<seed>`."""
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
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


@functools.cache
def _tokenizer() -> tuple[str, tuple[int, ...]]:
    """The tokenizer every evertune model shares (trained once per process), serialized, and the
    token ids the model must never generate."""
    tokenizer = train_tokenizer()
    return tokenizer.to_str(pretty=True), tuple(blocked_output_ids(tokenizer))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_json(path: Path, value: dict[str, Any]) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def _write_files(folder: Path, size: Size, seed: int) -> ModelInfo:
    """Every file of the model into `folder` (which exists and is empty), the marker last."""
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
    write_weights(folder / "model.safetensors", shape, seed, blocked)
    info = ModelInfo(
        version=FORMAT_VERSION,
        size=size,
        seed=seed,
        parameters=shape.parameters(),
        files={name: _sha256(folder / name) for name in MODEL_FILES},
    )
    _write_json(folder / MARKER, asdict(info))
    return info


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """An exclusive lock on `<parent>/.<name>.lock`, so two makers of one folder take turns."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with (out.parent / f".{out.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def make_model(out: Path, *, size: Size = "tiny", seed: int = 0) -> Path:
    """Write an evertune Llama model folder at `out` (vLLM serves it as it is) and return `out`.

    Deterministic: the same size and seed give byte-identical files. Idempotent: a folder that
    already holds this size, seed and format version is returned at once. An existing evertune model
    of another size, seed or version is replaced; any other non-empty folder (or a file) is refused
    with `FailedPrecondition`, never touched.
    """
    shape_of(size)  # an unknown size fails before anything is written
    if seed < 0:
        raise FailedPrecondition(f"model seed must be >= 0, got {seed}")
    out = out.expanduser().absolute()
    with _locked(out):
        if out.exists() and not out.is_dir():
            raise FailedPrecondition(f"{out} is a file, not a model folder")
        info = read_info(out) if out.is_dir() else None
        if info is not None and (info.version, info.size, info.seed) == (FORMAT_VERSION, size, seed):
            return out
        if info is None and out.is_dir() and any(out.iterdir()):
            raise FailedPrecondition(f"{out} is not empty and not an evertune model; refusing to write there")
        building = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
        building.chmod(0o755)
        try:
            _write_files(building, size, seed)
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
    return out


def ensure_model(data_dir: Path, *, size: Size = "tiny", seed: int = 0) -> Path:
    """The model folder of `size`/`seed` under `data_dir` (`default_model_dir`), made when missing.

    Synchronous (CPU-bound file writing, about a second for "tiny"); from async code call it with
    `await asyncio.to_thread(ensure_model, data_dir)`.
    """
    return make_model(default_model_dir(data_dir, size, seed), size=size, seed=seed)
