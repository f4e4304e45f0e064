"""An evertune model folder written as a GGUF file that llama.cpp (`llama-server`) loads.

The inverse of `gguf_import.py`, done the way llama.cpp's converter (`convert_hf_to_gguf.py`)
does it for a Llama:

- metadata: `general.*` (architecture, type, name, size label, file type, quantization version)
  and the `llama.*` shape keys (context, width, layers, MLP width, heads, KV heads, RoPE base,
  RMSNorm epsilon, vocabulary size, RoPE dimensions);
- tensors in the folder's order (the safetensors' sorted names, as the converter reads them) under
  llama.cpp's names, from `gguf_import`'s one name table read backwards; the query and key rows
  permuted per head into llama.cpp's rotary layout; a tied output head left out;
- the tokenizer as a `gpt2` (byte-level BPE) vocabulary: tokens, token types (control for special
  added tokens), merges, bos/eos/unk/padding ids, `add_bos_token`/`add_eos_token`, the chat
  template, and the `tokenizer.ggml.pre` name of the folder's pre-tokenizer (`pre_tokenizer_name`):
  byte-level alone is GPT-2's split, `gpt-2` (evertune's own tokenizer); digits one by one before
  it is `smollm` (SmolLM2's). llama.cpp refuses a name it does not know, so anything else is
  refused here.

Tensor types follow llama.cpp (`tensor_type`): 1-D tensors and norms F32; the 2-D weights in the
format's type (`FORMATS`); for Q4_0 / Q4_1 the output head (the embedding when tied) Q8_0, as
`llama-quantize` gives it (its Q6_K, which the `gguf` package cannot write, becomes Q8_0 where rows
are not a multiple of 256, as SmolLM2's 576); a matrix whose rows are not a whole number of blocks
F16, the converter's fallback.

Deterministic (the same folder and format give the same bytes), written to a temporary sibling and
renamed into place under a lock on a sibling lock file. A folder that is not a plain Llama
(another architecture, RoPE scaling, quantized weights, a tensor unknown or missing), a tokenizer
llama.cpp would split differently, or an unknown format is refused with one line
(`InvalidArgument`) before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evertune.domain.model.folder import locked, read_info
from evertune.domain.model.gguf_import import GLOBAL_TENSORS, LAYER_TENSORS
from evertune.domain.model.weights import ModelShape, tensor_shapes
from evertune.errors import InvalidArgument

if TYPE_CHECKING:
    import gguf


@dataclass(frozen=True)
class GGUFFormat:
    """A GGUF file type `export_gguf` writes."""

    name: str  #: as llama.cpp names it ("Q8_0"; the converter's `--outtype q8_0`)
    file_type: int  #: `general.file_type` (llama.cpp's `llama_ftype`)
    matrix: str  #: GGML type of the 2-D weights
    head: str  #: GGML type of the output head (the embedding when the head is tied)


#: The formats, by name.
FORMATS: dict[str, GGUFFormat] = {
    f.name: f
    for f in (
        GGUFFormat("F32", 0, "F32", "F32"),
        GGUFFormat("F16", 1, "F16", "F16"),
        GGUFFormat("BF16", 32, "BF16", "BF16"),
        GGUFFormat("Q8_0", 7, "Q8_0", "Q8_0"),
        GGUFFormat("Q4_0", 2, "Q4_0", "Q8_0"),
        GGUFFormat("Q4_1", 3, "Q4_1", "Q8_0"),
    )
}
#: The type of a 2-D tensor whose rows are not a whole number of its type's blocks.
FALLBACK = "F16"
#: llama.cpp's tokenizer pre-tokenizer names of the byte-level splits a folder may have.
GPT2_PRE = "gpt-2"
SMOLLM_PRE = "smollm"

#: llama.cpp's token types (`llama_token_type`).
_NORMAL, _CONTROL, _USER_DEFINED, _UNUSED = 1, 3, 4, 5
_LAYER_NAME = re.compile(r"model\.layers\.(\d+)\.(\w+\.\w+|\w+)\.weight")
_TO_GGUF_LAYER = {hf: short for short, hf in LAYER_TENSORS.items()}
_TO_GGUF_GLOBAL = {hf: name for name, hf in GLOBAL_TENSORS.items()}
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}


def file_format(name: str) -> GGUFFormat:
    """The format called `name` (any case); `InvalidArgument` for one not in `FORMATS`."""
    found = FORMATS.get(name.upper())
    if found is None:
        raise InvalidArgument(f"unknown GGUF file type {name!r}; known: {', '.join(FORMATS)}")
    return found


def gguf_name(hf_name: str) -> str:
    """llama.cpp's name of a Hugging Face Llama tensor; `InvalidArgument` for one it has no name for."""
    if hf_name in _TO_GGUF_GLOBAL:
        return _TO_GGUF_GLOBAL[hf_name]
    match = _LAYER_NAME.fullmatch(hf_name)
    if match is None or match.group(2) not in _TO_GGUF_LAYER:
        raise InvalidArgument(f"tensor {hf_name!r} is not one of a Llama the exporter knows")
    return f"blk.{match.group(1)}.{_TO_GGUF_LAYER[match.group(2)]}.weight"


