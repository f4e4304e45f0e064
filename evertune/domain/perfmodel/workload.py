"""From a workload's planned requests to what the simulator needs: arrival, lengths, block hashes.

A prompt's token ids come from the model's tokenizer, message by message, laid out as evertune's
chat template lays them out (`<|begin|>`, then `<|role|>` `\\n` content `<|end|>` `\\n` per message,
then `<|assistant|>` `\\n`). Each distinct message text is encoded once and cached, so a voice
workload, which resends the same system prompt and history turn after turn, costs one encode per
new message. Block hashes are chained: block i's hash covers its token ids and block i-1's hash,
so equal hashes mean equal prefixes (as vLLM's block hashes do).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

from evertune.domain.model.tokenizer import BOS, EOS, ROLE_TOKENS
from evertune.domain.replay.priming import PRIMER_SUFFIX, openers
from evertune.domain.workloads.plan import PlannedRequest, history
from evertune.errors import InvalidArgument


@dataclass(frozen=True)
class SimInput:
    """One request as the simulator takes it."""

    request_id: str  #: the plan's request id
    conversation_id: str  #: the plan's conversation id ("" = none)
    arrival_s: float  #: seconds after the start (at rate 1)
    prompt_tokens: int  #: prompt length in tokens
    max_tokens: int  #: tokens to generate
    hashes: tuple[int, ...]  #: chained hashes of the prompt's full blocks
    #: Leading prompt tokens its conversation's earlier turns sent (`workloads.plan.history`); 0 =
    #: none (a first turn, a completion, a request outside a conversation)
    history_tokens: int = 0


def block_hashes(ids: Sequence[int], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the full `block_size`-token blocks of `ids` (a partial last block has none)."""
    out: list[int] = []
    h = 0
    for start in range(0, len(ids) - block_size + 1, block_size):
        h = hash((h, tuple(ids[start : start + block_size])))
        out.append(h)
    return tuple(out)


class PromptTokens:
    """Token ids of planned requests' prompts, with a cache of encoded message texts."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[str, list[int]] = {}
        vocab = tokenizer.get_vocab()
        try:
            self._bos = vocab[BOS]
            self._eos = vocab[EOS]
            self._roles = {role: vocab[token] for role, token in ROLE_TOKENS.items()}
        except KeyError as err:
            raise InvalidArgument(f"the tokenizer lacks evertune's chat token {err}") from None
        newline = tokenizer.encode("\n", add_special_tokens=False).ids
        self._newline = newline

    def text(self, text: str) -> list[int]:
        """Ids of `text` (no special tokens), cached."""
        ids = self._cache.get(text)
        if ids is None:
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
            self._cache[text] = ids
        return ids

    def prompt(self, request: PlannedRequest) -> list[int]:
        """Ids of the request's whole prompt, as the engine sees it."""
        return self.prompt_with_history(request)[0]

    def prompt_with_history(self, request: PlannedRequest) -> tuple[list[int], int]:
        """Ids of the request's whole prompt, and how many of them lead with its history."""
        if request.api == "completions":
            return self.text(request.prompt), 0
        ids = [self._bos]
        earlier = len(history(request))
        history_tokens = 0
        for position, message in enumerate(request.messages):
            if earlier and position == earlier:  # the new utterance starts here
                history_tokens = len(ids)
            ids.append(self._roles[message.role])
            ids.extend(self._newline)
            ids.extend(self.text(message.content))
            ids.append(self._eos)
            ids.extend(self._newline)
        ids.append(self._roles["assistant"])
        ids.extend(self._newline)
        return ids, history_tokens


def prepare(plan: Sequence[PlannedRequest], tokens: PromptTokens, *, block_size: int) -> list[SimInput]:
    """The simulator's inputs of a plan, in arrival order (stable for equal times)."""
    out: list[SimInput] = []
    for request in sorted(plan, key=lambda r: r.at_s):
        ids, history_tokens = tokens.prompt_with_history(request)
        if not ids:
            raise InvalidArgument(f"request {request.request_id} has an empty prompt")
        out.append(
            SimInput(
                request_id=request.request_id,
                conversation_id=request.conversation_id,
                arrival_s=max(0.0, request.at_s),
                prompt_tokens=len(ids),
                max_tokens=request.max_tokens,
                hashes=block_hashes(ids, block_size),
                history_tokens=history_tokens,
            )
        )
    return out


def primer_inputs(inputs: Sequence[SimInput], *, block_size: int) -> list[SimInput]:
    """The simulator's side of `evertune.domain.replay.priming`: for the first input (in arrival order) of
    each conversation with a history, a request of that history (its blocks, one output token).

    The primer's full blocks are the primed request's first `history_tokens // block_size` (the
    prompt's leading blocks hash the same whatever follows); the two tokens of the primer's own
    generation prompt are left out."""
    return [
        SimInput(
            request_id=item.request_id + PRIMER_SUFFIX,
            conversation_id=item.conversation_id,
            arrival_s=0.0,
            prompt_tokens=item.history_tokens,
            max_tokens=1,
            hashes=item.hashes[: item.history_tokens // block_size],
        )
        for item in (inputs[i] for i in openers(inputs, due=lambda x: x.arrival_s))
        if item.history_tokens > 0
    ]


def synthetic(
    *,
    count: int,
    prompt_tokens: int,
    max_tokens: int,
    block_size: int,
    at_s: float = 0.0,
    gap_s: float = 0.0,
    prefix_tokens: int = 0,
    tag: str = "r",
) -> list[SimInput]:
    """`count` requests of fixed lengths arriving `gap_s` apart from `at_s` (for calibration shapes
    and tests). Their first `prefix_tokens` tokens are the same for all (a shared system prompt; all
    of the prompt when `prefix_tokens >= prompt_tokens`), the rest differs per request."""
    base = zlib.crc32(tag.encode())
    shared = [base, *((base * 7919 + j) % 4096 for j in range(1, min(prefix_tokens, prompt_tokens)))]
    out: list[SimInput] = []
    for i in range(count):
        seed = base + i + 1
        own = [seed, *((seed * 7919 + j) % 4096 for j in range(1, prompt_tokens - len(shared)))]
        ids = (shared + own)[:prompt_tokens]
        out.append(
            SimInput(
                request_id=f"{tag}{i}",
                conversation_id="",
                arrival_s=at_s + i * gap_s,
                prompt_tokens=prompt_tokens,
                max_tokens=max_tokens,
                hashes=block_hashes(ids, block_size),
            )
        )
    return out
