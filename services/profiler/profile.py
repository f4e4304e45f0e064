"""Workload profiles (pure): what an endpoint's traffic looked like over a window of telemetry.

Two kinds of input, so that what ClickHouse aggregates well is aggregated there:

- `WindowAggregates`: figures over every request of the window (count, first and last arrival,
  requests per minute, length quantiles and histograms, engine-cached share, latency percentiles).
  `queries.window_aggregates` computes them in SQL; `aggregates_of(samples)` computes the same
  figures in Python (tests, and windows already in memory).
- `RequestSample`s: one per request, for what needs the requests in order (gaps between arrivals,
  requests in flight, the prefix chains). For a huge window the shell fetches only the most recent
  `max_samples` requests of it (a contiguous span, so conversations and cache reuse stay whole).

`build_profile` joins them into a `WorkloadProfile`. Every figure is 0 for a window without
telemetry, and `empty_reason` says why; nothing divides by zero.

Prefix reuse comes from the keyed prefix chains (`prefix_hashes`, one hash per full block of
`block_tokens` tokens; equal hash = equal token prefix up to that block). A request reuses its first
k blocks when each was sent by some request no more than `horizon_s` seconds earlier (a prefix
cache that keeps blocks that long). Conversations are found from the chains too: a request whose
chain extends an earlier request's whole chain is that request's next turn (one next turn per
request; a second extension starts a conversation of its own, sharing only a prefix).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import types
import typing
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from evertune.domain.percentiles import percentile_sorted
from evertune.domain.workloads.prefix_reuse import HORIZON_S, leading_reused, reused_tokens
from evertune.domain.workloads.stats import coefficient_of_variation

#: Bins of a length histogram (at most; a width of 1, 2 or 5 times a power of ten).
HISTOGRAM_BINS = 30

#: Version of the profile's JSON layout (stored with each profile).
LAYOUT_VERSION = 1


def nice_width(largest: float, bins: int = HISTOGRAM_BINS) -> float:
    """The smallest width of 1, 2 or 5 x 10^k (at least 1: the values are counts) whose bins from 0
    cover `largest` in at most `bins` bins."""
    if largest < bins:
        return 1.0
    power = 10 ** max(0, math.floor(math.log10(largest / bins)))
    for scale in (1, 10, 100):
        for step in (1, 2, 5):
            width = step * power * scale
            if math.floor(largest / width) + 1 <= bins:
                return float(width)
    return float(1000 * power)


@dataclass(frozen=True)
class Distribution:
    """A distribution in numbers: quantiles (linear interpolation) and a histogram."""

    count: int  #: values
    mean: float  #: their mean
    p50: float  #: median
    p90: float  #: 90th percentile
    p99: float  #: 99th percentile
    max: float  #: largest value
    bin_width: float = 1.0  #: width of each histogram bin; bin k is [k*w, (k+1)*w)
    histogram: tuple[int, ...] = ()  #: values per bin, from bin 0 to the largest value's bin

    @staticmethod
    def of(values: Sequence[float], *, bins: int = HISTOGRAM_BINS) -> Distribution:
        """The distribution of `values` (all zero when there are none)."""
        if not values:
            return EMPTY_DISTRIBUTION
        ordered = sorted(values)
        width = nice_width(ordered[-1], bins)
        counts: Counter[int] = Counter(int(v // width) for v in ordered)
        return Distribution(
            count=len(ordered),
            mean=sum(ordered) / len(ordered),
            p50=percentile_sorted(ordered, 50.0),
            p90=percentile_sorted(ordered, 90.0),
            p99=percentile_sorted(ordered, 99.0),
            max=float(ordered[-1]),
            bin_width=width,
            histogram=tuple(counts.get(k, 0) for k in range(max(counts) + 1)),
        )


EMPTY_DISTRIBUTION = Distribution(count=0, mean=0.0, p50=0.0, p90=0.0, p99=0.0, max=0.0)


@dataclass(frozen=True)
class RequestSample:
    """One request as the profile needs it (a `requests` row, fewer columns)."""

    request_id: str  #: gateway request id
    start_s: float  #: arrival, seconds since the epoch (UTC)
    e2e_ms: float  #: arrival to last byte, ms
    ttft_ms: float  #: client-observed TTFT, ms (0: no token)
    upstream_ttft_ms: float  #: TTFT seen from the gateway's upstream call, ms
    prompt_tokens: int  #: prompt length, tokens
    cached_tokens: int  #: prompt tokens the engine served from its prefix cache
    completion_tokens: int  #: output length, tokens
    itl_mean_ms: float  #: mean inter-token gap of the request, ms (0: none)
    api: str = "chat"  #: "chat" or "completions" ("" when unknown)
    prefix_hashes: tuple[int, ...] = ()  #: keyed prefix chain, one hash per full block
    failed: bool = False  #: ended with an error class


@dataclass(frozen=True)
class WindowAggregates:
    """Figures over every request of a window (from SQL, or `aggregates_of`)."""

    requests: int  #: requests in the window
    first_s: float  #: first arrival, seconds since the epoch (0 without requests)
    last_s: float  #: last arrival
    minute_counts: tuple[int, ...]  #: requests in each 60 s window from the first arrival on
    prompt_tokens: Distribution  #: prompt lengths
    completion_tokens: Distribution  #: output lengths
    cached_share: float  #: engine-cached prompt tokens / prompt tokens
    errors: int  #: requests with an error class
    ttft_p50_ms: float  #: client TTFT median over requests with a first token
    ttft_p99_ms: float  #: client TTFT p99
    itl_p99_ms: float  #: p99 of every inter-token gap


EMPTY_AGGREGATES = WindowAggregates(
    requests=0,
    first_s=0.0,
    last_s=0.0,
    minute_counts=(),
    prompt_tokens=EMPTY_DISTRIBUTION,
    completion_tokens=EMPTY_DISTRIBUTION,
    cached_share=0.0,
    errors=0,
    ttft_p50_ms=0.0,
    ttft_p99_ms=0.0,
    itl_p99_ms=0.0,
)


@dataclass(frozen=True)
class RateProfile:
    """Arrivals over time."""

    start: datetime | None  #: first arrival (UTC); minute k of `per_minute_rps` starts 60k s after it
    per_minute_rps: tuple[float, ...]  #: requests/s in each 60 s window from the first arrival on
    mean_rps: float  #: requests / (last arrival - first arrival)
    #: 95th percentile of the per-minute rates (a last, partial minute counts when it covers half
    #: a minute, rated over the part it covers: as `evertune.domain.workloads.describe` counts a plan)
    peak_p95_rps: float
    max_rps: float  #: busiest minute's rate
    gap_cv: float  #: burstiness: coefficient of variation of gaps between arrivals (Poisson: 1)


@dataclass(frozen=True)
class Concurrency:
    """Requests in flight, weighted by time, from the first arrival to the last end."""

    mean: float  #: time-weighted mean (Little's law: rate x mean latency)
    p50: float  #: smallest level the endpoint was at or below half of the time
    p90: float  #: same, 90% of the time
    p99: float  #: same, 99% of the time
    max: int  #: most requests ever in flight
    time_share: tuple[float, ...]  #: share of the time at 0, 1, 2, ... requests in flight


@dataclass(frozen=True)
class PrefixReuse:
    """Prefix-cache reuse and the conversation structure behind it, from the prefix chains."""

    block_tokens: int  #: tokens per hashed block
    horizon_s: float  #: a block counts as cached when sent at most this long before
    requests: int  #: requests examined (those of the samples)
    prompt_tokens: int  #: their prompt tokens
    reused_tokens: int  #: prompt tokens in blocks reused within the horizon
    share: float  #: reused_tokens / prompt_tokens
    unbounded_share: float  #: the same with an unbounded cache
    cached_share: float  #: what the engine reported served from its cache, over the whole window
    roots: int  #: distinct first blocks (distinct system prompts, roughly)
    requests_per_root: Distribution  #: requests sharing each first block
    conversations: int  #: chains of two or more turns
    standalone_requests: int  #: requests in no such chain
    turns_per_conversation: Distribution  #: turns of each conversation
    shared_prefix_tokens: Distribution  #: per conversation/standalone request: tokens shared with others


@dataclass(frozen=True)
class LatencySummary:
    """Observed latency, for context (the bottleneck report explains it)."""

    ttft_p50_ms: float  #: client TTFT median
    ttft_p99_ms: float  #: client TTFT p99
    itl_p99_ms: float  #: inter-token gap p99
    errors: int  #: requests with an error class


@dataclass(frozen=True)
class BottleneckShare:
    """One part of TTFT and its share."""

    kind: str  #: "queueing", "prefill", "decode" or "proxy"
    share: float  #: share (0..1) of the slow requests' TTFT attributed to it
    mean_ms: float  #: mean milliseconds of it per slow request
    detail: str  #: one line with the figures behind it


@dataclass(frozen=True)
class BottleneckReport:
    """Where TTFT goes, and the verdict."""

    verdict: str  #: the largest share's kind; "none" when there is too little latency data
    source: str  #: "engine" (vLLM /metrics with telemetry) or "telemetry" (inferred)
    shares: tuple[BottleneckShare, ...]  #: largest first
    evidence: tuple[str, ...]  #: the figures behind the verdict, one line each


NO_BOTTLENECK = BottleneckReport(verdict="none", source="telemetry", shares=(), evidence=())


@dataclass(frozen=True)
class WorkloadProfile:
    """An endpoint's workload over a window: the profile that `profile.ready` announces."""

    endpoint: str  #: endpoint name
    window_start: datetime  #: start of the window (UTC)
    window_end: datetime  #: end of the window (UTC, exclusive)
    requests: int  #: requests in the window
    sampled_requests: int  #: requests the per-request figures are over (the most recent ones)
    empty_reason: str  #: why the profile is empty; "" when it is not
    rate: RateProfile  #: arrivals over time
    concurrency: Concurrency  #: requests in flight
    prompt_tokens: Distribution  #: prompt lengths
    completion_tokens: Distribution  #: output lengths
    prefix: PrefixReuse  #: prefix reuse and conversations
    latency: LatencySummary  #: observed latency
    bottleneck: BottleneckReport = NO_BOTTLENECK  #: where TTFT goes
    layout: int = LAYOUT_VERSION  #: version of this layout
    extra: dict[str, str] = field(default_factory=dict)  #: free notes (e.g. why engine metrics were not used)
    #: the endpoint id (Endpoint.uid) whose requests it describes; '' for requests recorded before
    #: endpoints had ids (and for profiles stored then)
    endpoint_uid: str = ""