def tensor_type(fmt: GGUFFormat, name: str, dims: tuple[int, ...], *, tied: bool) -> str:
    """The GGML type the tensor `name` (llama.cpp's name) of shape `dims` (Hugging Face order: a row
    is the last dimension) is stored in: F32 for 1-D tensors and norms, the head's type for the
    output head (the embedding when `tied`), else the format's; `FALLBACK` when a row is not a whole
    number of the type's blocks (32 values for Q8_0, Q4_0, Q4_1)."""
    import gguf

    if len(dims) == 1 or name.endswith("_norm.weight"):
        return "F32"
    head = name == "output.weight" or (tied and name == "token_embd.weight")
    wanted = fmt.head if head else fmt.matrix
    block, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[wanted]]
    return wanted if dims[-1] % block == 0 else FALLBACK


def pre_tokenizer_name(tokenizer: dict[str, Any]) -> str:
    """llama.cpp's `tokenizer.ggml.pre` for a `tokenizer.json` (parsed): `gpt-2` for a byte-level
    BPE with GPT-2's split alone, `smollm` for digits split one by one before it; `InvalidArgument`
    for any other tokenizer (llama.cpp would split its text differently)."""
    model = tokenizer.get("model") or {}
    decoder = tokenizer.get("decoder") or {}
    if (
        model.get("type") != "BPE"
        or tokenizer.get("normalizer") is not None
        or decoder.get("type") != "ByteLevel"
        or model.get("continuing_subword_prefix")
        or model.get("end_of_word_suffix")
        or model.get("byte_fallback")
        or model.get("ignore_merges")
    ):
        raise InvalidArgument("the tokenizer is not a plain byte-level BPE (llama.cpp's 'gpt2' model)")
    pre = tokenizer.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    kinds = [{key: step.get(key) for key in _BYTE_LEVEL} for step in steps]
    if kinds == [_BYTE_LEVEL]:
        return GPT2_PRE
    if (
        len(steps) == 2
        and steps[0] == {"type": "Digits", "individual_digits": True}
        and kinds[1] == _BYTE_LEVEL
    ):
        return SMOLLM_PRE
    raise InvalidArgument(f"the pre-tokenizer {json.dumps(pre, sort_keys=True)} has no llama.cpp name")


def export_gguf(folder: Path, out: Path, *, file_type: str) -> Path:
    """Write the Llama model folder `folder` as a GGUF file of `file_type` (a name of `FORMATS`) at
    `out` and return `out` (see the module doc). Under a second for the tiny model, a few seconds
    (and about 1 GB of memory) for SmolLM2-135M."""
    import gguf

    fmt = file_format(file_type)
    folder = folder.expanduser().absolute()
    out = out.expanduser().absolute()
    config = _read_json(folder, "config.json")
    shape, eps, tied = _shape(config)
    vocab = _vocab(
        _read_json(folder, "tokenizer.json"),
        _read_json(folder, "tokenizer_config.json"),
        config,
        shape.vocab,
    )
    stored: list[tuple[str, np.ndarray, gguf.GGMLQuantizationType]] = []
    parameters = 0
    for name, values in _tensors(folder, shape, tied):
        kind = gguf.GGMLQuantizationType[tensor_type(fmt, name, values.shape, tied=tied)]
        stored.append((name, gguf.quants.quantize(values, kind), kind))
        parameters += values.size
    with locked(out):
        fd, temp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        os.close(fd)
        try:
            writer = gguf.GGUFWriter(temp, "llama")
            writer.add_type(gguf.GGUFType.MODEL)
            writer.add_name(_model_name(folder))
            writer.add_size_label(gguf.size_label(parameters, parameters, 0, 0))
            _add_shape(writer, shape, eps, fmt)
            _add_vocab(writer, vocab)
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
            for name, data, kind in stored:
                writer.add_tensor(name, data, raw_dtype=kind)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
            writer.close()
            Path(temp).chmod(0o644)
            Path(temp).replace(out)
        finally:
            with contextlib.suppress(FileNotFoundError):
                Path(temp).unlink()
    return out


