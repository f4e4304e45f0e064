"""A voice-like workload with known parameters, as token ids, request samples and telemetry records.

Calls arrive as a Poisson process; each call talks to one of a few agents (each with its own system
prompt), has a few turns a few seconds apart, and every turn resends the system prompt, the history
(earlier utterances and answers) and a new utterance. Prefix hashes are made exactly as the gateway
makes them (`evertune.gateway.prefix.chain_hashes`), so the profiler sees what production shows it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from evertune.gateway.prefix import chain_hashes, endpoint_key
from evertune.profiler.profile import RequestSample
from evertune.v1 import telemetry_pb2
from tests.profiler.helpers import record

KEY = endpoint_key(b"test-secret", "voice")

#: TTFT of a request, ms, from (prompt tokens, requests in flight) -- the latency model of a workload.
Latency = Callable[[int], float]


@dataclass(frozen=True)
class Synthetic:
    """One generated request."""

    sample: RequestSample  #: what the profiler reads
    tokens: tuple[int, ...]  #: the prompt's token ids (for independent checks)
    call: int  #: the call it belongs to
    turn: int  #: its turn in the call


def voice(
    *,
    seed: int = 1,
    start_s: float = 1_795_953_600.0,
    duration_s: float = 600.0,
    calls_per_s: float = 0.5,
    agents: int = 3,
    system_tokens: int = 300,
    turns: tuple[int, int] = (2, 5),
    think_s: tuple[float, float] = (2.0, 6.0),
    user_tokens: tuple[int, int] = (5, 40),
    answer_tokens: tuple[int, int] = (5, 30),
    block: int = 16,
    api: str = "chat",
) -> list[Synthetic]:
    """Requests of calls arriving in [start_s, start_s + duration_s); turns after the end are cut."""
    rng = random.Random(seed)
    systems = [[rng.randrange(1, 50_000) for _ in range(system_tokens)] for _ in range(agents)]
    out: list[Synthetic] = []
    t = start_s
    call = 0
    while True:
        t += rng.expovariate(calls_per_s)
        if t >= start_s + duration_s:
            break
        history = list(systems[rng.randrange(agents)])
        at = t
        for turn in range(rng.randint(*turns)):
            if at >= start_s + duration_s:
                break
            history += [rng.randrange(1, 50_000) for _ in range(rng.randint(*user_tokens))]
            completion = rng.randint(*answer_tokens)
            prompt = len(history)
            ttft = 40.0 + 0.05 * prompt
            sample = RequestSample(
                request_id=f"c{call}-t{turn}",
                start_s=round(at, 6),
                e2e_ms=ttft + 10.0 * completion,
                ttft_ms=ttft,
                upstream_ttft_ms=ttft - 1.0,
                prompt_tokens=prompt,
                cached_tokens=0,
                completion_tokens=completion,
                itl_mean_ms=10.0,
                api=api,
                prefix_hashes=tuple(chain_hashes(KEY, history, block)),
            )
            out.append(Synthetic(sample=sample, tokens=tuple(history), call=call, turn=turn))
            history += [rng.randrange(1, 50_000) for _ in range(completion)]
            at += rng.uniform(*think_s)
        call += 1
    out.sort(key=lambda s: s.sample.start_s)
    return out


def as_record(
    s: RequestSample, *, endpoint: str = "voice", endpoint_uid: str = "", block: int = 16
) -> telemetry_pb2.RequestRecord:
    """The telemetry record the gateway would have published for a sample (under the endpoint id
    `endpoint_uid`; '' as recorded before endpoints had ids)."""
    return record(
        0,
        endpoint=endpoint,
        endpoint_uid=endpoint_uid,
        request_id=s.request_id,
        start_time_unix_ns=round(s.start_s * 1e6) * 1000,
        ttft_ms=s.ttft_ms,
        e2e_ms=s.e2e_ms,
        upstream_ttft_ms=s.upstream_ttft_ms,
        itl_ms=[s.itl_mean_ms] * max(0, s.completion_tokens - 1),
        prompt_tokens=s.prompt_tokens,
        cached_tokens=s.cached_tokens,
        completion_tokens=s.completion_tokens,
        prefix_hashes=list(s.prefix_hashes),
        prefix_block_tokens=block,
        api=telemetry_pb2.API_COMPLETIONS if s.api == "completions" else telemetry_pb2.API_CHAT,
        error_class="upstream_timeout" if s.failed else "",
    )


def reuse_share(requests: list[Synthetic], *, block: int, horizon_s: float) -> float:
    """Share of prompt tokens in leading blocks whose token prefix was sent within the horizon,
    computed from the token ids themselves (no hashes)."""
    last: dict[tuple[int, ...], float] = {}
    reused = total = 0
    for r in sorted(requests, key=lambda r: r.sample.start_s):
        t = r.sample.start_s
        total += len(r.tokens)
        matching = True
        for end in range(block, len(r.tokens) + 1, block):
            key = r.tokens[:end]
            if matching and key in last and last[key] >= t - horizon_s:
                reused += block
            else:
                matching = False
            last[key] = t
    return reused / total if total else 0.0
