"""The reference of drift detection: what the current deployment was tuned on (pure).

A `DriftReference` holds prompt and output length samples (or, from a profile's summary, their
medians), the arrival rate and the prefix reuse share; `ReferenceBuilder` learns one from live
traffic in bounded memory (a reservoir of lengths and the bounded prefix seen-set of
`PrefixReuseTracker`). `DriftSample` is one request as drift detection sees it.

Prefix reuse share: the share of prompt tokens a prefix cache keeping blocks `prefix_horizon_s`
could serve, by the profiler's definition (`workloads.prefix_reuse`: leading blocks of the
`prefix_hashes` chain sent within the horizon, over all prompt tokens). The first
`prefix_horizon_s` of any stream only primes the seen-set (nothing can be "seen before" at the
start), in the reference and in the live window alike.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from evertune.domain.workloads.prefix_reuse import HORIZON_S, leading_reused, reused_tokens
from evertune.sla_monitor.drift_statistics import FloatArray


class PrefixReuseTracker:
    """Which prefix-block hashes were seen within `horizon_s` (bounded: at most `max_hashes` kept)."""

    def __init__(self, *, horizon_s: float, max_hashes: int) -> None:
        if horizon_s <= 0 or max_hashes <= 0:
            raise ValueError(f"need horizon_s > 0 and max_hashes > 0, got {horizon_s}, {max_hashes}")
        self.horizon_s = horizon_s
        self.max_hashes = max_hashes
        self._seen: OrderedDict[int, float] = OrderedDict()  # hash -> last seen, oldest first
        self.first_s: float | None = None  #: time of the first request observed

    def observe(
        self, now: float, hashes: Sequence[int], *, block_tokens: int, prompt_tokens: int
    ) -> tuple[int, int] | None:
        """Record a request's block hashes; (reused prompt tokens, prompt tokens) by the one
        definition (`workloads.prefix_reuse`), or None while priming.

        Priming: during the first `horizon_s` after the first request nothing is counted, since
        nothing before the stream could have been seen.
        """
        if self.first_s is None:
            self.first_s = now
        blocks = leading_reused(hashes, self._seen, now=now, horizon_s=self.horizon_s)
        for h in hashes:
            last = self._seen.get(h)
            self._seen[h] = max(now, last) if last is not None else now
            self._seen.move_to_end(h)
        cutoff = now - self.horizon_s
        while self._seen and (len(self._seen) > self.max_hashes or next(iter(self._seen.values())) < cutoff):
            self._seen.popitem(last=False)
        if now < self.first_s + self.horizon_s:
            return None
        return reused_tokens(blocks, block_tokens=block_tokens, prompt_tokens=prompt_tokens), prompt_tokens


@dataclass(frozen=True)
class DriftSample:
    """One request, reduced to what drift detection needs (converted from a RequestRecord)."""

    time_s: float  #: when the gateway received it, seconds since the Unix epoch
    prompt_tokens: int  #: prompt length, tokens
    output_tokens: int  #: completion length, tokens
    prefix_hashes: tuple[int, ...] = ()  #: prefix chain of the prompt's token blocks (keyed hashes)
    prefix_block_tokens: int = 0  #: tokens per hashed block (0: no hashes made)
    ttft_ms: float = 0.0  #: client-observed TTFT, ms (0 = no token sent)


@dataclass(frozen=True, eq=False)
class DriftReference:
    """What the current deployment was tuned on (the reference of every drift test)."""

    prompt_sample: FloatArray  #: prompt lengths, tokens (all, or a uniform reservoir sample)
    output_sample: FloatArray  #: completion lengths, tokens (same requests as prompt_sample)
    requests: int  #: requests in the reference window
    span_s: float  #: time from the first to the last request, seconds
    reuse_tokens: int  #: prompt tokens in blocks already sent within the horizon (after priming)
    total_tokens: int  #: prompt tokens counted (after priming)
    reuse_requests: int  #: requests counted for prefix reuse (after priming)
    profile_id: str = ""  #: id of the profile (e.g. the profiler's `profile.ready`), "" if none
    prompt_p50: float | None = None  #: median prompt length when no sample is held (a summary)
    output_p50: float | None = None  #: median completion length when no sample is held (a summary)
    start_s: float = 0.0  #: time of the first request, seconds since the epoch (0 = unknown)

    @classmethod
    def empty(cls) -> DriftReference:
        """No reference: every test is skipped (only the TTFT change-point runs)."""
        none: FloatArray = np.zeros(0, dtype=np.float64)
        return cls(none, none, requests=0, span_s=0.0, reuse_tokens=0, total_tokens=0, reuse_requests=0)

    @classmethod
    def from_summary(
        cls,
        *,
        requests: int,
        span_s: float,
        rate_rps: float,
        prompt_p50: float,
        output_p50: float,
        prefix_reuse_share: float | None,
        profile_id: str,
        start_s: float = 0.0,
    ) -> DriftReference:
        """A reference from a profile's summary (the profiler's `WorkloadSummary`): medians, not
        samples, so the length tests become sign tests against the reference median.

        `rate_rps` > 0 sets the span to (requests - 1) / rate (the rate the profile states);
        otherwise `span_s` is used. A reuse share of None leaves the reuse test out."""
        none: FloatArray = np.zeros(0, dtype=np.float64)
        span = (requests - 1) / rate_rps if rate_rps > 0 and requests > 1 else span_s
        reuse_n = requests if prefix_reuse_share is not None else 0
        tokens = 1_000_000 if prefix_reuse_share is not None else 0
        return cls(
            none,
            none,
            requests=requests,
            span_s=span,
            reuse_tokens=round((prefix_reuse_share or 0.0) * tokens),
            total_tokens=tokens,
            reuse_requests=reuse_n,
            profile_id=profile_id,
            prompt_p50=prompt_p50 if prompt_p50 > 0 else None,
            output_p50=output_p50 if output_p50 > 0 else None,
            start_s=start_s,
        )

    def median(self, which: Literal["prompt", "output"]) -> float | None:
        """Reference median length, tokens: of the sample, else the summary's; None when neither."""
        sample = self.prompt_sample if which == "prompt" else self.output_sample
        if len(sample):
            return float(np.median(sample))
        return self.prompt_p50 if which == "prompt" else self.output_p50

    @property
    def rate_rps(self) -> float:
        """Arrival rate, requests/s: (requests - 1) arrivals over the span."""
        return (self.requests - 1) / self.span_s if self.span_s > 0 else 0.0

    @property
    def prefix_reuse_share(self) -> float | None:
        """Share of prompt tokens a prefix cache of the horizon could serve; None when nothing was counted."""
        return self.reuse_tokens / self.total_tokens if self.total_tokens else None

    def prompt_quantiles(self) -> dict[str, float]:
        """p50/p90/p99 of prompt length, tokens."""
        return _quantiles(self.prompt_sample)

    def output_quantiles(self) -> dict[str, float]:
        """p50/p90/p99 of completion length, tokens."""
        return _quantiles(self.output_sample)

    @classmethod
    def from_samples(
        cls,
        samples: Iterable[DriftSample],
        *,
        prefix_horizon_s: float = HORIZON_S,
        max_prefix_hashes: int = 200_000,
        sample_size: int = 5000,
        seed: int = 0,
        profile_id: str = "",
    ) -> DriftReference:
        """Build a reference from requests in time order (reservoir of `sample_size` lengths)."""
        builder = ReferenceBuilder(
            prefix_horizon_s=prefix_horizon_s,
            max_prefix_hashes=max_prefix_hashes,
            sample_size=sample_size,
            seed=seed,
        )
        for s in samples:
            builder.add(s)
        return builder.build(profile_id=profile_id)


