"""A workload's shape in numbers: rate, burstiness, lengths, prefix reuse, conversations.

Pure: `describe(plan)` reads only the plan. Used by tests, and by reports to say what was replayed.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from evertune.domain.percentiles import percentile_sorted
from evertune.domain.workloads.errors import WorkloadError
from evertune.domain.workloads.plan import PlannedRequest

#: Words per block when matching repeated prefixes (vLLM caches prefixes in blocks of 16 tokens).
PREFIX_BLOCK_WORDS = 16


@dataclass(frozen=True)
class Quantiles:
    """A distribution in a few numbers (quantiles interpolate linearly between ranks)."""

    count: int  #: how many values
    mean: float  #: their mean
    p50: float  #: median
    p90: float  #: 90th percentile
    p99: float  #: 99th percentile
    max: float  #: largest

    @staticmethod
    def of(values: Sequence[float]) -> Quantiles:
        """The quantiles of `values` (all zero when there are none)."""
        if not values:
            return Quantiles(count=0, mean=0.0, p50=0.0, p90=0.0, p99=0.0, max=0.0)
        ordered = sorted(values)
        return Quantiles(
            count=len(ordered),
            mean=sum(ordered) / len(ordered),
            p50=percentile_sorted(ordered, 50.0),
            p90=percentile_sorted(ordered, 90.0),
            p99=percentile_sorted(ordered, 99.0),
            max=ordered[-1],
        )

    def brief(self) -> str:
        """`mean/p50/p90/p99/max` on one line."""
        return f"mean {self.mean:.1f}, p50 {self.p50:g}, p90 {self.p90:g}, p99 {self.p99:g}, max {self.max:g}"


@dataclass(frozen=True)
class PlanStats:
    """What `describe` says about a plan."""

    requests: int  #: requests in the plan
    start_s: float  #: `at_s` of the first request
    duration_s: float  #: from the first request's `at_s` to the last's
    mean_rate_per_s: float  #: requests / duration_s (0 when the duration is 0)
    window_s: float  #: width of the windows the peak is measured over
    peak_rate_per_s: float  #: 95th percentile of the per-window request rates
    max_window_rate_per_s: float  #: the busiest window's rate
    gap_cv: float  #: burstiness: coefficient of variation of the gaps between requests (Poisson: 1)
    conversations: int  #: distinct non-empty `conversation_id`s
    standalone_requests: int  #: requests that belong to no conversation
    conversation_start_cv: float  #: coefficient of variation of the gaps between conversation starts
    turns_per_conversation: Quantiles  #: requests per conversation (as far as the plan holds them)
    prompt_unit: Literal["tokens", "words"]  #: tokens when every request knows `prompt_tokens`
    prompt_length: Quantiles  #: prompt lengths, in `prompt_unit` (words: of the message contents)
    max_tokens: Quantiles  #: output tokens asked for
    repeated_prefix_share: float  #: share of prompt words an unbounded prefix cache would reuse

    def lines(self) -> list[str]:
        """The stats for a person, a line each."""
        return [
            f"requests: {self.requests} over {self.duration_s:.1f} s (from t={self.start_s:.1f} s)",
            f"rate: mean {self.mean_rate_per_s:.2f}/s, peak (p95 of {self.window_s:g} s windows)"
            f" {self.peak_rate_per_s:.2f}/s, busiest window {self.max_window_rate_per_s:.2f}/s",
            f"burstiness: gap CV {self.gap_cv:.2f},"
            f" conversation-start gap CV {self.conversation_start_cv:.2f}",
            f"conversations: {self.conversations} ({self.standalone_requests} requests outside any);"
            f" turns per conversation {self.turns_per_conversation.brief()}",
            f"prompt {self.prompt_unit}: {self.prompt_length.brief()}",
            f"max_tokens: {self.max_tokens.brief()}",
            f"repeated prefix: {100 * self.repeated_prefix_share:.1f}% of prompt words",
        ]


def describe(plan: Sequence[PlannedRequest], *, window_s: float = 60.0) -> PlanStats:
    """The shape of `plan` (in any order); rates are measured over windows of `window_s` seconds."""
    if not window_s > 0:
        raise WorkloadError(f"window_s must be positive, not {window_s}")
    times = sorted(request.at_s for request in plan)
    start = times[0] if times else 0.0
    duration = times[-1] - start if times else 0.0
    window_rates = _window_rates(times, window_s)
    conversation_turns = Counter(request.conversation_id for request in plan if request.conversation_id)
    first_turn_at: dict[str, float] = {}
    for request in plan:
        if request.conversation_id:
            known = first_turn_at.get(request.conversation_id, math.inf)
            first_turn_at[request.conversation_id] = min(known, request.at_s)
    by_tokens = bool(plan) and all(request.prompt_tokens > 0 for request in plan)
    lengths = [request.prompt_tokens if by_tokens else _content_words(request) for request in plan]
    return PlanStats(
        requests=len(plan),
        start_s=start,
        duration_s=duration,
        mean_rate_per_s=len(plan) / duration if duration > 0 else 0.0,
        window_s=window_s,
        peak_rate_per_s=percentile_sorted(sorted(window_rates), 95.0) if window_rates else 0.0,
        max_window_rate_per_s=max(window_rates, default=0.0),
        gap_cv=_gap_cv(times),
        conversations=len(conversation_turns),
        standalone_requests=sum(1 for request in plan if not request.conversation_id),
        conversation_start_cv=_gap_cv(sorted(first_turn_at.values())),
        turns_per_conversation=Quantiles.of(list(conversation_turns.values())),
        prompt_unit="tokens" if by_tokens else "words",
        prompt_length=Quantiles.of(lengths),
        max_tokens=Quantiles.of([request.max_tokens for request in plan]),
        repeated_prefix_share=_repeated_prefix_share(plan),
    )


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Standard deviation over mean (population; 0 for fewer than two values or a zero mean)."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    if mean == 0:
        return 0.0
    return math.sqrt(sum((value - mean) ** 2 for value in values) / len(values)) / mean


def _gap_cv(times: Sequence[float]) -> float:
    return coefficient_of_variation([later - earlier for earlier, later in itertools.pairwise(times)])


def _window_rates(times: Sequence[float], window_s: float) -> list[float]:
    """Request rate in each window from the first request on; a last, partial window counts when it
    covers at least half a window (its rate is over the part it covers, up to the last request)."""
    if len(times) < 2:
        return []
    start, span = times[0], times[-1] - times[0]
    if span == 0:
        return []
    full = math.floor(span / window_s)
    widths = [window_s] * full
    rest = span - full * window_s
    if rest >= window_s / 2 or full == 0:
        widths.append(rest)
    counts = [0] * len(widths)
    for t in times:
        index = min(int((t - start) // window_s), full)
        if index < len(counts):
            counts[index] += 1
    return [count / width for count, width in zip(counts, widths, strict=True) if width > 0]


def _content_words(request: PlannedRequest) -> int:
    if request.api == "chat":
        return sum(len(message.content.split()) for message in request.messages)
    return len(request.prompt.split())


def _repeated_prefix_share(plan: Sequence[PlannedRequest]) -> float:
    """Share of prompt words (role markers included) in full blocks an earlier request already sent as
    the same prefix: what an unbounded prefix cache would reuse, in words."""
    split: dict[str, list[str]] = {}

    def words_of(text: str) -> list[str]:
        if text not in split:
            split[text] = text.split()
        return split[text]

    seen: set[int] = set()
    total = repeated = 0
    for request in sorted(plan, key=lambda request: request.at_s):
        if request.api == "chat":
            words: list[str] = []
            for message in request.messages:
                words.append(f"<{message.role}>")
                words.extend(words_of(message.content))
        else:
            words = request.prompt.split()
        total += len(words)
        chain = 0
        matching = True
        for index in range(0, len(words) - PREFIX_BLOCK_WORDS + 1, PREFIX_BLOCK_WORDS):
            chain = hash((chain, *words[index : index + PREFIX_BLOCK_WORDS]))
            if matching and chain in seen:
                repeated += PREFIX_BLOCK_WORDS
            else:
                matching = False
                seen.add(chain)
    return repeated / total if total else 0.0
