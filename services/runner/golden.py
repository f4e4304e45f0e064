"""The golden prompt set of the correctness gate, the hashes that stand for its outputs, and the
client that collects them.

The set is made from evertune's generated English (`evertune.model.corpus`), deterministically
from `(count, max_tokens, seed)`, which also name it (`GoldenSet.set_id`): voice-agent-like chats,
a system prompt of 40 to 1,600 words (long ones cross vLLM-CPU's 2,048-token step budget, so
chunked prefill is exercised) and a caller's utterance; pairs of prompts share their system
prompt, so the second of a pair can be served from the prefix cache.

Outputs are greedy (temperature 0) with `ignore_eos`, so every answer has exactly `max_tokens`
tokens; vLLM returns their ids (`return_token_ids`). No token id and no text is kept: each answer
becomes a chain of keyed hashes, `h[i] = H(h[i-1] || token[i])` (BLAKE2b-64 under the runner's
`golden_hash_key`), so `h[i]` of two answers agree exactly when their first i+1 tokens agree.
Comparing chains gives each answer's common prefix with the reference: the agreement figure.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from evertune.errors import Unavailable
from evertune.model import instruction, sentences, utterance
from evertune.workloads import ChatMessage
from evertune.workloads.seeding import derive

#: Words of the system prompts, cycled over the pairs of the set.
SYSTEM_WORDS: tuple[int, ...] = (40, 200, 800, 1600)
#: Version of the recipe below; part of the set id, so a changed recipe never compares with old hashes.
RECIPE = "corpus-v1"
_MASK64 = (1 << 64) - 1


class GoldenFailed(Unavailable):
    """The engine did not answer a golden prompt (an error status, no token ids, a timeout)."""


@dataclass(frozen=True)
class GoldenPrompt:
    """One chat of the golden set."""

    prompt_id: str  #: "g<index>"
    messages: tuple[ChatMessage, ...]  #: system prompt, then the caller's utterance


@dataclass(frozen=True)
class GoldenSet:
    """The prompts every trial of a comparison answers."""

    set_id: str  #: names the recipe, count, max_tokens and seed; equal ids mean equal prompts
    max_tokens: int  #: tokens asked of each answer
    prompts: tuple[GoldenPrompt, ...]  #: in order


def golden_set(*, count: int, max_tokens: int, seed: int) -> GoldenSet:
    """The golden set of `count` prompts (deterministic; see the module doc)."""
    prompts: list[GoldenPrompt] = []
    for index in range(count):
        pair = index // 2
        system_rng = derive(seed, "golden-system", pair)
        words = SYSTEM_WORDS[pair % len(SYSTEM_WORDS)]
        system_words: list[str] = [instruction(system_rng)]
        while sum(len(s.split()) for s in system_words) < words:
            system_words.extend(sentences(system_rng, 4))
        system = " ".join(" ".join(system_words).split()[:words])
        user = utterance(derive(seed, "golden-user", index))
        messages = (ChatMessage(role="system", content=system), ChatMessage(role="user", content=user))
        prompts.append(GoldenPrompt(prompt_id=f"g{index}", messages=messages))
    return GoldenSet(
        set_id=f"{RECIPE}-n{count}-t{max_tokens}-s{seed}", max_tokens=max_tokens, prompts=tuple(prompts)
    )


def hash_chain(token_ids: Sequence[int], *, key: str) -> list[int]:
    """The keyed prefix-hash chain of one answer: one unsigned 64-bit value per token."""
    key_bytes = hashlib.sha256(key.encode()).digest()[:32]
    chain: list[int] = []
    state = b""
    for token in token_ids:
        state = hashlib.blake2b(
            state + int(token).to_bytes(8, "little", signed=True), digest_size=8, key=key_bytes
        ).digest()
        chain.append(int.from_bytes(state, "little") & _MASK64)
    return chain


def common_prefix(reference: Sequence[int], candidate: Sequence[int]) -> int:
    """Tokens at the start of two answers that agree (from their hash chains)."""
    n = 0
    for a, b in zip(reference, candidate, strict=False):
        if a != b:
            break
        n += 1
    return n


def _body(prompt: GoldenPrompt, *, model: str, max_tokens: int) -> dict[str, object]:
    return {
        "model": model,
        "messages": [{"role": m.role, "content": m.content} for m in prompt.messages],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream": False,
    }


async def _one(
    session: aiohttp.ClientSession,
    url: str,
    prompt: GoldenPrompt,
    *,
    model: str,
    max_tokens: int,
    timeout_s: float,
) -> list[int]:
    body = _body(prompt, model=model, max_tokens=max_tokens)
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.post(f"{url}/v1/chat/completions", json=body) as response,
        ):
            if response.status != 200:
                raise GoldenFailed(
                    f"golden prompt {prompt.prompt_id}: engine answered HTTP {response.status}"
                )
            answer = await response.json(content_type=None)
    except TimeoutError:
        raise GoldenFailed(f"golden prompt {prompt.prompt_id}: no answer within {timeout_s:g} s") from None
    except aiohttp.ClientError as err:
        raise GoldenFailed(f"golden prompt {prompt.prompt_id}: {type(err).__name__}: {err}") from None
    except ValueError:
        raise GoldenFailed(f"golden prompt {prompt.prompt_id}: the answer is not JSON") from None
    try:
        ids = answer["choices"][0]["token_ids"]
    except (KeyError, IndexError, TypeError):
        ids = None
    if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        raise GoldenFailed(
            f"golden prompt {prompt.prompt_id}: the engine returned no token ids "
            "(needs vLLM's return_token_ids)"
        )
    return ids


async def collect_golden(
    url: str,
    golden: GoldenSet,
    *,
    model: str,
    key: str,
    concurrency: int = 1,
    timeout_s: float = 120.0,
) -> list[list[int]]:
    """Greedy answers of every golden prompt from the engine at `url`, as hash chains (set order).

    Raises `GoldenFailed` (one line) when any prompt fails.
    """
    slots = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:

        async def run(prompt: GoldenPrompt) -> list[int]:
            async with slots:
                ids = await _one(
                    session, url, prompt, model=model, max_tokens=golden.max_tokens, timeout_s=timeout_s
                )
            return hash_chain(ids, key=key)

        return list(await asyncio.gather(*(run(p) for p in golden.prompts)))