def _read_json(folder: Path, name: str) -> dict[str, Any]:
    try:
        value = json.loads((folder / name).read_text())
    except (OSError, ValueError) as err:
        raise InvalidArgument(f"{folder} is not a model folder: {name} unreadable ({err})") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"{folder}/{name} is not a JSON object")
    return value


def _shape(config: dict[str, Any]) -> tuple[ModelShape, float, bool]:
    """The model's shape, RMSNorm epsilon and whether its head is tied; `InvalidArgument` for a
    config that is not a plain Llama llama.cpp runs as `llama`."""
    if config.get("model_type") != "llama" or config.get("architectures") != ["LlamaForCausalLM"]:
        raise InvalidArgument(
            f"not a Llama folder: model_type {config.get('model_type')!r}, "
            f"architectures {config.get('architectures')!r}"
        )
    rope = config.get("rope_parameters") or {}
    if config.get("rope_scaling") or rope.get("rope_type", "default") != "default":
        raise InvalidArgument("RoPE scaling is not supported by the exporter")
    if config.get("quantization_config") is not None:
        raise InvalidArgument("a quantized folder (quantization_config) cannot be exported")
    if config.get("attention_bias") or config.get("mlp_bias") or config.get("hidden_act", "silu") != "silu":
        raise InvalidArgument("only a Llama without biases and with SiLU can be exported")
    try:
        heads = int(config["num_attention_heads"])
        shape = ModelShape(
            layers=int(config["num_hidden_layers"]),
            hidden=int(config["hidden_size"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads", heads)),
            intermediate=int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            max_positions=int(config["max_position_embeddings"]),
            rope_theta=float(rope.get("rope_theta", config.get("rope_theta", 10_000.0))),
        )
        eps = float(config["rms_norm_eps"])
    except (KeyError, TypeError, ValueError) as err:
        raise InvalidArgument(f"config.json lacks a Llama setting: {err}") from None
    if shape.hidden % heads or heads % shape.kv_heads or shape.head_dim % 2:
        raise InvalidArgument(f"{heads} heads, {shape.kv_heads} KV heads do not fit width {shape.hidden}")
    if int(config.get("head_dim", shape.head_dim)) != shape.head_dim:
        raise InvalidArgument(f"head_dim {config['head_dim']} is not width / heads ({shape.head_dim})")
    return shape, eps, bool(config.get("tie_word_embeddings", False))


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's per-head permutation of a query or key projection (`gguf_import._unpermute`
    undoes it): each head's rows `[2, d/2]` (two rotary halves) become `[d/2, 2]`."""
    split = weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
    return split.swapaxes(1, 2).reshape(weights.shape)


def _tensors(folder: Path, shape: ModelShape, tied: bool) -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor as llama.cpp stores it, float32, in the folder's (sorted) order: renamed, the
    query and key rows permuted, a tied head left out. `InvalidArgument` for a tensor unknown,
    missing or of the wrong shape (before the first tensor is read)."""
    from safetensors import SafetensorError, safe_open

    expected = tensor_shapes(shape)
    if tied:
        expected.pop("lm_head.weight")
    try:
        with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:
            names = sorted(weights.keys())
            if tied and "lm_head.weight" in names:
                names.remove("lm_head.weight")
            unknown = sorted(set(names) - set(expected))
            missing = sorted(set(expected) - set(names))
            if unknown or missing:
                which = f"unknown tensor {unknown[0]}" if unknown else f"tensor {missing[0]} missing"
                raise InvalidArgument(f"{folder} is not a Llama folder the exporter knows: {which}")
            for name in names:
                values = weights.get_tensor(name).float().numpy()
                if tuple(values.shape) != expected[name]:
                    raise InvalidArgument(
                        f"tensor {name} is {tuple(values.shape)}, expected {expected[name]}"
                    )
                if name.endswith("q_proj.weight"):
                    values = _permute(values, shape.heads)
                elif name.endswith("k_proj.weight"):
                    values = _permute(values, shape.kv_heads)
                yield gguf_name(name), np.ascontiguousarray(values, dtype=np.float32)
    except (OSError, SafetensorError) as err:
        raise InvalidArgument(f"{folder}/model.safetensors is unreadable: {err}") from None


def _model_name(folder: Path) -> str:
    """`general.name`: the marker's model (`evertune-tiny-s0`, `smollm2-135m`), else the folder's name."""
    info = read_info(folder)
    if info is None:
        return folder.name
    return info.size if info.source or "+" in info.size else f"evertune-{info.size}-s{info.seed}"


def _add_shape(writer: gguf.GGUFWriter, shape: ModelShape, eps: float, fmt: GGUFFormat) -> None:
    """The `llama.*` keys and the file type, in the converter's order."""
    writer.add_block_count(shape.layers)
    writer.add_context_length(shape.max_positions)
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.intermediate)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(eps)
    writer.add_file_type(fmt.file_type)
    writer.add_vocab_size(shape.vocab)
    writer.add_rope_dimension_count(shape.head_dim)


