"""Sizing the demo's load to the machine it runs on (pure).

The story needs the first configuration just past its knee once the traffic grows: a fixed call
rate cannot do that on every machine. Measured with the same story (`small` model, prefix caching
off, 0.4 calls/s growing to 0.5 with a 3x longer prompt): on an AMD EPYC Zen 5 (2 cores) the grown
load gave p50/p99 TTFT 339/1,779 ms and the loop restored the SLO; on an EPYC Zen 4 (2 cores) the
same rates queued without bound (p50 14 s), the drift profiles held too few requests for a search,
and nothing could be shown.

So before the traffic the demo sends a few requests of the grown traffic's median prompt to the
endpoint, one at a time (`max_tokens` 1: their TTFT is the prefill alone), and sets the call rate
for the prefill to be busy a stated share of the time after the shift:

    busy share = requests/s after the shift x prefill time alone
    calls/s before the shift = share / (shift factor x requests per call-second x prefill time)

Requests per call-second is the traffic plan's own (its calls' turns and pacing). The rate is
clamped to a range around the engine's default, so a wild probe cannot make a run of nothing or a
flood.

A rate alone cannot fit a machine whose prefill of one grown-traffic prompt already takes about the
TTFT target: on an AMD EPYC Zen 3 (2 cores, AVX2 only; `small` in fp32) that prefill took 1,497 ms
against the 500 ms target, and the first configuration missed its SLO before the shift at the
lowest rate (p50 854 ms). So when the probes' median exceeds `max_prefill_ms`, every text of the
traffic is shortened by one factor (`text_scale`: the prefill taken as proportional to the
prompt's characters), the probes are sent again on the new plan, and the rate is sized on those.
One factor on every text keeps the story's proportions, the shared prompt's share of each turn
among them. Shortening the shared prompt alone did not: on the same machine (200 -> 59 words) the
conversation history became most of each prompt, the baseline's 90th-percentile prompt grew to
0.86x the grown median's characters (0.55x at full length), its longest turns (500-570 tokens)
took 520-600 ms, and the first configuration met 0.833 of the 500 ms target before the shift,
under its 0.9.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from evertune.apps.demo.traffic import SHIFTED, TrafficPlan, phase_of
from evertune.domain.workloads.plan import PlannedRequest


@dataclass(frozen=True)
class PromptScaling:
    """How the traffic's texts were shortened for a machine slower than the story needs."""

    prefill_ms: float  #: median prefill of a grown-traffic prompt at the texts' full length, ms
    max_prefill_ms: float  #: the slowest such prefill the story holds at its TTFT target, ms
    scale: float  #: the factor on every text's length chosen

    def line(self) -> str:
        """One line a person reads."""
        return (
            f"a grown-traffic prompt prefills in {self.prefill_ms:.0f} ms alone here, over the "
            f"{self.max_prefill_ms:.0f} ms the story holds at its TTFT target, so every text of the "
            f"traffic (the agents' shared prompt, the callers' turns, the replies in the history) is "
            f"shortened to {self.scale:.0%} of its length"
        )


@dataclass(frozen=True)
class LoadSizing:
    """How the demo sized its call rate, for the narration and the report."""

    probe_ttft_ms: tuple[float, ...]  #: TTFT of each probe request, sent alone, ms
    prefill_ms: float  #: their median: the prefill time of a grown-traffic prompt here, ms
    requests_per_call_s: float  #: requests per second per call/s after the shift (the plan's)
    busy_share: float  #: share of time the prefill is to be busy after the shift
    default_calls_per_s: float  #: the engine's default rate before the shift
    calls_per_s: float  #: the rate chosen before the shift
    clamped: bool  #: the formula's rate fell outside the allowed range and was clamped
    #: how the shared prompt was shortened first (None: it kept its length)
    prompt: PromptScaling | None = None

    def line(self) -> str:
        """One line a person reads."""
        clamp = " (clamped)" if self.clamped else ""
        shortened = f"{self.prompt.line()}; then " if self.prompt is not None else ""
        return shortened + (
            f"load sized to this machine: a grown-traffic prompt prefills in {self.prefill_ms:.0f} ms "
            f"alone (median of {len(self.probe_ttft_ms)}), so {self.calls_per_s:.2f} calls/s before "
            f"the shift{clamp} keeps the first configuration's prefill busy {self.busy_share:.0%} of "
            f"the time after it (the story's default is {self.default_calls_per_s:g} calls/s)"
        )


