"""Prefix hashes of a prompt (pure): keyed hashes of token-block prefixes, never the text.

The prompt is what the engine would tokenize: a chat's messages rendered with the endpoint model's
chat template (`chat_formats.py`; here only the messages' text is taken from the request), or a
completion's prompt. Its tokens are cut into blocks of `block` tokens; only full blocks count (a
partial block is never reused from an engine's prefix cache). The chain is

    h_0 = HMAC-SHA256(key, tokens of block 0)[:8]
    h_i = HMAC-SHA256(key, h_{i-1} || tokens of block i)[:8]

with tokens as little-endian uint32 and `key = HMAC-SHA256(secret, endpoint id)`: equal chains mean
equal token prefixes within one endpoint, and nothing can be compared across endpoints, nor
between an endpoint and a later one created under the same name (the id is `Endpoint.uid`, new at
every create; a route table without one keys by the name).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Sequence
from typing import Any


def endpoint_key(secret: bytes, endpoint_uid: str) -> bytes:
    """The endpoint's hashing key: HMAC-SHA256(secret, the endpoint's immutable id)."""
    return hmac.new(secret, endpoint_uid.encode(), hashlib.sha256).digest()


def chain_hashes(key: bytes, token_ids: Sequence[int], block: int) -> list[int]:
    """The prefix chain over every full block of `block` tokens, as unsigned 64-bit integers."""
    hashes: list[int] = []
    previous = b""
    for start in range(0, len(token_ids) - block + 1, block):
        data = previous + struct.pack(f"<{block}I", *token_ids[start : start + block])
        previous = hmac.new(key, data, hashlib.sha256).digest()[:8]
        hashes.append(int.from_bytes(previous, "big"))
    return hashes


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def chat_messages(messages: Any) -> list[dict[str, str]] | None:
    """A chat's messages as role and text (text parts of OpenAI content lists joined), for the
    endpoint model's chat template to render; None if `messages` is not a list."""
    if not isinstance(messages, list):
        return None
    return [
        {"role": str(message.get("role", "")), "content": _content_text(message.get("content"))}
        for message in messages
        if isinstance(message, dict)
    ]


def completion_prompt(prompt: Any) -> str | list[int] | None:
    """A completion's prompt: its text, its token ids (each 0 to 2**32 - 1), or the first of a list;
    None otherwise."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and 0 <= t < 2**32 for t in prompt):  # ids the hash chain can pack
            return [int(t) for t in prompt]
        return completion_prompt(prompt[0])
    return None