def _token_id(name: Any, added: dict[str, int]) -> int | None:
    content = name.get("content") if isinstance(name, dict) else name
    return added.get(content) if isinstance(content, str) else None


@dataclass(frozen=True)
class _Vocab:
    """The `tokenizer.*` keys of a folder, worked out before anything is written."""

    pre: str  #: `tokenizer.ggml.pre`
    tokens: list[str]  #: every token, by id
    types: list[int]  #: llama.cpp's token type of each
    merges: list[str]  #: "first second", by rank
    ids: dict[str, int]  #: "bos", "eos", "unk", "pad" -> token id (those the folder names)
    add: dict[str, bool]  #: "bos", "eos" -> whether encoding adds it (those the folder says)
    chat_template: str  #: "" when the folder has none


def _vocab(
    tokenizer: dict[str, Any], tokenizer_config: dict[str, Any], config: dict[str, Any], vocab_size: int
) -> _Vocab:
    """The tokenizer as the converter writes a byte-level BPE (`_set_vocab_gpt2` and
    `gguf.SpecialVocab`): special ids from the tokenizer config's names, else config.json's ids."""
    pre = pre_tokenizer_name(tokenizer)
    model = tokenizer["model"]
    by_id = {int(i): str(t) for t, i in model.get("vocab", {}).items()}
    added = {str(t["content"]): int(t["id"]) for t in tokenizer.get("added_tokens", [])}
    special = {int(t["id"]) for t in tokenizer.get("added_tokens", []) if t.get("special")}
    by_id.update({i: t for t, i in added.items()})
    if any(i >= vocab_size or i < 0 for i in by_id):
        raise InvalidArgument(f"the tokenizer has ids beyond the model's vocabulary of {vocab_size}")
    tokens, types = [], []
    for i in range(vocab_size):
        token = by_id.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(_UNUSED)
        elif token in added:
            looks_special = token.startswith("<|") and token.endswith("|>")
            tokens.append(token)
            types.append(_CONTROL if i in special or looks_special else _USER_DEFINED)
        else:
            tokens.append(token)
            types.append(_NORMAL)
    # Pairs (tokenizers >= 0.20) joined as the converter joins them, a space inside a part as U+0120.
    merges = [
        m if isinstance(m, str) else " ".join(part.replace(" ", "\u0120") for part in m)
        for m in model.get("merges", [])
    ]
    ids = {}
    for kind in ("bos", "eos", "unk", "pad"):
        found = _token_id(tokenizer_config.get(f"{kind}_token"), added)
        if found is None and isinstance(config.get(f"{kind}_token_id"), int):
            found = int(config[f"{kind}_token_id"])
        if found is not None and 0 <= found < vocab_size:
            ids[kind] = found
    if "eos" not in ids:
        raise InvalidArgument("the folder names no end-of-sequence token")
    add = {
        kind: flag
        for kind in ("bos", "eos")
        if isinstance(flag := tokenizer_config.get(f"add_{kind}_token"), bool)
    }
    template = tokenizer_config.get("chat_template")
    return _Vocab(
        pre=pre,
        tokens=tokens,
        types=types,
        merges=merges,
        ids=ids,
        add=add,
        chat_template=template if isinstance(template, str) else "",
    )


def _add_vocab(writer: gguf.GGUFWriter, vocab: _Vocab) -> None:
    """The `tokenizer.*` keys, in the converter's order."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    writer.add_token_merges(vocab.merges)
    for kind, found in vocab.ids.items():
        getattr(writer, f"add_{kind}_token_id")(found)
    for kind, flag in vocab.add.items():
        getattr(writer, f"add_add_{kind}_token")(flag)
    writer.add_add_space_prefix(False)  # a byte-level BPE adds no space (the shipped SmolLM2 GGUF says so)
    if vocab.chat_template:
        writer.add_chat_template(vocab.chat_template)
