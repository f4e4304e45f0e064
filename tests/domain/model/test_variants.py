"""Planted changes to a model folder (`evertune.domain.model.variants`): deterministic, a valid
evertune folder, the perturbation of the size asked, refusals in one line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from evertune.domain.model import MARKER, make_model, read_info
from evertune.domain.model.folder import MODEL_FILES
from evertune.domain.model.variants import BrokenScale, WeightNoise, changed_weights, make_variant
from evertune.errors import FailedPrecondition, InvalidArgument


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_noise_variant_is_a_deterministic_evertune_folder_beside_its_base(
    tiny_model: Path, tmp_path: Path
) -> None:
    noise = WeightNoise(relative=0.05, seed=1)
    a = make_variant(tiny_model, tmp_path / "a", noise)
    b = make_variant(tiny_model, tmp_path / "b", noise)
    for name in (*MODEL_FILES, MARKER):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    # Same config and tokenizer as the base, other weights; the marker lists every file's SHA-256.
    info = read_info(a)
    base = read_info(tiny_model)
    assert info is not None and base is not None
    assert info.size == "tiny+noise0.05s1" and info.dtype == base.dtype and info.parameters == base.parameters
    assert {name: _sha(a / name) for name in MODEL_FILES} == info.files
    assert {n: h for n, h in info.files.items() if n != "model.safetensors"} == {
        n: h for n, h in base.files.items() if n != "model.safetensors"
    }
    assert info.files["model.safetensors"] != base.files["model.safetensors"]
    variant = json.loads((a / MARKER).read_text())["variant"]
    assert variant == {
        "kind": "WeightNoise", "relative": 0.05, "seed": 1,
        "base_weights_sha256": base.files["model.safetensors"],
    }  # fmt: skip
    # Idempotent; another seed is another variant; the base is never taken for a variant.
    before = (a / "model.safetensors").stat().st_mtime_ns
    assert make_variant(tiny_model, a, noise) == a and (a / "model.safetensors").stat().st_mtime_ns == before
    other = make_variant(tiny_model, tmp_path / "c", WeightNoise(relative=0.05, seed=2))
    assert _sha(other / "model.safetensors") != info.files["model.safetensors"]
    make_model(a, size="tiny", seed=0)  # a variant is "another size": make_model replaces it
    assert read_info(a) == base


def test_noise_has_the_relative_size_asked_on_every_projection_and_nothing_else(tiny_model: Path) -> None:
    weights = load_file(str(tiny_model / "model.safetensors"))
    for relative in (0.02, 0.3):
        noisy = changed_weights(weights, WeightNoise(relative=relative, seed=3))
        assert noisy.keys() == weights.keys()
        for name, tensor in weights.items():
            after = noisy[name]
            assert after.dtype == tensor.dtype and after.shape == tensor.shape
            if not name.endswith("_proj.weight"):
                assert torch.equal(after, tensor), name  # embeddings, head, norms untouched
                continue
            before = tensor.float()
            size = float((after.float() - before).norm() / before.norm())
            # bf16 storage rounds each value by up to 2^-9 of itself: a little slack at 2%.
            assert abs(size - relative) < 0.05 * relative + 0.002, (name, size)
            # An exact zero is structure (the random models' reserved channel), not a weight.
            assert torch.equal(after.float()[before == 0], before[before == 0]), name
    # The same weights and change: the same noise.
    again = changed_weights(weights, WeightNoise(relative=0.02, seed=3))
    assert all(torch.equal(again[n], t) for n, t in changed_weights(weights, WeightNoise(0.02, 3)).items())


def test_a_broken_scale_changes_one_projection_by_its_factor(tiny_model: Path, tmp_path: Path) -> None:
    change = BrokenScale(layer=2, projection="mlp.down_proj", factor=4.0)
    out = make_variant(tiny_model, tmp_path / "scaled", change)
    info = read_info(out)
    assert info is not None and info.size == "tiny+scale-l2-down_proj-x4"
    base = load_file(str(tiny_model / "model.safetensors"))
    scaled = load_file(str(out / "model.safetensors"))
    changed = [n for n in base if not torch.equal(base[n], scaled[n])]
    assert changed == ["model.layers.2.mlp.down_proj.weight"]
    # x4 is exact in bf16 (a power of two).
    assert torch.equal(scaled[changed[0]].float(), base[changed[0]].float() * 4)


def test_variants_are_refused_in_one_line(tiny_model: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="noise must be within"):
        make_variant(tiny_model, tmp_path / "x", WeightNoise(relative=0.0))
    with pytest.raises(InvalidArgument, match="unknown projection"):
        make_variant(tiny_model, tmp_path / "x", BrokenScale(layer=0, projection="mlp.fc"))
    with pytest.raises(InvalidArgument, match=r"no tensor model\.layers\.99"):
        make_variant(tiny_model, tmp_path / "x", BrokenScale(layer=99))
    with pytest.raises(FailedPrecondition, match="not an evertune model folder"):
        make_variant(tmp_path, tmp_path / "x", WeightNoise(relative=0.1))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FailedPrecondition, match="not empty and not an evertune model"):
        make_variant(tiny_model, foreign, WeightNoise(relative=0.1))
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    # Nothing half-written beside the refused folders.
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".x.new") or p.name == "x"]
