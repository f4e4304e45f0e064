"""A model's chat format: its chat template rendered as the engine renders it, and its token ids.

Every place that counts a chat's tokens (the gateway's prefix hashes, the performance model's
workload, the replay's budgets) must lay a chat out as the endpoint's own model does: evertune's
random-weight models write `<|begin|>` and `<|role|>\\n...<|end|>\\n`, SmolLM2 writes ChatML
(`<|im_start|>role\\n...<|im_end|>\\n`, with a default system message when a chat has none).
`ChatFormat` reads the template from a model folder's `tokenizer_config.json` and renders it with
Jinja2's sandbox, as transformers and vLLM do; no torch, no transformers.

`ids(messages)` encodes a chat piece by piece: the template's own text between messages, and each
message's content, each piece encoded once and cached. A voice workload resends the same system
prompt and history on every turn, so a turn costs one encode of its new message. Pieces are joined
at the template's boundaries, where byte-level BPE never merges across (a role line ends in a
newline, a message in a special token); `ChatFormat` checks that on a probe chat when it is made,
and encodes whole prompts where it does not hold.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from evertune.domain.model.tokenizer import load_tokenizer
from evertune.errors import InvalidArgument, NotFound

#: Distinct texts whose ids a format keeps (a workload's system prompts, histories and turns).
CACHED_TEXTS = 200_000
#: Marks where a message's content goes when the template's layout is read (no template writes it).
_SENTINEL = "\x00\x01{}\x01\x00"
#: A chat that exercises every role and boundary, to check piecewise encoding against whole.
_PROBE = (
    {"role": "system", "content": "You are a helpful receptionist. Hours: 9 to 5."},
    {"role": "user", "content": "Hi, can I book for Friday at 10:30?"},
    {"role": "assistant", "content": "Yes. What name should I use?"},
    {"role": "user", "content": " Jordan Lee, and  thanks!\n"},
)


def _raise(message: str) -> None:
    raise TemplateError(message)


class ChatFormat:
    """A model's chat template and tokenizer: rendered text and token ids of chats."""

    def __init__(
        self, *, template: str, tokenizer: Tokenizer, bos_token: str = "", eos_token: str = ""
    ) -> None:
        if not template:
            raise InvalidArgument("the model has no chat template")
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        try:
            self._template = env.from_string(template)
        except TemplateError as err:
            raise InvalidArgument(f"the model's chat template does not parse: {err}") from None
        self.tokenizer = tokenizer
        self._specials = {"bos_token": bos_token, "eos_token": eos_token}
        self._cache: dict[str, list[int]] = {}
        self._piecewise = True
        probe = list(_PROBE)
        self._piecewise = self.ids(probe) == self._encode(self.render(probe))

    @classmethod
    def of_folder(cls, model_dir: Path) -> ChatFormat:
        """The chat format of a model folder (`tokenizer.json`, `tokenizer_config.json`)."""
        config_path = model_dir / "tokenizer_config.json"
        if not config_path.is_file():
            raise NotFound(f"no tokenizer_config.json in {model_dir}")
        config = json.loads(config_path.read_text())
        return cls(
            template=str(config.get("chat_template") or ""),
            tokenizer=load_tokenizer(model_dir),
            bos_token=_token_text(config.get("bos_token")),
            eos_token=_token_text(config.get("eos_token")),
        )

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True) -> str:
        """The prompt text of a chat, as the engine renders it; `InvalidArgument` when the template
        refuses the chat (an unknown role, for example)."""
        try:
            return self._template.render(
                messages=[dict(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                **self._specials,
            )
        except TemplateError as err:
            raise InvalidArgument(f"the chat template refused the chat: {err}") from None

    def ids(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True) -> list[int]:
        """The prompt's token ids (what the engine counts as `usage.prompt_tokens`)."""
        if not self._piecewise:
            return self._encode(self.render(messages, add_generation_prompt=add_generation_prompt))
        layout = self.render(
            [{**m, "content": _SENTINEL.format(i)} for i, m in enumerate(messages)],
            add_generation_prompt=add_generation_prompt,
        )
        ids: list[int] = []
        for i, message in enumerate(messages):
            before, _, layout = layout.partition(_SENTINEL.format(i))
            ids += self._encode(before)
            ids += self._encode(str(message.get("content", "")))
        return ids + self._encode(layout)

    def count(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True) -> int:
        """Prompt tokens of a chat."""
        return len(self.ids(messages, add_generation_prompt=add_generation_prompt))

    def ids_of_text(self, text: str, *, cache: bool = True) -> list[int]:
        """Ids of plain text (a completion's prompt, or a rendered chat), special tokens where the
        text names them; `cache=False` for text not worth keeping (a gateway's live prompts)."""
        return self._encode(text) if cache else self.tokenizer.encode(text, add_special_tokens=False).ids

    def _encode(self, text: str) -> list[int]:
        ids = self._cache.get(text)
        if ids is None:
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
            if len(self._cache) < CACHED_TEXTS:
                self._cache[text] = ids
        return ids


def _token_text(value: object) -> str:
    """A special token as tokenizer_config.json writes it: a string, or an object with `content`."""
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return str(value or "")


@functools.cache
def chat_format(model_dir: Path) -> ChatFormat:
    """`ChatFormat.of_folder`, one per folder and process."""
    return ChatFormat.of_folder(model_dir)
