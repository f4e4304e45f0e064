"""The GGUF importer on small checkpoints the tests write: tensors, tokenizer, folder, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from evertune.domain.model.folder import MODEL_FILES, write_imported
from evertune.domain.model.gguf_import import read_gguf, read_gguf_tokenizer
from evertune.errors import InvalidArgument
from tests.domain.model.gguf_files import SPECIALS, write_checkpoint

TEXTS = (
    "the clinic opens at 9:30 and closes at 17:00",
    "please call 555 0142, extension 12",
    "  two spaces, a tab\tand a newline\n",
    "<|im_start|>user\nhello<|im_end|>",
    "café déjà vu ✓",
)


def test_tensors_come_back_as_written_before_quantization_and_permutation(tmp_path: Path) -> None:
    written = write_checkpoint(tmp_path / "m.gguf")
    imported = read_gguf(tmp_path / "m.gguf")
    assert imported.tied_embeddings and "lm_head.weight" not in imported.tensors
    assert sorted(imported.tensors) == sorted(written.expected_tensors)
    for name, expected in written.expected_tensors.items():
        # Exact: dequantizing is deterministic, and un-permuting only moves rows.
        np.testing.assert_array_equal(imported.tensors[name], expected, err_msg=name)
    assert imported.shape == written.shape
    assert imported.quantization == "F32 x5, Q4_1 x14, Q8_0 x1"
    assert imported.parameters() == sum(t.size for t in written.expected_tensors.values())


def test_an_untied_output_head_is_kept(tmp_path: Path) -> None:
    written = write_checkpoint(tmp_path / "m.gguf", tied=False)
    imported = read_gguf(tmp_path / "m.gguf")
    assert not imported.tied_embeddings
    np.testing.assert_array_equal(
        imported.tensors["lm_head.weight"], written.expected_tensors["lm_head.weight"]
    )


def test_the_tokenizer_encodes_as_the_one_the_vocabulary_came_from(tmp_path: Path) -> None:
    written = write_checkpoint(tmp_path / "m.gguf")
    tokenizer, special, template = read_gguf_tokenizer(tmp_path / "m.gguf")
    for text in TEXTS:
        assert tokenizer.encode(text).ids == written.tokenizer.encode(text).ids, text
        assert tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=False) == text
    # Digits one by one (SmolLM2's pre-tokenizer), special tokens whole.
    assert tokenizer.encode("2024").tokens == ["2", "0", "2", "4"]
    assert tokenizer.encode("<|im_end|>").ids == [2]
    assert (special.bos_id, special.eos_id, special.pad_id) == (1, 2, 2)
    assert "<|im_start|>" in template


def test_the_folder_loads_in_transformers_with_the_same_weights_and_chat_format(tmp_path: Path) -> None:
    written = write_checkpoint(tmp_path / "m.gguf")
    folder = tmp_path / "model"
    folder.mkdir()
    write_imported(folder, read_gguf(tmp_path / "m.gguf"), dtype="float32")
    assert sorted(p.name for p in folder.iterdir()) == sorted(MODEL_FILES)
    config = json.loads((folder / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["rms_norm_eps"] == pytest.approx(1e-5)
    assert config["eos_token_id"] == 2 and config["dtype"] == "float32"
    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
    state = model.state_dict()
    for name, expected in written.expected_tensors.items():
        assert torch.equal(state[name], torch.from_numpy(expected)), name
    assert torch.equal(state["lm_head.weight"], state["model.embed_tokens.weight"])
    logits = model(torch.tensor([[5, 6, 7, 8]])).logits
    assert logits.shape == (1, 4, written.shape.vocab) and torch.isfinite(logits).all()
    hf_tokenizer = AutoTokenizer.from_pretrained(folder)
    messages = [{"role": "user", "content": "is the clinic open at 9?"}]
    rendered = hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == "<|im_start|>user\nis the clinic open at 9?<|im_end|>\n<|im_start|>assistant\n"
    assert hf_tokenizer.eos_token == SPECIALS[2]
    assert hf_tokenizer(rendered)["input_ids"] == written.tokenizer.encode(rendered).ids


def test_bf16_folder_rounds_the_weights_once(tmp_path: Path) -> None:
    written = write_checkpoint(tmp_path / "m.gguf")
    folder = tmp_path / "model"
    folder.mkdir()
    write_imported(folder, read_gguf(tmp_path / "m.gguf"), dtype="bfloat16")
    state = LlamaForCausalLM.from_pretrained(folder).state_dict()
    name = "model.layers.1.self_attn.k_proj.weight"
    assert state[name].dtype == torch.bfloat16
    assert torch.equal(state[name], torch.from_numpy(written.expected_tensors[name]).to(torch.bfloat16))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"architecture": "falcon"}, "architecture 'falcon' unknown to the importer"),
        ({"pre": "qwen2"}, "pre-tokenizer 'qwen2' is not one the importer knows"),
        (
            {"drop": "model.layers.1.mlp.up_proj.weight"},
            "1 tensors missing, first model.layers.1.mlp.up_proj",
        ),
    ],
)
def test_what_the_importer_does_not_know_is_refused_in_one_line(
    tmp_path: Path, bad: dict[str, str], message: str
) -> None:
    write_checkpoint(tmp_path / "m.gguf", **bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=message) as caught:
        read_gguf(tmp_path / "m.gguf")
    assert "\n" not in str(caught.value)


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"PK\x03\x04 not a gguf at all" * 10)
    with pytest.raises(InvalidArgument, match=r"m\.gguf is not a readable GGUF file") as caught:
        read_gguf(tmp_path / "m.gguf")
    assert "\n" not in str(caught.value)
