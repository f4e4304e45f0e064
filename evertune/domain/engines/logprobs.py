"""The logprobs of a `/v1/completions` answer in one form, whichever engine wrote them.

Engines answer `"logprobs": k` on `/v1/completions` in two forms:

- OpenAI's legacy completions form (vLLM): `{"tokens": [...], "token_logprobs": [...],
  "top_logprobs": [{token: logprob, ...}, ...]}`;
- the chat form (llama.cpp's server, for completions too): `{"content": [{"id", "token",
  "logprob", "top_logprobs": [{"id", "token", "logprob"}, ...]}, ...]}`.

`completion_logprobs` reads either into `Position`s, so whatever compares answers (the correctness
gate, the engine contract) is written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evertune.errors import InvalidArgument


@dataclass(frozen=True)
class Position:
    """One generated token and the engine's top alternatives there."""

    token: str  #: the token's text
    logprob: float  #: its log probability
    top: tuple[tuple[str, float], ...]  #: the top-k alternatives (text, logprob), best first


def completion_logprobs(choice: dict[str, Any]) -> list[Position]:
    """The positions of a completion choice's `logprobs` (see the module doc); [] when it has none.

    Raises `InvalidArgument` (one line) for logprobs in neither form."""
    logprobs = choice.get("logprobs")
    if not logprobs:
        return []
    if "content" in logprobs:
        return [
            Position(
                token=str(entry["token"]),
                logprob=float(entry["logprob"]),
                top=_best_first(
                    (str(alt["token"]), float(alt["logprob"])) for alt in entry.get("top_logprobs") or []
                ),
            )
            for entry in logprobs["content"] or []
        ]
    if "tokens" in logprobs and "token_logprobs" in logprobs:
        tops = logprobs.get("top_logprobs") or [{}] * len(logprobs["tokens"])
        return [
            Position(
                token=str(token),
                logprob=float(logprob),
                top=_best_first((str(alt), float(value)) for alt, value in (top or {}).items()),
            )
            for token, logprob, top in zip(logprobs["tokens"], logprobs["token_logprobs"], tops, strict=True)
        ]
    raise InvalidArgument(f"completion logprobs in an unknown form (keys: {', '.join(sorted(logprobs))})")


def _best_first(alternatives: Any) -> tuple[tuple[str, float], ...]:
    return tuple(sorted(alternatives, key=lambda alt: -alt[1]))
