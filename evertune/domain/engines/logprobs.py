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


#: How vLLM writes a token under `return_tokens_as_token_ids`.
TOKEN_ID_PREFIX = "token_id:"


def completion_token_ids(choice: dict[str, Any]) -> tuple[list[int], list[list[int]]]:
    """A completion's token ids and, at each position, its top alternatives' ids (best first),
    from its logprobs: vLLM writes ids as `token_id:<n>` texts (`return_tokens_as_token_ids`),
    llama.cpp gives each entry an `id`. The end-of-turn token, where the model stopped on it, is
    the last id (both engines list it).

    Raises `InvalidArgument` (one line) where the logprobs carry no ids."""
    logprobs = choice.get("logprobs")
    if not logprobs:
        raise InvalidArgument("the completion has no logprobs to read its token ids from")
    if "content" in logprobs:
        entries = logprobs["content"] or []
        return (
            [_entry_id(entry) for entry in entries],
            [[_entry_id(alt) for alt in _ranked(entry.get("top_logprobs") or [])] for entry in entries],
        )
    if "tokens" in logprobs:
        tops = logprobs.get("top_logprobs") or [{}] * len(logprobs["tokens"])
        return (
            [_id_of_text(str(token)) for token in logprobs["tokens"]],
            [
                [_id_of_text(alt) for alt, _ in sorted((top or {}).items(), key=lambda kv: -kv[1])]
                for top in tops
            ],
        )
    raise InvalidArgument(f"completion logprobs in an unknown form (keys: {', '.join(sorted(logprobs))})")


def _ranked(alternatives: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(alternatives, key=lambda alt: -float(alt["logprob"]))


def _entry_id(entry: dict[str, Any]) -> int:
    if isinstance(entry.get("id"), int):
        return int(entry["id"])
    return _id_of_text(str(entry.get("token", "")))


def _id_of_text(token: str) -> int:
    if not token.startswith(TOKEN_ID_PREFIX):
        raise InvalidArgument(f"a logprob token is text ({token[:20]!r}), not an id: ask for token ids")
    return int(token.removeprefix(TOKEN_ID_PREFIX))
