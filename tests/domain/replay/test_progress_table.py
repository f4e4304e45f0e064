from __future__ import annotations

import io

from evertune.domain.replay.goodput import GoodputResult, Probe
from evertune.domain.replay.progress import Progress
from evertune.domain.replay.summary import summarize
from evertune.domain.replay.table import render_goodput, render_summary
from evertune.domain.slo import Slo

from .results import result


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_is_silent_when_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(3, stream=stream)
    progress.sent("a")
    progress.done(result(ttft_ms=80.0))
    progress.close()
    assert stream.getvalue() == ""
    assert (progress.sent_count, progress.done_count, progress.in_flight) == (1, 1, 0)


def test_progress_line_and_throttle() -> None:
    stream = io.StringIO()
    clock = FakeClock()
    progress = Progress(4, stream=stream, enabled=True, max_rate_hz=4.0, clock=clock)
    progress.sent("a")  # draws (first)
    progress.sent("b")  # same instant: throttled
    progress.sent("c")
    clock.now = 0.3
    progress.done(result(ttft_ms=80.0))  # draws
    progress.done(result(error_class="http_5xx", ttft_ms=None))  # throttled
    assert stream.getvalue().count("\r") == 2
    assert progress.line() == (
        "[##########..........] 2/4 done  sent 3  errors 1  in flight 1  TTFT p50 80.0 ms"
    )
    progress.done(result(error_class="client_lag", ttft_ms=None))  # never sent: not in flight
    assert progress.in_flight == 1
    progress.close()
    assert stream.getvalue().endswith("\x1b[K\n")


def test_render_summary() -> None:
    results = [
        result(ttft_ms=100.0, itl_ms=(20.0, 30.0)),
        result(ttft_ms=None, error_class="timeout", e2e_ms=1.0),
    ]
    text = render_summary(summarize(results, slo=Slo(ttft_ms=200, itl_ms=50), duration_s=2.0))
    assert "requests 2  completed 1  errors 1" in text
    assert "errors by class: timeout 1" in text
    assert "TTFT" in text and "100.0" in text
    assert "attainment 50.0% (target 90%, NOT met)" in text
    assert "client lag ms: p50 0.5" in text
    assert "WARNING" not in text
    late = render_summary(summarize([result(lag_ms=50.0)]))
    assert "WARNING client fell behind: send lag p99 50.0 ms" in late
    empty = render_summary(summarize([]))
    assert "TTFT" in empty and " -" in empty


def test_render_goodput() -> None:
    slo = Slo(ttft_ms=200, itl_ms=50)
    probes = tuple(
        Probe(
            rps=r,
            attainment=a,
            meets=a >= 0.9,
            ttft_p99_ms=t,
            itl_p99_ms=10.0,
            requests=100,
            errors=0,
            fell_behind=False,
        )
        for r, a, t in ((1.0, 1.0, 90.0), (10.0, 0.5, 900.0), (5.5, 0.95, 180.0))
    )
    text = render_goodput(
        GoodputResult(
            goodput_rps=5.5,
            failing_rps=10.0,
            converged=False,
            stopped="max_runs (3) reached",
            slo=slo,
            probes=probes,
            client_limited=False,
        )
    )
    lines = text.splitlines()
    assert lines[0].split() == [
        "rate",
        "(req/s)",
        "attainment",
        "meets",
        "TTFT",
        "p99",
        "ITL",
        "p99",
        "errors",
        "client",
    ]
    assert len(lines) == 5
    assert lines[-1] == "goodput 5.50 req/s at 90% within TTFT 200 ms and ITL 50 ms (max_runs (3) reached)"
