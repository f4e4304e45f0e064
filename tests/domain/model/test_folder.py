"""make_model: the folder's files, determinism, idempotence, refusals."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evertune.domain.model import (
    FORMAT_VERSION,
    MARKER,
    SIZES,
    default_model_dir,
    ensure_model,
    load_tokenizer,
    make_model,
    read_info,
)
from evertune.domain.model.folder import MODEL_FILES
from evertune.errors import FailedPrecondition, InvalidArgument


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_folder_holds_a_llama_model(tiny_model: Path) -> None:
    assert sorted(p.name for p in tiny_model.iterdir()) == sorted([*MODEL_FILES, MARKER])
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["max_position_embeddings"] >= 8192
    assert config["vocab_size"] == load_tokenizer(tiny_model).get_vocab_size()
    assert config["hidden_size"] == SIZES["tiny"].hidden
    tokenizer_config = json.loads((tiny_model / "tokenizer_config.json").read_text())
    assert "chat_template" in tokenizer_config
    info = read_info(tiny_model)
    assert info is not None
    assert (info.version, info.size, info.seed) == (FORMAT_VERSION, "tiny", 0)
    assert info.files == {name: h for name, h in _hashes(tiny_model).items() if name != MARKER}


def test_same_seed_same_bytes_other_seed_other_weights(tiny_model: Path, tmp_path: Path) -> None:
    again = make_model(tmp_path / "again", size="tiny", seed=0)
    other = make_model(tmp_path / "other", size="tiny", seed=1)
    assert _hashes(again) == _hashes(tiny_model)
    differ = {name for name, h in _hashes(other).items() if _hashes(tiny_model)[name] != h}
    # One tokenizer for every evertune model: only the weights and the marker depend on the seed.
    assert differ == {"model.safetensors", MARKER}


def test_bytes_do_not_depend_on_the_process(tiny_model: Path, tmp_path: Path) -> None:
    """Another interpreter with another hash seed writes the same bytes (tokenizer training included)."""
    out = tmp_path / "elsewhere"
    code = (
        "from pathlib import Path; from evertune.domain.model import make_model; "
        f"make_model(Path({str(out)!r}))"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
    assert _hashes(out) == _hashes(tiny_model)


def test_small_is_bigger(tmp_path: Path) -> None:
    small = make_model(tmp_path / "small", size="small", seed=3)
    info = read_info(small)
    assert info is not None and info.size == "small"
    assert info.parameters == SIZES["small"].parameters() > SIZES["tiny"].parameters()
    assert json.loads((small / "config.json").read_text())["num_hidden_layers"] == SIZES["small"].layers


def test_idempotent(tiny_model: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in tiny_model.iterdir()}
    started = time.monotonic()
    assert make_model(tiny_model, size="tiny", seed=0) == tiny_model
    assert time.monotonic() - started < 0.5
    assert {p.name: p.stat().st_mtime_ns for p in tiny_model.iterdir()} == before


def test_replaces_an_evertune_model_of_another_seed(tmp_path: Path) -> None:
    out = make_model(tmp_path / "m", seed=1)
    make_model(out, seed=2)
    info = read_info(out)
    assert info is not None and info.seed == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".m.")] == [".m.lock"]


def test_refuses_a_foreign_folder(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FailedPrecondition, match="not an evertune model") as err:
        make_model(tmp_path)
    assert "\n" not in str(err.value)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_refuses_a_file_and_bad_arguments(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(FailedPrecondition, match="is a file"):
        make_model(tmp_path / "file")
    with pytest.raises(InvalidArgument, match="unknown model size"):
        make_model(tmp_path / "m", size="huge")  # type: ignore[arg-type]
    with pytest.raises(FailedPrecondition, match="seed"):
        make_model(tmp_path / "m", seed=-1)
    assert not (tmp_path / "m").exists()


def test_an_empty_folder_is_fine(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert read_info(make_model(tmp_path / "empty")) is not None


def test_default_dir_and_ensure(tmp_path: Path) -> None:
    assert default_model_dir(tmp_path, "small", 7) == tmp_path / "models" / "evertune-small-s7"
    made = ensure_model(tmp_path, size="tiny", seed=4)
    assert made == default_model_dir(tmp_path, "tiny", 4)
    assert ensure_model(tmp_path, size="tiny", seed=4) == made


def test_a_folder_without_weights_gets_them_in_place_when_asked(tiny_model: Path, tmp_path: Path) -> None:
    """What only tokenizes makes the folder without its weights (no torch); the first maker that
    needs them adds them where the folder is, the same bytes as a folder made whole."""
    light = ensure_model(tmp_path, size="tiny", weights=False)
    lacking = sorted([*(n for n in MODEL_FILES if n != "model.safetensors"), MARKER])
    assert sorted(p.name for p in light.iterdir()) == lacking
    info = read_info(light)
    assert info is not None and "model.safetensors" not in info.files
    assert load_tokenizer(light).get_vocab_size() == load_tokenizer(tiny_model).get_vocab_size()
    inode = light.stat().st_ino
    assert ensure_model(tmp_path, size="tiny") == light and light.stat().st_ino == inode
    assert _hashes(light) == _hashes(tiny_model)
    assert ensure_model(tmp_path, size="tiny", weights=False) == light  # whole: kept as it is
    assert _hashes(light) == _hashes(tiny_model)