class ReferenceBuilder:
    """Builds a `DriftReference` one request at a time, in bounded memory (a reservoir of lengths
    and the bounded prefix seen-set): what the service learns a reference from live traffic with."""

    def __init__(
        self,
        *,
        prefix_horizon_s: float = HORIZON_S,
        max_prefix_hashes: int = 200_000,
        sample_size: int = 5000,
        seed: int = 0,
    ) -> None:
        self.sample_size = sample_size
        self._rng = np.random.default_rng(seed)
        self._tracker = PrefixReuseTracker(horizon_s=prefix_horizon_s, max_hashes=max_prefix_hashes)
        self._prompts: list[float] = []
        self._outputs: list[float] = []
        self.requests = 0  #: requests added
        self.first_s = math.inf  #: earliest request time added
        self.last_s = -math.inf  #: latest request time added
        self._reused = self._tokens = self._reuse_requests = 0

    def add(self, s: DriftSample) -> None:
        """Add one request (times roughly in order; the span is max - min)."""
        self.requests += 1
        self.first_s = min(self.first_s, s.time_s)
        self.last_s = max(self.last_s, s.time_s)
        if len(self._prompts) < self.sample_size:
            self._prompts.append(float(s.prompt_tokens))
            self._outputs.append(float(s.output_tokens))
        else:
            j = int(self._rng.integers(0, self.requests))
            if j < self.sample_size:
                self._prompts[j] = float(s.prompt_tokens)
                self._outputs[j] = float(s.output_tokens)
        counted = self._tracker.observe(
            max(s.time_s, self.last_s), s.prefix_hashes, block_tokens=s.prefix_block_tokens,
            prompt_tokens=s.prompt_tokens,
        )  # fmt: skip
        if counted is not None and counted[1] > 0:
            self._reused += counted[0]
            self._tokens += counted[1]
            self._reuse_requests += 1

    def build(self, *, profile_id: str = "") -> DriftReference:
        """The reference of everything added so far."""
        return DriftReference(
            prompt_sample=np.asarray(self._prompts, dtype=np.float64),
            output_sample=np.asarray(self._outputs, dtype=np.float64),
            requests=self.requests,
            span_s=self.last_s - self.first_s if self.requests else 0.0,
            reuse_tokens=self._reused,
            total_tokens=self._tokens,
            reuse_requests=self._reuse_requests,
            profile_id=profile_id,
            start_s=self.first_s if self.requests else 0.0,
        )


def _quantiles(sample: FloatArray) -> dict[str, float]:
    if len(sample) == 0:
        return {}
    p50, p90, p99 = np.quantile(sample, [0.5, 0.9, 0.99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99)}