@dataclass(frozen=True)
class ProfileConfig:
    """How a profile is measured."""

    block_tokens: int = 128  #: tokens per prefix-hash block (the gateway's prefix_block_tokens)
    horizon_s: float = HORIZON_S  #: prefix-cache horizon, seconds (`workloads.prefix_reuse`)
    histogram_bins: int = HISTOGRAM_BINS  #: bins of the length histograms (at most)


# --- pieces ------------------------------------------------------------------------------------


def aggregates_of(samples: Sequence[RequestSample], *, bins: int = HISTOGRAM_BINS) -> WindowAggregates:
    """The window figures of `samples` computed in Python (the same as `queries.window_aggregates`,
    except that the ITL p99 is over per-request mean gaps rather than every gap)."""
    if not samples:
        return EMPTY_AGGREGATES
    first = min(s.start_s for s in samples)
    minutes = Counter(math.floor((s.start_s - first) / 60) for s in samples)
    prompt = sum(s.prompt_tokens for s in samples)
    ttfts = sorted(s.ttft_ms for s in samples if s.ttft_ms > 0)
    itls = sorted(s.itl_mean_ms for s in samples if s.itl_mean_ms > 0)
    return WindowAggregates(
        requests=len(samples),
        first_s=first,
        last_s=max(s.start_s for s in samples),
        minute_counts=tuple(minutes.get(k, 0) for k in range(max(minutes) + 1)),
        prompt_tokens=Distribution.of([s.prompt_tokens for s in samples], bins=bins),
        completion_tokens=Distribution.of([s.completion_tokens for s in samples], bins=bins),
        cached_share=sum(s.cached_tokens for s in samples) / prompt if prompt else 0.0,
        errors=sum(1 for s in samples if s.failed),
        ttft_p50_ms=percentile_sorted(ttfts, 50.0) if ttfts else 0.0,
        ttft_p99_ms=percentile_sorted(ttfts, 99.0) if ttfts else 0.0,
        itl_p99_ms=percentile_sorted(itls, 99.0) if itls else 0.0,
    )


