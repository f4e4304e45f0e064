"""Server-sent events as OpenAI-compatible servers stream them, and what one chunk says (pure).

`SseDecoder` turns the bytes of a response body, in whatever pieces the socket delivers them, into
the `data` payloads of complete events (the SSE rules: lines end in LF, CRLF or CR; `data:` with one
optional space; several `data:` lines of one event are joined with LF; a blank line ends an event;
lines starting with `:` are comments; other fields are ignored). `read_chunk` interprets one
payload of `/v1/chat/completions` or `/v1/completions` without keeping any text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DONE = "[DONE]"  #: the payload that ends an OpenAI stream


class SseDecoder:
    """Incremental SSE decoder: `feed(bytes)` returns the payloads of the events it completed."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._pending_cr = False

    def feed(self, data: bytes) -> list[str]:
        """Add bytes; return the `data` payloads of the events that ended in them, in order."""
        if self._pending_cr and data.startswith(b"\n"):
            data = data[1:]  # the LF of a CRLF split across two reads
        self._pending_cr = False
        buffer = self._buffer + data
        events: list[str] = []
        start = 0
        size = len(buffer)
        while start < size:
            lf = buffer.find(b"\n", start)
            cr = buffer.find(b"\r", start, lf if lf >= 0 else size)
            if cr >= 0:
                end, step = cr, 1
                if cr + 1 < size and buffer[cr + 1 : cr + 2] == b"\n":
                    step = 2
                elif cr + 1 == size:
                    self._pending_cr = True
            elif lf >= 0:
                end, step = lf, 1
            else:
                break
            self._line(buffer[start:end], events)
            start = end + step
        self._buffer = buffer[start:]
        return events

    def close(self) -> list[str]:
        """End of the body: an event not closed by a blank line is dispatched all the same."""
        events: list[str] = []
        if self._buffer:
            self._line(self._buffer, events)
            self._buffer = b""
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[str]) -> None:
        if not line:
            if self._data:
                events.append("\n".join(self._data))
                self._data = []
            return
        if line.startswith(b":"):
            return
        name, colon, value = line.partition(b":")
        if name != b"data":
            return  # `event:`, `id:`, `retry:` carry nothing an OpenAI stream needs
        if colon and value.startswith(b" "):
            value = value[1:]
        self._data.append(value.decode("utf-8", errors="replace"))


@dataclass(frozen=True)
class Chunk:
    """What one streamed payload says, without its text."""

    done: bool = False  #: the `[DONE]` sentinel
    content: bool = False  #: carries generated text (content, reasoning, or completion text)
    prompt_tokens: int | None = None  #: from a `usage` object, when the chunk has one
    completion_tokens: int | None = None  #: from a `usage` object, when the chunk has one
    error: str = ""  #: an `error` object's message, when the server reports an error in-stream


class BadChunk(ValueError):
    """A payload that is neither `[DONE]` nor a JSON object."""


def _has_text(choice: Any) -> bool:
    if not isinstance(choice, dict):
        return False
    if choice.get("text"):  # /v1/completions
        return True
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return False
    # vLLM's reasoning parsers stream the thinking as `reasoning_content` (older) or `reasoning`.
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"))


def read_chunk(payload: str) -> Chunk:
    """Interpret one `data` payload of a chat or completions stream. Raises `BadChunk`."""
    if payload.strip() == DONE:
        return Chunk(done=True)
    try:
        body = json.loads(payload)
    except ValueError as err:
        raise BadChunk(f"not JSON: {err}") from None
    if not isinstance(body, dict):
        raise BadChunk("not a JSON object")
    error = body.get("error")
    if error:
        message = error.get("message", "") if isinstance(error, dict) else str(error)
        return Chunk(error=" ".join(str(message).split())[:200] or "error")
    choices = body.get("choices") or ()
    content = any(_has_text(choice) for choice in choices) if isinstance(choices, list) else False
    usage = body.get("usage")
    if isinstance(usage, dict):
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        return Chunk(
            content=content,
            prompt_tokens=prompt if isinstance(prompt, int) else None,
            completion_tokens=completion if isinstance(completion, int) else None,
        )
    return Chunk(content=content)
