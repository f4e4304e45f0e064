"""The bottleneck verdict on workloads built to be prefill-, queue- and decode-bound."""

from __future__ import annotations

import random

import pytest

from evertune.domain.engines.metrics import delta, parse_metrics
from evertune.profiler.bottleneck import EngineFigures, bottleneck_report, engine_figures
from evertune.profiler.profile import RequestSample


def workload(kind: str, *, n: int = 600, seed: int = 0) -> tuple[list[RequestSample], list[int]]:
    """Requests whose TTFT follows a known model; returns them and their in-flight counts."""
    rng = random.Random(seed)
    samples, flights = [], []
    for i in range(n):
        c = rng.randint(0, 30)
        noise = rng.uniform(-1.0, 1.0)
        if kind == "prefill":
            prompt = rng.randint(100, 4000)
            ttft, itl = 20 + 0.5 * prompt, 10.0
        elif kind == "queue":
            prompt = rng.randint(50, 300)
            ttft, itl = 20 + 0.05 * prompt + 40 * max(0, c - 10), 10.0
        else:  # decode interference: every step, the prefill's included, slows with the batch
            prompt = rng.randint(50, 300)
            ttft, itl = (20 + 0.05 * prompt) * (1 + 0.25 * c), 10.0 * (1 + 0.25 * c)
        ttft += noise
        samples.append(
            RequestSample(
                request_id=f"r{i}",
                start_s=float(i),
                e2e_ms=ttft + 200,
                ttft_ms=ttft + 2.0,  # 2 ms of proxy
                upstream_ttft_ms=ttft,
                prompt_tokens=prompt,
                cached_tokens=0,
                completion_tokens=20,
                itl_mean_ms=itl,
            )
        )
        flights.append(c)
    return samples, flights


@pytest.mark.parametrize(
    ("kind", "verdict"), [("prefill", "prefill"), ("queue", "queueing"), ("decode", "decode")]
)
def test_verdict_from_telemetry(kind: str, verdict: str) -> None:
    samples, flights = workload(kind)
    report = bottleneck_report(samples, in_flight=flights)
    assert report.source == "telemetry"
    assert report.verdict == verdict, report
    shares = {s.kind: s.share for s in report.shares}
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares[verdict] > 0.6
    assert 0 < shares["proxy"] < 0.05
    assert report.evidence and "slow requests" in report.evidence[0]


def test_prefill_line_is_recovered() -> None:
    samples, flights = workload("prefill")
    report = bottleneck_report(samples, in_flight=flights)
    line = next(e for e in report.evidence if e.startswith("prefill line"))
    # 20 ms + 0.5 ms per token = 500 ms per 1k tokens (noise +-1 ms).
    assert "+ 500.0 ms per 1k" in line or "+ 499.9 ms per 1k" in line or "+ 500.1 ms per 1k" in line


def test_queue_tail_share_matches_the_model() -> None:
    samples, flights = workload("queue")
    report = bottleneck_report(samples, in_flight=flights)
    ttfts = sorted(s.ttft_ms for s in samples)
    threshold = ttfts[int(0.9 * (len(ttfts) - 1))]
    tail = [(s, c) for s, c in zip(samples, flights, strict=True) if s.ttft_ms >= threshold]
    expected = sum(40 * max(0, c - 10) for _, c in tail) / sum(s.ttft_ms for s, _ in tail)
    share = next(s.share for s in report.shares if s.kind == "queueing")
    assert share == pytest.approx(expected, abs=0.02)


def test_too_few_requests_give_no_verdict() -> None:
    samples, flights = workload("prefill", n=10)
    report = bottleneck_report(samples, in_flight=flights)
    assert report.verdict == "none" and report.shares == ()
    assert "10 requests with a first token" in report.evidence[0]


def metrics_text(
    *, queue_sum: float, prefill_sum: float, ttft_sum: float, count: int, preemptions: int
) -> str:
    def histogram(name: str, total: float) -> str:
        return (
            f'{name}_bucket{{le="0.1",model_name="m",engine="0"}} 0\n'
            f'{name}_bucket{{le="+Inf",model_name="m",engine="0"}} {count}\n'
            f'{name}_sum{{model_name="m",engine="0"}} {total}\n'
            f'{name}_count{{model_name="m",engine="0"}} {count}\n'
        )

    return (
        "# TYPE vllm:request_queue_time_seconds histogram\n"
        + histogram("vllm:request_queue_time_seconds", queue_sum)
        + "# TYPE vllm:request_prefill_time_seconds histogram\n"
        + histogram("vllm:request_prefill_time_seconds", prefill_sum)
        + "# TYPE vllm:time_to_first_token_seconds histogram\n"
        + histogram("vllm:time_to_first_token_seconds", ttft_sum)
        + "# TYPE vllm:num_preemptions_total counter\n"
        + f'vllm:num_preemptions_total{{model_name="m",engine="0"}} {preemptions}\n'
    )


def test_engine_metrics_decide_when_given() -> None:
    before = parse_metrics(metrics_text(queue_sum=1, prefill_sum=1, ttft_sum=2, count=10, preemptions=1))
    after = parse_metrics(metrics_text(queue_sum=31, prefill_sum=6, ttft_sum=37, count=110, preemptions=4))
    engine = engine_figures([delta(before, after)])
    assert engine is not None
    assert engine.mean_queue_ms == pytest.approx(300.0) and engine.mean_prefill_ms == pytest.approx(50.0)
    assert engine.preemptions == 3
    # Telemetry alone would call this prefill-bound; the engine says the time is spent waiting.
    samples, flights = workload("prefill")
    report = bottleneck_report(samples, in_flight=flights, engine=engine)
    assert report.source == "engine" and report.verdict == "queueing"
    shares = {s.kind: s.share for s in report.shares}
    assert shares["queueing"] == pytest.approx(300.0 / (300.0 + 50.0 + 2.0))
    assert report.evidence[0].startswith("vLLM over 100 requests on 1 deployment(s): mean queue 300.0 ms")
    assert "3 preemptions" in report.evidence[0]


def test_engine_figures_weight_deployments_by_requests() -> None:
    empty = parse_metrics("")
    a = delta(
        empty, parse_metrics(metrics_text(queue_sum=1, prefill_sum=1, ttft_sum=2, count=100, preemptions=0))
    )
    b = delta(
        empty, parse_metrics(metrics_text(queue_sum=3, prefill_sum=0, ttft_sum=3, count=100, preemptions=0))
    )
    engine = engine_figures([a, b])
    assert isinstance(engine, EngineFigures)
    assert engine.mean_queue_ms == pytest.approx(20.0) and engine.requests == 200
    assert engine_figures([]) is None