def rate_profile(aggregates: WindowAggregates, arrivals_s: Sequence[float]) -> RateProfile:
    """Per-minute rates from the window's minute counts; gap CV from the (sampled) arrival times."""
    ordered = sorted(arrivals_s)
    gaps = [b - a for a, b in itertools.pairwise(ordered)]
    gap_cv = coefficient_of_variation(gaps)
    if aggregates.requests == 0 or not aggregates.minute_counts:
        return RateProfile(None, (), 0.0, 0.0, 0.0, gap_cv)
    counts = aggregates.minute_counts
    span = aggregates.last_s - aggregates.first_s
    full = math.floor(span / 60)
    rest = span - 60.0 * full
    rated = [counts[k] / 60.0 for k in range(min(full, len(counts)))]
    if (rest >= 30.0 or full == 0) and rest > 0 and full < len(counts):
        rated.append(counts[full] / rest)
    return RateProfile(
        start=datetime.fromtimestamp(aggregates.first_s, UTC),
        per_minute_rps=tuple(c / 60.0 for c in counts),
        mean_rps=aggregates.requests / span if span > 0 else 0.0,
        peak_p95_rps=percentile_sorted(sorted(rated), 95.0) if rated else 0.0,
        max_rps=max(rated, default=0.0),
        gap_cv=gap_cv,
    )


