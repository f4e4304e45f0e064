"""ChatFormat: a model folder's chat template rendered as engines render it, and counted piecewise."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from evertune.domain.model import count_chat_tokens, render_chat
from evertune.domain.model.chat import ChatFormat
from evertune.domain.workloads import VoiceWorkload, WordListText, plan_voice
from evertune.errors import InvalidArgument, NotFound


def _messages(request_messages: object) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in request_messages]  # type: ignore[attr-defined]


def test_the_tiny_models_format_is_evertunes_own(tiny_model: Path, tokenizer: Tokenizer) -> None:
    chat = ChatFormat.of_folder(tiny_model)
    for request in plan_voice(VoiceWorkload(duration_s=30, seed=2), text=WordListText())[:20]:
        messages = _messages(request.messages)
        assert chat.render(messages) == render_chat(messages)
        assert chat.count(messages) == count_chat_tokens(tokenizer, messages)


def test_the_real_models_format_is_chatml_and_piecewise_equals_whole(smollm2_model: Path) -> None:
    chat = ChatFormat.of_folder(smollm2_model)
    for request in plan_voice(VoiceWorkload(duration_s=30, seed=3))[:20]:
        messages = _messages(request.messages)
        text = chat.render(messages)
        assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
        assert chat.ids(messages) == chat.tokenizer.encode(text, add_special_tokens=False).ids
    # No system message: the template adds SmolLM's default one.
    assert "You are a helpful AI assistant named SmolLM" in chat.render([{"role": "user", "content": "hi"}])


def test_a_template_that_refuses_or_is_missing_is_one_line(tiny_model: Path, tmp_path: Path) -> None:
    chat = ChatFormat.of_folder(tiny_model)
    with pytest.raises(InvalidArgument, match="the chat template refused the chat: evertune models know"):
        chat.render([{"role": "tool", "content": "x"}])
    with pytest.raises(NotFound, match=r"no tokenizer_config\.json"):
        ChatFormat.of_folder(tmp_path)
    with pytest.raises(InvalidArgument, match="does not parse"):
        ChatFormat(template="{% for %}", tokenizer=chat.tokenizer)
