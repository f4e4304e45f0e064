"""evertune's own trace format: JSON lines of timed requests with their prefix structure, no text.

One JSON object a line (see docs/workloads.md for the table):

    {"at_s":12.5,"request_id":"r-17","api":"chat","max_tokens":32,"prompt_tokens":1210,
     "conversation_id":"c-4","turn":2,"prefix_group":"agent-a1","prefix_tokens":1050,
     "history_tokens":140,"new_tokens":20,"tags":{"agent":"a1"}}

A prompt is `prefix + history + new`: `prefix_tokens` of a prefix shared by every request of
`prefix_group` (an agent's system prompt), `history_tokens` of the conversation so far, and
`new_tokens` of new text; `prompt_tokens` may exceed their sum by the chat template's own tokens.
The profiler exports this from telemetry (which holds no text); `plan_records` makes text back:

- the same (`prefix_group`, `prefix_tokens`) always gets the same prefix text, so prefix caching
  sees what it saw in production;
- a conversation's text is one growing stream: a turn's history is the stream up to
  `history_tokens`, its new text the next `new_tokens`; what lies between one turn's end and the
  next turn's history is the answer (an assistant message in chat). So turn k+1 starts with turn k's
  whole prompt, as in production. A history that does not end where an earlier turn's text did
  (it shrank, say, after truncation) gets fresh text that shares nothing.

Text is made by `make_text(n_tokens, rng)`; consecutive pieces are joined by one space, so token
counts add up for tokenizers that split at whitespace (and come within a token a piece otherwise).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from evertune.domain.workloads.errors import WorkloadError
from evertune.domain.workloads.plan import ChatMessage, PlannedRequest
from evertune.domain.workloads.report import BadLines, ReadReport
from evertune.domain.workloads.seeding import derive
from evertune.domain.workloads.tags import PREFIX_CHARS, PREFIX_GROUP
from evertune.domain.workloads.text import MakeText
from evertune.domain.workloads.trace import TraceLoad


@dataclass(frozen=True)
class TraceRecord:
    """One line of an evertune JSONL trace: a timed request and the shape of its prompt, no text."""

    at_s: float  #: seconds after the start of the trace (>= 0)
    request_id: str  #: unique within the trace
    api: Literal["chat", "completions"]  #: which OpenAI API the request used
    max_tokens: int  #: output tokens asked for (>= 1)
    prompt_tokens: int  #: prompt length in tokens as the server counted it (>= 1)
    conversation_id: str = ""  #: the conversation (call) it belongs to; "" = none
    turn: int = 0  #: 0-based turn within the conversation
    prefix_group: str = ""  #: id of the shared prefix it starts with (an agent's system prompt); "" = none
    prefix_tokens: int = 0  #: length of that shared prefix in tokens
    history_tokens: int = 0  #: tokens of the conversation so far, after the prefix
    new_tokens: int = 0  #: tokens of new text (the user's utterance), after the history
    tags: dict[str, str] = field(default_factory=dict)  #: free labels, kept as they are


def format_record(record: TraceRecord) -> str:
    """One JSONL line (no newline): every field, `tags` only when there are some."""
    data: dict[str, object] = {
        "at_s": record.at_s,
        "request_id": record.request_id,
        "api": record.api,
        "max_tokens": record.max_tokens,
        "prompt_tokens": record.prompt_tokens,
        "conversation_id": record.conversation_id,
        "turn": record.turn,
        "prefix_group": record.prefix_group,
        "prefix_tokens": record.prefix_tokens,
        "history_tokens": record.history_tokens,
        "new_tokens": record.new_tokens,
    }
    if record.tags:
        data["tags"] = dict(record.tags)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def parse_jsonl(
    lines: Iterable[str],
    *,
    source: str = "trace",
    strict: bool = False,
    backwards_tolerance_s: float = 1.0,
) -> tuple[list[TraceRecord], ReadReport]:
    """The good records of a JSONL trace (in file order) and the report of the read.

    Required fields: at_s, request_id, api, max_tokens, prompt_tokens; the rest default as in
    `TraceRecord`, except `new_tokens`, which defaults to what `prompt_tokens` leaves after prefix
    and history. Unknown fields are ignored. A line is bad when it is not a JSON object, a field has
    the wrong type or range, prefix + history + new exceed prompt_tokens or come to 0, a prefix has
    no group, a request_id repeats, or at_s goes back more than `backwards_tolerance_s` behind the
    latest so far. `strict` raises a `WorkloadError` naming the first bad line; otherwise bad lines
    are left out and counted.
    """
    if not backwards_tolerance_s >= 0:
        raise WorkloadError(f"backwards_tolerance_s must be >= 0, not {backwards_tolerance_s}")
    bad = BadLines(source=source)
    records: list[TraceRecord] = []
    seen: dict[str, int] = {}
    latest = 0.0
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            record = _record(text.lstrip("\ufeff") if number == 1 else text)
            if record.request_id in seen:
                raise _LineError(f"request_id {record.request_id!r} repeats line {seen[record.request_id]}")
            if record.at_s < latest - backwards_tolerance_s:
                raise _LineError(
                    f"at_s goes back {latest - record.at_s:.3f} s (tolerance {backwards_tolerance_s:g} s)"
                )
        except _LineError as err:
            bad.add(number, str(err))
            continue
        seen[record.request_id] = number
        latest = max(latest, record.at_s)
        records.append(record)
    return records, bad.report(rows=len(records), strict=strict)


def read_jsonl(
    path: str | Path, *, strict: bool = False, backwards_tolerance_s: float = 1.0
) -> tuple[list[TraceRecord], ReadReport]:
    """`parse_jsonl` on a file."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as lines:
            return parse_jsonl(
                lines, source=path.name, strict=strict, backwards_tolerance_s=backwards_tolerance_s
            )
    except OSError as err:
        raise WorkloadError(f"cannot read trace {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise WorkloadError(f"trace {path} is not UTF-8 text") from None


def write_jsonl(path: str | Path, records: Iterable[TraceRecord]) -> int:
    """Write records to `path`, one a line (the file is replaced); returns how many."""
    path = Path(path)
    count = 0
    try:
        with path.open("w", encoding="utf-8") as out:
            for record in records:
                out.write(format_record(record) + "\n")
                count += 1
    except OSError as err:
        raise WorkloadError(f"cannot write trace {path}: {err.strerror or err}") from None
    return count


def load_jsonl_trace(
    path: str | Path,
    *,
    make_text: MakeText,
    seed: int = 0,
    strict: bool = False,
    backwards_tolerance_s: float = 1.0,
) -> TraceLoad:
    """Read a JSONL trace and plan its requests (`read_jsonl`, then `plan_records`)."""
    records, report = read_jsonl(path, strict=strict, backwards_tolerance_s=backwards_tolerance_s)
    return TraceLoad(plan=plan_records(records, make_text=make_text, seed=seed), report=report)


def plan_records(
    records: Iterable[TraceRecord], *, make_text: MakeText, seed: int = 0
) -> list[PlannedRequest]:
    """Requests with deterministic text of the records' structure, by `at_s` (see the module doc).

    chat: a system message holding the prefix, then the history as alternating assistant (answers)
    and user (earlier utterances) messages, then the new text as a user message. completions: the
    same pieces joined by spaces. Tags `prefix_group` and `prefix_chars` mark the prefix.
    """
    plan: list[PlannedRequest] = []
    for record, prefix, pieces in prompt_parts(records, make_text=make_text, seed=seed):
        tags = dict(record.tags)
        if prefix:
            tags[PREFIX_GROUP] = record.prefix_group
            tags[PREFIX_CHARS] = str(len(prefix))
        messages: list[ChatMessage] = []
        prompt = ""
        if record.api == "chat":
            messages = [ChatMessage(role="system", content=prefix)] if prefix else []
            for piece in pieces:
                if messages and messages[-1].role == piece.role:
                    messages[-1] = ChatMessage(
                        role=piece.role, content=f"{messages[-1].content} {piece.text}"
                    )
                else:
                    messages.append(ChatMessage(role=piece.role, content=piece.text))
        else:
            prompt = " ".join(text for text in [prefix, *(piece.text for piece in pieces)] if text)
        plan.append(
            PlannedRequest(
                at_s=record.at_s,
                request_id=record.request_id,
                api=record.api,
                max_tokens=record.max_tokens,
                messages=tuple(messages),
                prompt=prompt,
                conversation_id=record.conversation_id,
                turn=record.turn,
                prompt_tokens=record.prompt_tokens,
                tags=tags,
            )
        )
    return plan


def prompt_parts(
    records: Iterable[TraceRecord], *, make_text: MakeText, seed: int = 0
) -> Iterator[tuple[TraceRecord, str, list[Piece]]]:
    """Each record (by `at_s`) with the text of its prompt in parts: the shared prefix ("" for none)
    and the conversation's pieces after it (see the module doc for when they repeat)."""
    prefixes: dict[tuple[str, int], str] = {}
    streams: dict[str, _Stream] = {}
    for record in sorted(records, key=lambda record: record.at_s):
        prefix = ""
        if record.prefix_tokens > 0:
            key = (record.prefix_group, record.prefix_tokens)
            if key not in prefixes:
                prefixes[key] = make_text(key[1], derive(seed, "prefix", key[0], key[1]))
            prefix = prefixes[key]
        if record.conversation_id:
            if record.conversation_id not in streams:
                streams[record.conversation_id] = _Stream(
                    make_text, derive(seed, "conversation", record.conversation_id)
                )
            stream = streams[record.conversation_id]
        else:
            stream = _Stream(make_text, derive(seed, "request", record.request_id))
        yield record, prefix, stream.take(history=record.history_tokens, new=record.new_tokens)


def records_of_plan(
    plan: Iterable[PlannedRequest], *, count_tokens: Callable[[str], int]
) -> list[TraceRecord]:
    """The JSONL records of a plan: its structure in tokens, without its text.

    chat: the leading system messages are the prefix (group: the `prefix_group` tag, else
    `sys-` and a hash of their text), a final user message is the new text, the rest is history.
    completions: the prefix is marked by the `prefix_group`/`prefix_chars` tags; the rest is new
    text. `prompt_tokens` is the request's own when known, else the sum of the parts.
    """
    records: list[TraceRecord] = []
    for request in plan:
        tags = {key: value for key, value in request.tags.items() if key not in (PREFIX_GROUP, PREFIX_CHARS)}
        if request.api == "chat":
            messages = request.messages
            cut = 0
            while cut < len(messages) and messages[cut].role == "system":
                cut += 1
            prefix = " ".join(message.content for message in messages[:cut])
            rest = messages[cut:]
            new = count_tokens(rest[-1].content) if rest and rest[-1].role == "user" else 0
            history_messages = rest[:-1] if rest and rest[-1].role == "user" else rest
            history = sum(count_tokens(message.content) for message in history_messages)
        else:
            chars = int(request.tags.get(PREFIX_CHARS, "0"))
            prefix = request.prompt[:chars]
            history = 0
            new = count_tokens(request.prompt[chars:]) if request.prompt[chars:].strip() else 0
        prefix_tokens = count_tokens(prefix) if prefix else 0
        group = ""
        if prefix_tokens:
            group = (
                request.tags.get(PREFIX_GROUP) or f"sys-{hashlib.sha256(prefix.encode()).hexdigest()[:12]}"
            )
        records.append(
            TraceRecord(
                at_s=request.at_s,
                request_id=request.request_id,
                api=request.api,
                max_tokens=request.max_tokens,
                prompt_tokens=request.prompt_tokens or max(1, prefix_tokens + history + new),
                conversation_id=request.conversation_id,
                turn=request.turn,
                prefix_group=group,
                prefix_tokens=prefix_tokens,
                history_tokens=history,
                new_tokens=new,
                tags=tags,
            )
        )
    return records


def format_records(records: Iterable[TraceRecord]) -> Iterator[str]:
    """The JSONL lines of `records`, each ending with a newline."""
    for record in records:
        yield format_record(record) + "\n"


class _LineError(Exception):
    """A line is bad; the message says why (becomes a `BadLine`)."""


def _record(text: str) -> TraceRecord:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise _LineError(f"not JSON: {err.msg} at column {err.colno}") from None
    if not isinstance(data, dict):
        raise _LineError(f"not a JSON object but {type(data).__name__}")
    for name in ("at_s", "request_id", "api", "max_tokens", "prompt_tokens"):
        if name not in data:
            raise _LineError(f"{name} is missing")
    at_s = data["at_s"]
    if isinstance(at_s, bool) or not isinstance(at_s, int | float) or not math.isfinite(at_s) or at_s < 0:
        raise _LineError(f"at_s must be a number of seconds >= 0, not {at_s!r}")
    api = data["api"]
    if api not in ("chat", "completions"):
        raise _LineError(f"api must be 'chat' or 'completions', not {api!r}")
    request_id = _string(data, "request_id", default=None)
    if not request_id:
        raise _LineError("request_id is empty")
    prompt_tokens = _count(data, "prompt_tokens", least=1)
    prefix_tokens = _count(data, "prefix_tokens", least=0, default=0)
    history_tokens = _count(data, "history_tokens", least=0, default=0)
    if "new_tokens" in data:
        new_tokens = _count(data, "new_tokens", least=0)
    else:
        new_tokens = prompt_tokens - prefix_tokens - history_tokens
    parts = prefix_tokens + history_tokens + new_tokens
    if parts > prompt_tokens or new_tokens < 0:
        raise _LineError(
            f"prefix_tokens + history_tokens + new_tokens ({max(parts, prefix_tokens + history_tokens)})"
            f" exceed prompt_tokens ({prompt_tokens})"
        )
    if parts < 1:
        raise _LineError("prefix_tokens + history_tokens + new_tokens come to 0: no text to send")
    prefix_group = _string(data, "prefix_group", default="")
    if prefix_tokens and not prefix_group:
        raise _LineError("prefix_tokens without a prefix_group")
    tags = data.get("tags", {})
    if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
        raise _LineError("tags must be an object of strings")
    return TraceRecord(
        at_s=float(at_s),
        request_id=request_id,
        api=api,
        max_tokens=_count(data, "max_tokens", least=1),
        prompt_tokens=prompt_tokens,
        conversation_id=_string(data, "conversation_id", default=""),
        turn=_count(data, "turn", least=0, default=0),
        prefix_group=prefix_group,
        prefix_tokens=prefix_tokens,
        history_tokens=history_tokens,
        new_tokens=new_tokens,
        tags={str(k): v for k, v in tags.items()},
    )


def _count(data: dict[str, object], name: str, *, least: int, default: int | None = None) -> int:
    value = data.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _LineError(f"{name} must be a whole number, not {value!r}")
    if value < least:
        raise _LineError(f"{name} must be at least {least}, not {value}")
    return value


def _string(data: dict[str, object], name: str, *, default: str | None) -> str:
    value = data.get(name, default)
    if not isinstance(value, str):
        raise _LineError(f"{name} must be a string, not {value!r}")
    return value


@dataclass(frozen=True)
class Piece:
    """A stretch of a conversation's text."""

    role: Literal["user", "assistant"]  #: user: a turn's new text; assistant: what came between turns
    tokens: int  #: its length in tokens
    text: str  #: the text


class _Stream:
    """The growing text of one conversation, in pieces whose boundaries are where turns ended."""

    def __init__(self, make_text: MakeText, rng: random.Random) -> None:
        self._make_text = make_text
        self._rng = rng
        self._pieces: list[Piece] = []

    def take(self, *, history: int, new: int) -> list[Piece]:
        """The pieces of a prompt with `history` tokens of the conversation and then `new` new ones."""
        end = self._boundary(history)
        if end is None:  # the history ends inside text already made: it cannot be cut; start afresh
            return [p for p in (self._fresh("assistant", history), self._fresh("user", new)) if p.tokens]
        head = self._pieces[:end]
        if new == 0:
            return head
        if end == len(self._pieces):
            self._pieces.append(self._fresh("user", new))
            return [*head, self._pieces[end]]
        following = self._pieces[end]
        if following.role == "user" and following.tokens == new:  # the same turn again (a retry)
            return [*head, following]
        return [*head, self._fresh("user", new)]

    def _boundary(self, tokens: int) -> int | None:
        """How many pieces make `tokens` tokens, growing the stream by an answer when it is shorter."""
        total = 0
        for index, piece in enumerate(self._pieces):
            if total == tokens:
                return index
            total += piece.tokens
        if total == tokens:
            return len(self._pieces)
        if total > tokens:
            return None
        self._pieces.append(self._fresh("assistant", tokens - total))
        return len(self._pieces)

    def _fresh(self, role: Literal["user", "assistant"], tokens: int) -> Piece:
        return Piece(role=role, tokens=tokens, text=self._make_text(tokens, self._rng) if tokens > 0 else "")
