"""The golden prompt set of the correctness gate, the hashes that stand for its outputs, and the
client that collects them.

The set is made from evertune's generated English (`evertune.domain.model.corpus`), deterministically
from `(count, max_tokens, seed)`, which also name it (`GoldenSet.set_id`): voice-agent-like chats,
a system prompt of 40 to 1,600 words (long ones cross vLLM-CPU's 2,048-token step budget, so
chunked prefill is exercised) and a caller's utterance; pairs of prompts share their system
prompt, so the second of a pair can be served from the prefix cache.

Outputs are greedy (temperature 0) with `ignore_eos`, so every answer has exactly `max_tokens`
tokens; vLLM returns their ids (`return_token_ids`). No token id and no text is kept: each answer
becomes a chain of keyed hashes, `h[i] = H(h[i-1] || token[i])` (BLAKE2b-64 under the runner's
`golden_hash_key`), so `h[i]` of two answers agree exactly when their first i+1 tokens agree.
Comparing chains gives each answer's common prefix with the reference: the agreement figure.

For changes that may change the arithmetic (dtype, quantization, kernels) the engine is also asked
for its top-k logprobs at each position (`return_tokens_as_token_ids`, so they come as ids). Each
alternative is hashed as the step the chain would take with it, `H(h[i-1] || alt)`; where two
answers first differ, their prefixes agree, so "the candidate's token is among the reference's
top-k" is a comparison of hashes (`alternatives`), with no token id stored.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from evertune.domain.model import instruction, sentences, utterance
from evertune.domain.workloads import ChatMessage
from evertune.domain.workloads.seeding import derive
from evertune.errors import Unavailable

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


@dataclass(frozen=True)
class GoldenAnswers:
    """The golden set's answers as hashes, in set order."""

    chains: list[list[int]]  #: per prompt, the answer's hash chain
    #: per prompt and position, the hashes of the top-k tokens there as chain steps from the
    #: answer's own prefix (empty lists where the engine returned no logprobs)
    alternatives: list[list[list[int]]]


def _key_bytes(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()[:32]


def _step(state: bytes, token: int, key_bytes: bytes) -> bytes:
    return hashlib.blake2b(
        state + int(token).to_bytes(8, "little", signed=True), digest_size=8, key=key_bytes
    ).digest()


def _value(state: bytes) -> int:
    return int.from_bytes(state, "little") & _MASK64


def hash_chain(token_ids: Sequence[int], *, key: str) -> list[int]:
    """The keyed prefix-hash chain of one answer: one unsigned 64-bit value per token."""
    return hash_answer(token_ids, (), key=key)[0]


def hash_answer(
    token_ids: Sequence[int], top: Sequence[Sequence[int]], *, key: str
) -> tuple[list[int], list[list[int]]]:
    """(hash chain, alternatives) of one answer; `top[i]` are the top-k token ids at position i
    (shorter or empty `top`: no alternatives for the missing positions)."""
    key_bytes = _key_bytes(key)
    chain: list[int] = []
    alternatives: list[list[int]] = []
    state = b""
    for index, token in enumerate(token_ids):
        options = top[index] if index < len(top) else ()
        alternatives.append([_value(_step(state, alt, key_bytes)) for alt in options])
        state = _step(state, token, key_bytes)
        chain.append(_value(state))
    return chain, alternatives


def common_prefix(reference: Sequence[int], candidate: Sequence[int]) -> int:
    """Tokens at the start of two answers that agree (from their hash chains)."""
    n = 0
    for a, b in zip(reference, candidate, strict=False):
        if a != b:
            break
        n += 1
    return n


def _body(prompt: GoldenPrompt, *, model: str, max_tokens: int, top_logprobs: int) -> dict[str, object]:
    extra: dict[str, object] = {}
    if top_logprobs:
        extra = {"logprobs": True, "top_logprobs": top_logprobs, "return_tokens_as_token_ids": True}
    return {
        **extra,
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
    top_logprobs: int,
) -> tuple[list[int], list[list[int]]]:
    body = _body(prompt, model=model, max_tokens=max_tokens, top_logprobs=top_logprobs)
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
    return ids, _top_ids(answer)


def _top_ids(answer: object) -> list[list[int]]:
    """The top-k token ids at each position of a chat answer (`token_id:<n>` tokens); [] when the
    engine sent no logprobs or sent them as text."""
    try:
        content = answer["choices"][0]["logprobs"]["content"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        return []
    top: list[list[int]] = []
    for position in content or []:
        ids = []
        for entry in position.get("top_logprobs") or []:
            token = str(entry.get("token", ""))
            if not token.startswith("token_id:"):
                return []
            ids.append(int(token.removeprefix("token_id:")))
        top.append(ids)
    return top


async def collect_golden(
    url: str,
    golden: GoldenSet,
    *,
    model: str,
    key: str,
    concurrency: int = 1,
    timeout_s: float = 120.0,
    top_logprobs: int = 0,
) -> GoldenAnswers:
    """Greedy answers of every golden prompt from the engine at `url`, as hashes (set order), with
    the top `top_logprobs` alternatives at each position (0: none asked).

    Raises `GoldenFailed` (one line) when any prompt fails.
    """
    slots = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:

        async def run(prompt: GoldenPrompt) -> tuple[list[int], list[list[int]]]:
            async with slots:
                ids, top = await _one(
                    session,
                    url,
                    prompt,
                    model=model,
                    max_tokens=golden.max_tokens,
                    timeout_s=timeout_s,
                    top_logprobs=top_logprobs,
                )
            return hash_answer(ids, top, key=key)

        answers = await asyncio.gather(*(run(p) for p in golden.prompts))
    return GoldenAnswers(chains=[c for c, _ in answers], alternatives=[a for _, a in answers])