def in_flight_at_arrival(samples: Sequence[RequestSample]) -> list[int]:
    """For each sample (same order), the other requests in flight when it arrived."""
    starts = sorted(s.start_s for s in samples)
    ends = sorted(s.start_s + max(s.e2e_ms, 0.0) / 1000.0 for s in samples)
    return [bisect.bisect_left(starts, s.start_s) - bisect.bisect_right(ends, s.start_s) for s in samples]


def concurrency_profile(samples: Sequence[RequestSample]) -> Concurrency:
    """Time-weighted requests in flight, from each request's arrival and end."""
    if not samples:
        return Concurrency(0.0, 0.0, 0.0, 0.0, 0, ())
    events: list[tuple[float, int]] = []
    for s in samples:
        events.append((s.start_s, 1))
        events.append((s.start_s + max(s.e2e_ms, 0.0) / 1000.0, -1))
    events.sort(key=lambda e: (e[0], e[1]))  # ends before starts at the same instant
    time_at: dict[int, float] = defaultdict(float)
    level, previous, highest = 0, events[0][0], 0
    for t, step in events:
        if t > previous:
            time_at[level] += t - previous
            previous = t
        level += step
        highest = max(highest, level)
    total = sum(time_at.values())
    if total <= 0:  # every request took no time
        return Concurrency(0.0, 0.0, 0.0, 0.0, highest, ())
    shares = tuple(time_at.get(k, 0.0) / total for k in range(max(time_at) + 1))

    def level_quantile(q: float) -> float:
        cumulative = 0.0
        for k, share in enumerate(shares):
            cumulative += share
            if cumulative >= q - 1e-12:
                return float(k)
        return float(len(shares) - 1)

    return Concurrency(
        mean=sum(k * share for k, share in enumerate(shares)),
        p50=level_quantile(0.5),
        p90=level_quantile(0.9),
        p99=level_quantile(0.99),
        max=highest,
        time_share=shares,
    )


@dataclass(frozen=True)
class Structure:
    """The conversation structure found in the prefix chains (per sample, in time order)."""

    order: tuple[int, ...]  #: sample indices by arrival
    parent: tuple[int, ...]  #: per sample: the sample it continues, -1 for none
    conversation: tuple[int, ...]  #: per sample: index of its conversation's first sample
    turn: tuple[int, ...]  #: per sample: 0-based turn in its conversation
    shared_blocks: tuple[int, ...]  #: per sample: leading blocks its conversation shares with others
    reused_blocks: tuple[int, ...]  #: per sample: leading blocks seen within the horizon
    unbounded_blocks: tuple[int, ...]  #: per sample: leading blocks seen at all before


