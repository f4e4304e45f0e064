"""From a workload's planned requests to what the simulator needs: arrival, lengths, block hashes.

A prompt's token ids come from the model's own chat format (`evertune.domain.model.chat`: its
chat template and tokenizer, ChatML for SmolLM2, evertune's `<|begin|>`/`<|role|>` layout for the
random-weight models), encoded piece by piece with a cache, so a voice workload, which resends the
same system prompt and history turn after turn, costs one encode per new message. Block hashes are
chained: block i's hash covers its token ids and block i-1's hash, so equal hashes mean equal
prefixes (as vLLM's block hashes do).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evertune.domain.model.chat import ChatFormat, chat_format
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
    """Token ids of planned requests' prompts, in the model's chat format, with its cache."""

    def __init__(self, chat: ChatFormat) -> None:
        self.chat = chat

    @classmethod
    def of_folder(cls, model_dir: Path) -> PromptTokens:
        """The prompt tokens of the model in `model_dir` (its chat format, shared in the process)."""
        return cls(chat_format(model_dir))

    def text(self, text: str) -> list[int]:
        """Ids of `text` (no special tokens added), cached."""
        return self.chat.ids_of_text(text)

    def prompt(self, request: PlannedRequest) -> list[int]:
        """Ids of the request's whole prompt, as the engine sees it."""
        return self.prompt_with_history(request)[0]

    def prompt_with_history(self, request: PlannedRequest) -> tuple[list[int], int]:
        """Ids of the request's whole prompt, and how many of them lead with its history (the
        earlier turns' messages as the template lays them out, without a generation prompt)."""
        if request.api == "completions":
            return self.text(request.prompt), 0
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        ids = self.chat.ids(messages)
        earlier = len(history(request))
        if not earlier:
            return ids, 0
        before = self.chat.ids(messages[:earlier], add_generation_prompt=False)
        shared = 0
        for a, b in zip(before, ids, strict=False):
            if a != b:
                break
            shared += 1
        return ids, shared


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
