"""The GGUF exporter: round trips through the importer, llama.cpp's tensor types, determinism, refusals."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.torch import load_file
from tokenizers import Tokenizer

from evertune.domain.model.folder import write_imported
from evertune.domain.model.gguf_export import (
    FORMATS,
    export_gguf,
    file_format,
    pre_tokenizer_name,
    tensor_type,
)
from evertune.domain.model.gguf_import import read_gguf
from evertune.domain.model.tokenizer import CHAT_TEMPLATE
from evertune.errors import InvalidArgument
from tests.domain.model.gguf_files import train_tokenizer, write_checkpoint

TEXTS = (
    "the clinic opens at 9:30 and closes at 17:00",
    "please call 555 0142, extension 12; it's urgent!",
    "  two spaces, a tab\tand a newline\n",
    "<|begin|><|user|>\nhello<|end|>\n<|assistant|>\n",
    "café déjà vu ✓ 😀",
)


def _folder_tensors(folder: Path) -> dict[str, np.ndarray]:
    return {name: t.float().numpy() for name, t in load_file(str(folder / "model.safetensors")).items()}


def _types(path: Path) -> dict[str, str]:
    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors}


def test_f32_round_trip_gives_back_the_folder(tiny_model: Path, tokenizer: Tokenizer, tmp_path: Path) -> None:
    out = export_gguf(tiny_model, tmp_path / "tiny.gguf", file_type="F32")
    imported = read_gguf(out)
    expected = _folder_tensors(tiny_model)
    assert not imported.tied_embeddings
    assert sorted(imported.tensors) == sorted(expected)
    for name, values in expected.items():
        # bfloat16 -> float32 is exact; permuting and un-permuting only move rows.
        np.testing.assert_array_equal(imported.tensors[name], values, err_msg=name)
    config = json.loads((tiny_model / "config.json").read_text())
    assert imported.shape.hidden == config["hidden_size"] and imported.shape.vocab == config["vocab_size"]
    assert imported.rms_norm_eps == pytest.approx(config["rms_norm_eps"])
    assert (imported.special.bos_id, imported.special.eos_id, imported.special.pad_id) == (0, 1, 2)
    assert not imported.add_bos
    assert imported.chat_template == CHAT_TEMPLATE
    for text in TEXTS:
        ids = tokenizer.encode(text).ids
        assert imported.tokenizer.encode(text).ids == ids, text
        assert imported.tokenizer.decode(ids, skip_special_tokens=False) == text


def test_the_metadata_is_a_llama_as_llama_cpp_writes_it(tiny_model: Path, tmp_path: Path) -> None:
    reader = gguf.GGUFReader(str(export_gguf(tiny_model, tmp_path / "t.gguf", file_type="Q8_0")))
    meta = {name: field.contents() for name, field in reader.fields.items()}
    assert meta["general.architecture"] == "llama" and meta["general.name"] == "evertune-tiny-s0"
    assert meta["general.file_type"] == gguf.LlamaFileType.MOSTLY_Q8_0
    assert meta["general.quantization_version"] == gguf.GGML_QUANT_VERSION
    shape = {key: meta[f"llama.{key}"] for key in ("block_count", "embedding_length", "feed_forward_length")}
    assert shape == {"block_count": 4, "embedding_length": 256, "feed_forward_length": 768}
    assert (meta["llama.attention.head_count"], meta["llama.attention.head_count_kv"]) == (4, 2)
    assert (meta["llama.context_length"], meta["llama.vocab_size"], meta["llama.rope.dimension_count"]) == (
        8192,
        4096,
        64,
    )
    assert meta["llama.rope.freq_base"] == 500_000.0
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "gpt-2"
    assert meta["tokenizer.ggml.token_type"][:7] == [3, 3, 3, 3, 3, 3, 1]  # the 6 special tokens: control
    assert meta["tokenizer.chat_template"] == CHAT_TEMPLATE
    # Untied: the output head is there, before the embedding (the folder's sorted order).
    assert [t.name for t in reader.tensors[:3]] == [
        "output.weight",
        "token_embd.weight",
        "blk.0.attn_norm.weight",
    ]


def test_q8_0_is_within_the_quantization_bound(tiny_model: Path, tmp_path: Path) -> None:
    out = export_gguf(tiny_model, tmp_path / "tiny.gguf", file_type="Q8_0")
    assert set(_types(out).values()) == {"Q8_0", "F32"}
    imported = read_gguf(out)
    for name, values in _folder_tensors(tiny_model).items():
        got = imported.tensors[name]
        if values.ndim == 1:
            np.testing.assert_array_equal(got, values, err_msg=name)
            continue
        # Per block of 32 along a row: scale d = max|x| / 127 (stored in float16), |x - q d| <= d / 2
        # plus 127 times the scale's float16 rounding.
        blocks = values.reshape(-1, 32)
        d = np.abs(blocks).max(axis=1, keepdims=True) / 127
        bound = d * (0.5 + 127 * 2.0**-11) + 1e-12
        assert (np.abs(got.reshape(-1, 32) - blocks) <= bound).all(), name


def test_q4_formats_keep_the_output_head_in_q8_0(tiny_model: Path, tmp_path: Path) -> None:
    types = _types(export_gguf(tiny_model, tmp_path / "tiny.gguf", file_type="q4_1"))
    assert types["output.weight"] == "Q8_0"  # llama-quantize's Q6_K, which gguf-py cannot write
    assert types["token_embd.weight"] == "Q4_1"  # untied: the embedding is an ordinary matrix
    assert types["blk.3.ffn_down.weight"] == "Q4_1" and types["blk.3.ffn_norm.weight"] == "F32"


def test_a_tied_head_is_left_out_and_a_short_row_falls_back_to_f16(tmp_path: Path) -> None:
    # A SmolLM2-like folder (tied head, digits split one by one) with an MLP width of 40: the
    # down projection's rows (40) are not a whole number of 32-blocks.
    written = write_checkpoint(tmp_path / "m.gguf")
    imported = read_gguf(tmp_path / "m.gguf")
    tensors = {
        name: values[:40] if name.endswith(("gate_proj.weight", "up_proj.weight")) else values
        for name, values in imported.tensors.items()
    }
    tensors = {
        name: np.ascontiguousarray(v[:, :40]) if name.endswith("down_proj.weight") else v
        for name, v in tensors.items()
    }
    narrow = dataclasses.replace(
        imported, shape=dataclasses.replace(imported.shape, intermediate=40), tensors=tensors
    )
    folder = tmp_path / "model"
    folder.mkdir()
    write_imported(folder, narrow, dtype="float32")
    out = export_gguf(folder, tmp_path / "narrow.gguf", file_type="Q8_0")
    types = _types(out)
    assert "output.weight" not in types and types["token_embd.weight"] == "Q8_0"
    assert types["blk.0.ffn_down.weight"] == "F16" and types["blk.0.ffn_up.weight"] == "Q8_0"
    back = read_gguf(out)
    assert back.tied_embeddings and back.shape.intermediate == 40
    np.testing.assert_array_equal(  # F16 of values that came from Q4_1 (f16 scale, 4-bit steps)
        back.tensors["model.layers.1.mlp.down_proj.weight"],
        tensors["model.layers.1.mlp.down_proj.weight"].astype(np.float16).astype(np.float32),
    )
    meta = gguf.GGUFReader(str(out)).fields
    assert meta["tokenizer.ggml.pre"].contents() == "smollm"
    for text in TEXTS:
        assert back.tokenizer.encode(text).ids == written.tokenizer.encode(text).ids, text


def test_tensor_types_follow_llama_cpp() -> None:
    q8, q4, f32 = FORMATS["Q8_0"], FORMATS["Q4_0"], FORMATS["F32"]
    assert tensor_type(q8, "blk.0.attn_norm.weight", (256,), tied=False) == "F32"
    assert tensor_type(q8, "blk.0.ffn_down.weight", (256, 768), tied=False) == "Q8_0"
    assert tensor_type(q8, "blk.0.ffn_down.weight", (256, 40), tied=False) == "F16"
    assert tensor_type(q4, "blk.0.attn_q.weight", (576, 576), tied=False) == "Q4_0"
    assert tensor_type(q4, "output.weight", (4096, 256), tied=False) == "Q8_0"
    assert tensor_type(q4, "token_embd.weight", (4096, 256), tied=False) == "Q4_0"
    assert tensor_type(q4, "token_embd.weight", (49152, 576), tied=True) == "Q8_0"
    assert tensor_type(q4, "token_embd.weight", (49152, 570), tied=True) == "F16"
    assert tensor_type(f32, "blk.0.ffn_down.weight", (256, 40), tied=False) == "F32"
    assert file_format("bf16") is FORMATS["BF16"]


def test_pre_tokenizer_names() -> None:
    assert pre_tokenizer_name(json.loads(train_tokenizer(300).to_str())) == "smollm"
    other = json.loads(train_tokenizer(300).to_str())
    other["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}
    with pytest.raises(InvalidArgument, match=r"has no llama\.cpp name"):
        pre_tokenizer_name(other)


@pytest.mark.parametrize("file_type", ["F16", "BF16", "Q4_0"])
def test_the_same_folder_and_format_give_the_same_bytes(
    tiny_model: Path, tmp_path: Path, file_type: str
) -> None:
    first = export_gguf(tiny_model, tmp_path / "a" / "m.gguf", file_type=file_type).read_bytes()
    again = export_gguf(tiny_model, tmp_path / "b" / "m.gguf", file_type=file_type)
    assert again.read_bytes() == first
    export_gguf(tiny_model, again, file_type=file_type)  # over an existing file: replaced
    assert again.read_bytes() == first
    assert sorted(p.name for p in again.parent.iterdir()) == [".m.gguf.lock", "m.gguf"]  # no temp file left


def _copy(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"config.json": {"model_type": "mistral"}}, "not a Llama folder: model_type 'mistral'"),
        ({"config.json": {"rope_parameters": {"rope_type": "llama3", "rope_theta": 1.0}}}, "RoPE scaling"),
        ({"config.json": {"quantization_config": {"format": "int-quantized"}}}, "quantized folder"),
        ({"tokenizer.json": {"normalizer": {"type": "NFC"}}}, "not a plain byte-level BPE"),
    ],
)
def test_what_llama_cpp_would_run_differently_is_refused_in_one_line(
    tiny_model: Path, tmp_path: Path, change: dict[str, dict[str, object]], message: str
) -> None:
    folder = _copy(tiny_model, tmp_path / "bad")
    for name, update in change.items():
        value = json.loads((folder / name).read_text())
        (folder / name).write_text(json.dumps(value | update))
    with pytest.raises(InvalidArgument, match=message) as caught:
        export_gguf(folder, tmp_path / "out" / "m.gguf", file_type="F16")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_an_unknown_format_or_a_folder_without_a_model_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match=r"unknown GGUF file type 'Q5_K'; known: F32, F16, BF16"):
        export_gguf(tiny_model, tmp_path / "m.gguf", file_type="Q5_K")
    with pytest.raises(InvalidArgument, match=r"is not a model folder: config\.json unreadable"):
        export_gguf(tmp_path, tmp_path / "m.gguf", file_type="F16")
    assert list(tmp_path.iterdir()) == []