def chain_structure(samples: Sequence[RequestSample], *, horizon_s: float) -> Structure:
    """Link turns into conversations, count reused blocks, and find the prefixes conversations share."""
    n = len(samples)
    order = sorted(range(n), key=lambda i: (samples[i].start_s, i))
    parent = [-1] * n
    has_child = [False] * n
    last_seen: dict[int, float] = {}
    ends_at: dict[int, int] = {}  # last hash of a request's chain -> the latest such request
    reused = [0] * n
    unbounded = [0] * n
    for i in order:
        sample = samples[i]
        chain = sample.prefix_hashes
        t = sample.start_s
        reused[i] = leading_reused(chain, last_seen, now=t, horizon_s=horizon_s)
        unbounded[i] = leading_reused(chain, last_seen, now=t, horizon_s=math.inf)
        for position in range(len(chain) - 1, -1, -1):
            candidate = ends_at.get(chain[position])
            if candidate is not None and len(samples[candidate].prefix_hashes) == position + 1:
                if not has_child[candidate]:
                    parent[i] = candidate
                    has_child[candidate] = True
                break
        for h in chain:
            last_seen[h] = t
        if chain:
            ends_at[chain[-1]] = i
    conversation = [0] * n
    turn = [0] * n
    for i in order:
        if parent[i] >= 0:
            conversation[i] = conversation[parent[i]]
            turn[i] = turn[parent[i]] + 1
        else:
            conversation[i] = i
    # Blocks shared across conversations: count, per hash, the conversations whose first request has it.
    holders: Counter[int] = Counter()
    for i in order:
        if parent[i] < 0:
            holders.update(samples[i].prefix_hashes)
    shared_of_root: dict[int, int] = {}
    for i in order:
        if parent[i] < 0:
            k = 0
            for h in samples[i].prefix_hashes:
                if holders[h] < 2:
                    break
                k += 1
            shared_of_root[i] = k
    return Structure(
        order=tuple(order),
        parent=tuple(parent),
        conversation=tuple(conversation),
        turn=tuple(turn),
        shared_blocks=tuple(shared_of_root[conversation[i]] for i in range(n)),
        reused_blocks=tuple(reused),
        unbounded_blocks=tuple(unbounded),
    )


def prefix_reuse(
    samples: Sequence[RequestSample],
    structure: Structure,
    *,
    config: ProfileConfig,
    cached_share: float,
) -> PrefixReuse:
    """Reuse shares and conversation figures of samples whose structure is known."""
    block = config.block_tokens
    prompt = sum(s.prompt_tokens for s in samples)
    reused = sum(
        reused_tokens(b, block_tokens=block, prompt_tokens=s.prompt_tokens)
        for b, s in zip(structure.reused_blocks, samples, strict=True)
    )
    unbounded = sum(
        reused_tokens(b, block_tokens=block, prompt_tokens=s.prompt_tokens)
        for b, s in zip(structure.unbounded_blocks, samples, strict=True)
    )
    roots = Counter(s.prefix_hashes[0] for s in samples if s.prefix_hashes)
    sizes = Counter(structure.conversation)
    conversations = {c: k for c, k in sizes.items() if k >= 2}
    heads = [i for i in range(len(samples)) if structure.parent[i] < 0]
    bins = config.histogram_bins
    return PrefixReuse(
        block_tokens=block,
        horizon_s=config.horizon_s,
        requests=len(samples),
        prompt_tokens=prompt,
        reused_tokens=reused,
        share=reused / prompt if prompt else 0.0,
        unbounded_share=unbounded / prompt if prompt else 0.0,
        cached_share=cached_share,
        roots=len(roots),
        requests_per_root=Distribution.of(list(roots.values()), bins=bins),
        conversations=len(conversations),
        standalone_requests=sum(k for k in sizes.values() if k < 2),
        turns_per_conversation=Distribution.of(list(conversations.values()), bins=bins),
        shared_prefix_tokens=Distribution.of(
            [min(structure.shared_blocks[i] * block, samples[i].prompt_tokens) for i in heads], bins=bins
        ),
    )


# --- the profile -------------------------------------------------------------------------------


def build_profile(
    *,
    endpoint: str,
    window_start: datetime,
    window_end: datetime,
    aggregates: WindowAggregates,
    samples: Sequence[RequestSample],
    config: ProfileConfig,
    bottleneck: BottleneckReport = NO_BOTTLENECK,
    structure: Structure | None = None,
    endpoint_uid: str = "",
) -> WorkloadProfile:
    """The profile of a window from its aggregates and its (most recent) request samples, all of
    the endpoint id `endpoint_uid`."""
    if structure is None:
        structure = chain_structure(samples, horizon_s=config.horizon_s)
    empty_reason = ""
    if aggregates.requests == 0:
        span = window_end - window_start
        empty_reason = (
            f"no telemetry for endpoint {endpoint!r}{f' (id {endpoint_uid})' if endpoint_uid else ''} "
            f"between {window_start:%Y-%m-%d %H:%M:%S} and "
            f"{window_end:%Y-%m-%d %H:%M:%S} UTC ({_span(span)})"
        )
    return WorkloadProfile(
        endpoint=endpoint,
        window_start=window_start,
        window_end=window_end,
        requests=aggregates.requests,
        sampled_requests=len(samples),
        empty_reason=empty_reason,
        rate=rate_profile(aggregates, [s.start_s for s in samples]),
        concurrency=concurrency_profile(samples),
        prompt_tokens=aggregates.prompt_tokens,
        completion_tokens=aggregates.completion_tokens,
        prefix=prefix_reuse(samples, structure, config=config, cached_share=aggregates.cached_share),
        latency=LatencySummary(
            ttft_p50_ms=aggregates.ttft_p50_ms,
            ttft_p99_ms=aggregates.ttft_p99_ms,
            itl_p99_ms=aggregates.itl_p99_ms,
            errors=aggregates.errors,
        ),
        bottleneck=bottleneck,
        endpoint_uid=endpoint_uid,
    )


