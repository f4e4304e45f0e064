"""What a workload produces and a replay consumes: requests planned at a time, and their text.

A workload (voice agent, trace file) yields `PlannedRequest`s in order of `at_s`; the replay client
sends each at its time (open loop) whatever happened to earlier ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class ChatMessage:
    """One message of a chat request."""

    role: Literal["system", "user", "assistant"]  #: OpenAI chat role
    content: str  #: the text (workload-generated; never stored in telemetry)


@dataclass(frozen=True)
class PlannedRequest:
    """One request of a workload, planned at a time relative to the start of the replay."""

    at_s: float  #: when to send it, seconds after the replay starts (before rate/time scaling)
    request_id: str  #: unique within the plan; deterministic for a seed
    api: Literal["chat", "completions"]  #: which OpenAI API to call
    max_tokens: int  #: output tokens asked for (`max_tokens`; `ignore_eos` where the target takes it)
    messages: tuple[ChatMessage, ...] = ()  #: for `chat`: system prompt, history, user utterance
    prompt: str = ""  #: for `completions`: the prompt text
    conversation_id: str = ""  #: calls/conversations this request belongs to ("" = none)
    turn: int = 0  #: 0-based turn within its conversation
    prompt_tokens: int = 0  #: prompt length in tokens when the workload knows it (0 = unknown)
    tags: dict[str, str] = field(default_factory=dict)  #: free labels (agent id, phase), for reports


def history(request: PlannedRequest) -> tuple[ChatMessage, ...]:
    """The messages of a chat turn that its conversation's earlier turns already sent: all but the
    last (the new user utterance), when the request is a later turn (`turn > 0`); else none.

    An engine serving the conversation live has them in its prefix cache (the previous turn's prompt
    and its answer); a replay that starts in mid-conversation primes them (`evertune.domain.replay.priming`).
    """
    if request.api != "chat" or request.turn == 0 or len(request.messages) < 2:
        return ()
    return request.messages[:-1]
