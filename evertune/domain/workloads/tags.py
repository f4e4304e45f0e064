"""Names of the tags workloads put on `PlannedRequest.tags`.

Most are labels for reports. Two carry structure a completions prompt cannot show by itself:
`prefix_group` and `prefix_chars` say that the first `prefix_chars` characters of `prompt` are the
shared prefix of that group (the JSONL reader sets them; `scale` keeps that part when it makes a
replica's text distinct, and `records_of_plan` turns it back into `prefix_tokens`).
"""

from __future__ import annotations

WORKLOAD = "workload"  #: which workload made the request: "voice", "trace", "jsonl"
AGENT = "agent"  #: the voice agent of the call ("a0", "a1", ...)
LINE = "line"  #: the trace line the request came from
CLIPPED_FROM = "clipped_from"  #: the trace's prompt length, when `max_context_tokens` cut it
PREFIX_GROUP = "prefix_group"  #: the shared prefix (system prompt) the request starts with
PREFIX_CHARS = "prefix_chars"  #: length in characters of that prefix at the start of `prompt`
REPLICA = "replica"  #: which copy `scale(rate>1)` made ("1", "2", ...; the original has none)