def _span(span: timedelta) -> str:
    seconds = span.total_seconds()
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def summary_lines(profile: WorkloadProfile) -> list[str]:
    """The profile for a person, a line each."""
    if profile.empty_reason:
        return [f"endpoint {profile.endpoint}: empty profile: {profile.empty_reason}"]
    p, r, c, x = profile, profile.rate, profile.concurrency, profile.prefix

    def dist(d: Distribution) -> str:
        return f"mean {d.mean:.1f}, p50 {d.p50:g}, p90 {d.p90:g}, p99 {d.p99:g}, max {d.max:g}"

    lines = [
        f"endpoint {p.endpoint}: {p.requests} requests from {p.window_start:%Y-%m-%d %H:%M:%S} to "
        f"{p.window_end:%Y-%m-%d %H:%M:%S} UTC"
        + (
            f" (per-request figures over the last {p.sampled_requests})"
            if p.sampled_requests < p.requests
            else ""
        ),
        f"rate: mean {r.mean_rps:.3f}/s, peak (p95 of minutes) {r.peak_p95_rps:.3f}/s, "
        f"busiest minute {r.max_rps:.3f}/s, gap CV {r.gap_cv:.2f}",
        f"in flight: mean {c.mean:.2f}, p50 {c.p50:g}, p90 {c.p90:g}, p99 {c.p99:g}, max {c.max}",
        f"prompt tokens: {dist(p.prompt_tokens)}",
        f"output tokens: {dist(p.completion_tokens)}",
        f"prefix reuse: {100 * x.share:.1f}% of prompt tokens within {x.horizon_s:g} s "
        f"({100 * x.unbounded_share:.1f}% unbounded; engine cached {100 * x.cached_share:.1f}%), "
        f"blocks of {x.block_tokens}",
        f"conversations: {x.conversations} (turns {dist(x.turns_per_conversation)}), "
        f"{x.standalone_requests} standalone requests; {x.roots} distinct first blocks; "
        f"shared prefix tokens p50 {x.shared_prefix_tokens.p50:g}",
        f"latency: TTFT p50 {p.latency.ttft_p50_ms:.1f} ms, p99 {p.latency.ttft_p99_ms:.1f} ms; "
        f"ITL p99 {p.latency.itl_p99_ms:.1f} ms; {p.latency.errors} errors",
    ]
    b = p.bottleneck
    lines.append(f"bottleneck ({b.source}): {b.verdict}")
    lines.extend(f"  {s.kind}: {100 * s.share:.0f}% ({s.mean_ms:.1f} ms) {s.detail}" for s in b.shares)
    lines.extend(f"  evidence: {e}" for e in b.evidence)
    return lines


# --- JSON ----------------------------------------------------------------------------------------


def to_jsonable(value: Any) -> Any:
    """A dataclass tree as JSON-ready values (datetimes as ISO text)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value


def profile_from_jsonable(data: Mapping[str, Any]) -> WorkloadProfile:
    """A `WorkloadProfile` from `to_jsonable`'s output (unknown keys are ignored)."""
    result = _from(WorkloadProfile, data)
    assert isinstance(result, WorkloadProfile)
    return result


def _from(kind: Any, data: Any) -> Any:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(kind) if a is not type(None)]
        return None if data is None else _from(options[0], data)
    if origin is tuple:
        item = typing.get_args(kind)[0]
        return tuple(_from(item, v) for v in data)
    if origin is dict:
        return dict(data)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        names = {f.name for f in dataclasses.fields(kind)}
        return kind(**{k: _from(hints[k], v) for k, v in data.items() if k in names})
    if kind is datetime:
        return datetime.fromisoformat(data)
    if kind is float:
        return float(data)
    if kind is int:
        return int(data)
    return data