def text_scale(*, prefill_ms: float, max_prefill_ms: float, min_scale: float = 0.25) -> float:
    """The factor on every text's length that brings a grown-traffic prefill of `prefill_ms` to
    `max_prefill_ms`, taking the prefill as proportional to the prompt's characters: 1 when the
    prefill is within already, never under `min_scale`; two decimals."""
    if not (prefill_ms > 0 and max_prefill_ms > 0 and 0 < min_scale <= 1):
        raise ValueError("prefill times must be positive and the least scale in (0, 1]")
    if prefill_ms <= max_prefill_ms:
        return 1.0
    return max(round(max_prefill_ms / prefill_ms, 2), min_scale)


def probe_requests(plan: TrafficPlan, *, count: int) -> list[PlannedRequest]:
    """`count` requests of the grown traffic around its median prompt length (by characters), each
    from a different conversation; the baseline's when the plan has no shift."""
    shifted = [r for r in plan.requests if phase_of(r) == SHIFTED] or list(plan.requests)
    by_size = sorted(shifted, key=_prompt_chars)
    middle = len(by_size) // 2
    # outward from the median, one request per conversation
    order = sorted(range(len(by_size)), key=lambda i: (abs(i - middle), i))
    out: list[PlannedRequest] = []
    seen: set[str] = set()
    for i in order:
        r = by_size[i]
        if r.conversation_id in seen:
            continue
        seen.add(r.conversation_id)
        out.append(r)
        if len(out) == count:
            break
    return out


def _prompt_chars(request: PlannedRequest) -> int:
    return sum(len(m.content) for m in request.messages) + len(request.prompt)


def requests_per_call_s(plan: TrafficPlan) -> float:
    """Requests per second per call/s in the plan's grown phase (its baseline without a shift)."""
    workload = plan.shifted or plan.baseline
    phase = [r for r in plan.requests if phase_of(r) == SHIFTED] or list(plan.requests)
    seconds = workload.duration_s
    if not phase or seconds <= 0 or workload.peak_calls_per_s <= 0:
        raise ValueError("a traffic plan with requests, a duration and a call rate is needed")
    return len(phase) / seconds / workload.peak_calls_per_s


def size_load(
    *,
    probe_ttft_ms: Sequence[float],
    requests_per_call: float,
    shift_calls: float,
    busy_share: float,
    default_calls_per_s: float,
    bounds: tuple[float, float],
) -> LoadSizing:
    """The call rate before the shift (see the module doc). `bounds` are factors on the default
    (lowest, highest). Invariant: the result lies within `default x bounds`."""
    if not probe_ttft_ms or min(probe_ttft_ms) <= 0:
        raise ValueError("sizing needs at least one positive probe TTFT")
    if not (requests_per_call > 0 and shift_calls > 0 and 0 < busy_share and default_calls_per_s > 0):
        raise ValueError("requests per call, shift factor, busy share and default rate must be positive")
    lo, hi = bounds[0] * default_calls_per_s, bounds[1] * default_calls_per_s
    prefill_s = statistics.median(probe_ttft_ms) / 1000.0
    wanted = busy_share / (shift_calls * requests_per_call * prefill_s)
    calls = min(max(wanted, lo), hi)
    assert lo <= calls <= hi
    return LoadSizing(
        probe_ttft_ms=tuple(probe_ttft_ms),
        prefill_ms=prefill_s * 1000.0,
        requests_per_call_s=requests_per_call,
        busy_share=busy_share,
        default_calls_per_s=default_calls_per_s,
        calls_per_s=round(calls, 3),
        clamped=calls != wanted,
    )
