"""A replayable trace from telemetry (pure): evertune's JSONL records, lengths, arrivals, prefixes.

Each request sample becomes one `TraceRecord` (see docs/workloads.md):

- `at_s`: seconds after the first sampled arrival; `max_tokens`: its output length (at least 1);
  `prompt_tokens`: its prompt length; `api`: as recorded ("chat" when unknown);
- conversations come from the prefix chains (`profile.chain_structure`): requests of a chain of
  two or more turns share a `conversation_id` ("c" + its first request's id) and count `turn`s
  from 0; a request in no chain has none;
- the prefix a conversation (or a standalone request) shares with others becomes its
  `prefix_group` ("g" + the hex of the chain hash of the last shared block, so the same block
  prefix gets the same group) with `prefix_tokens` = shared blocks x block tokens;
- turn k's `history_tokens` is turn k-1's prompt after the prefix plus the answer between them
  (turn k-1's output length, as far as turn k's prompt grew); `new_tokens` is the rest, so
  `prefix + history + new = prompt_tokens` and replayed text grows turn on turn as it did.

`plan_records` then gives every group one prefix text and every conversation one growing text, so
a replay sends the same lengths at the same times with the same sharing. The prefix text shared
between groups that nest (one group's prefix is a prefix of another's) is not kept: each group gets
text of its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from evertune.domain.workloads.jsonl import TraceRecord, format_record
from evertune.profiler.profile import RequestSample, Structure, chain_structure


def trace_records(
    samples: Sequence[RequestSample],
    *,
    block_tokens: int,
    horizon_s: float = 600.0,
    structure: Structure | None = None,
) -> list[TraceRecord]:
    """The JSONL records of `samples`, by arrival."""
    if not samples:
        return []
    if structure is None:
        structure = chain_structure(samples, horizon_s=horizon_s)
    start = min(s.start_s for s in samples)
    conversation_size: dict[int, int] = {}
    for c in structure.conversation:
        conversation_size[c] = conversation_size.get(c, 0) + 1
    records: list[TraceRecord] = []
    for i in structure.order:
        sample = samples[i]
        head = structure.conversation[i]
        first = samples[head]
        prompt = max(1, sample.prompt_tokens)
        shared = structure.shared_blocks[i]
        prefix = min(shared * block_tokens, first.prompt_tokens, prompt)
        group = f"g{first.prefix_hashes[shared - 1]:016x}" if prefix > 0 else ""
        parent = structure.parent[i]
        if parent >= 0:
            before = max(0, min(samples[parent].prompt_tokens, prompt) - prefix)
            grew = max(0, prompt - prefix - before)
            history = before + min(samples[parent].completion_tokens, grew)
        else:
            history = 0
        new = prompt - prefix - history
        in_conversation = conversation_size[head] >= 2
        records.append(
            TraceRecord(
                at_s=round(sample.start_s - start, 6),
                request_id=sample.request_id,
                api="completions" if sample.api == "completions" else "chat",
                max_tokens=max(1, sample.completion_tokens),
                prompt_tokens=prompt,
                conversation_id=f"c{first.request_id}" if in_conversation else "",
                turn=structure.turn[i] if in_conversation else 0,
                prefix_group=group,
                prefix_tokens=prefix,
                history_tokens=history,
                new_tokens=new,
            )
        )
    return records


def trace_text(records: Iterable[TraceRecord]) -> str:
    """The JSONL text of `records` (one line each, newline-terminated)."""
    return "".join(format_record(record) + "\n" for record in records)


def trace_sha256(text: str) -> str:
    """SHA-256 (hex) of a trace's text as stored."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
