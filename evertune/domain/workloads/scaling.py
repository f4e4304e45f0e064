"""Scaling a plan in rate and in time (pure; reproducible from a seed).

`scale(plan, rate=r, time=k)`:

- `time=k` plays the plan k times as fast: every `at_s` becomes `at_s / k`. Everything happens
  sooner, gaps between a call's turns included, so the request rate also grows k times.
- `rate=r` changes how many conversations there are over the same time: the unit is a whole
  conversation (all turns of a call; a request with no conversation is a unit by itself), so
  histories stay whole.
  - r < 1 keeps each unit with probability r (independent thinning: a Poisson process of
    conversations stays a Poisson process, at r times the rate).
  - r > 1 keeps every unit and adds floor(r) - 1 copies of it, plus one more with probability
    r - floor(r). A copy moves by an offset drawn uniformly from [-jitter_s, +jitter_s]
    (wrapped around within the plan's span, so the plan's length is kept) and gets ids suffixed
    `~r{n}` and the tag `replica`. A copy must not be a cache hit on its original, so its
    text is made distinct: the words of each user and assistant message (or of a completions prompt
    after its shared prefix, `prefix_chars`) are permuted within blocks of 8, the first word kept,
    the same way for the same text. System prompts and shared prefixes stay as they are; a
    conversation's later turns still extend its earlier ones; word counts are unchanged (token
    counts too for tokenizers that split at whitespace).
  Copies of a Poisson process are not quite independent of it; for synthetic workloads the exact way
  up is to plan again at a higher rate (`VoiceWorkload.scaled(calls=r)`).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import replace

from evertune.domain.workloads.errors import WorkloadError
from evertune.domain.workloads.plan import ChatMessage, PlannedRequest
from evertune.domain.workloads.seeding import derive
from evertune.domain.workloads.tags import PREFIX_CHARS, REPLICA

#: Words per block when a copy's text is permuted.
SHUFFLE_BLOCK_WORDS = 8
#: Longest default jitter of a copy, in seconds (a quarter of the plan's span when that is shorter).
DEFAULT_MAX_JITTER_S = 60.0

_WHITESPACE = re.compile(r"(\s+)")


def scale(
    plan: Sequence[PlannedRequest],
    *,
    rate: float = 1.0,
    time: float = 1.0,
    seed: int = 0,
    jitter_s: float | None = None,
) -> list[PlannedRequest]:
    """`plan` with `rate` times the conversations and played `time` times as fast (see the module doc).

    `jitter_s` bounds how far a copy moves (default: the shorter of 60 s and a quarter of the span).
    `scale(plan)` is the plan itself, sorted by `at_s`.
    """
    if not (math.isfinite(rate) and rate > 0):
        raise WorkloadError(f"rate must be a positive number, not {rate}")
    if not (math.isfinite(time) and time > 0):
        raise WorkloadError(f"time must be a positive number, not {time}")
    if jitter_s is not None and not (math.isfinite(jitter_s) and jitter_s >= 0):
        raise WorkloadError(f"jitter_s must be >= 0, not {jitter_s}")
    ordered = sorted(plan, key=lambda request: request.at_s)
    if not ordered:
        return []
    first, last = ordered[0].at_s, ordered[-1].at_s
    span = last - first
    jitter = min(DEFAULT_MAX_JITTER_S, span / 4) if jitter_s is None else jitter_s

    units: dict[str, list[PlannedRequest]] = {}
    for index, request in enumerate(ordered):
        units.setdefault(request.conversation_id or f"\0{index}", []).append(request)

    rng = derive(seed, "scale")
    whole = math.floor(rate)
    disguises: dict[int, _Disguise] = {}
    out: list[PlannedRequest] = []
    for unit in units.values():
        copies = whole + (1 if rng.random() < rate - whole else 0)
        if copies >= 1:
            out.extend(unit)
        for replica in range(1, copies):
            start = unit[0].at_s
            moved = start + rng.uniform(-jitter, jitter)
            if span > 0:
                moved = first + (moved - first) % span
            disguise = disguises.setdefault(replica, _Disguise(derive(seed, "scale", "replica", replica)))
            out.extend(
                _copy(request, replica=replica, shift_s=moved - start, disguise=disguise) for request in unit
            )
    if time != 1.0:
        out = [replace(request, at_s=request.at_s / time) for request in out]
    out.sort(key=lambda request: request.at_s)
    return out


def _copy(request: PlannedRequest, *, replica: int, shift_s: float, disguise: _Disguise) -> PlannedRequest:
    """Copy `replica` of `request`: moved, renamed, its own text distinct from the original's."""
    messages = tuple(
        message
        if message.role == "system"
        else ChatMessage(role=message.role, content=disguise(message.content))
        for message in request.messages
    )
    keep = int(request.tags.get(PREFIX_CHARS, "0"))
    prompt = request.prompt[:keep] + disguise(request.prompt[keep:]) if request.prompt else ""
    return replace(
        request,
        at_s=max(0.0, request.at_s + shift_s),
        request_id=f"{request.request_id}~r{replica}",
        conversation_id=f"{request.conversation_id}~r{replica}" if request.conversation_id else "",
        messages=messages,
        prompt=prompt,
        tags={**request.tags, REPLICA: str(replica)},
    )


class _Disguise:
    """Permutes the words of a text within blocks, the same way for the same text and block position."""

    def __init__(self, rng: random.Random) -> None:
        self._seed = rng.getrandbits(64)
        self._permutations: dict[tuple[int, int], list[int]] = {}
        self._done: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        if text not in self._done:
            self._done[text] = self._disguise(text)
        return self._done[text]

    def _disguise(self, text: str) -> str:
        parts = _WHITESPACE.split(text)  # words at even positions, the whitespace between at odd ones
        words = [index for index in range(0, len(parts), 2) if parts[index]]
        for block, begin in enumerate(range(0, len(words), SHUFFLE_BLOCK_WORDS)):
            movable = words[begin : begin + SHUFFLE_BLOCK_WORDS][1 if block == 0 else 0 :]
            if len(movable) < 2:
                continue
            values = [parts[index] for index in movable]
            for index, source in zip(movable, self._permutation(block, len(movable)), strict=True):
                parts[index] = values[source]
        return "".join(parts)

    def _permutation(self, block: int, size: int) -> list[int]:
        """A permutation of `size` positions other than the identity, fixed for (block % 64, size)."""
        key = (block % 64, size)
        if key not in self._permutations:
            rng = random.Random(f"{self._seed}:{key[0]}:{size}")
            order = list(range(size))
            while order == sorted(order):
                rng.shuffle(order)
            self._permutations[key] = order
        return self._permutations[key]
