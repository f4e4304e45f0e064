"""Small helpers shared by the workload tests."""

from __future__ import annotations

import random

from evertune.domain.workloads import ChatMessage, PlannedRequest

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")


def word_tokens(n_tokens: int, rng: random.Random) -> str:
    """A `make_text` for which a token is a word: exactly `n_tokens` words."""
    return " ".join(rng.choices(WORDS, k=n_tokens))


def count_words(text: str) -> int:
    """The token counter that goes with `word_tokens`."""
    return len(text.split())


def chat(
    at_s: float, request_id: str, *contents: str, conversation: str = "", turn: int = 0
) -> PlannedRequest:
    """A chat request: a system prompt, then alternating user/assistant messages ending with a user one."""
    messages = [ChatMessage(role="system", content=contents[0])]
    rest = contents[1:]
    for index, content in enumerate(rest):
        last_or_odd_before_it = (len(rest) - index) % 2 == 1
        messages.append(ChatMessage(role="user" if last_or_odd_before_it else "assistant", content=content))
    return PlannedRequest(
        at_s=at_s,
        request_id=request_id,
        api="chat",
        max_tokens=20,
        messages=tuple(messages),
        conversation_id=conversation,
        turn=turn,
    )
