from __future__ import annotations

import io

from rich.console import Console, RenderableType

from evertune.domain.replay.goodput import GoodputResult, Probe
from evertune.domain.replay.progress import ReplayCounts, ReplayProgress
from evertune.domain.replay.summary import summarize
from evertune.domain.replay.table import goodput_table, summary_table
from evertune.domain.slo import Slo

from .results import result


def plain(renderable: RenderableType) -> str:
    """What a console that is not a terminal prints (a pipe, CI)."""
    console = Console(file=io.StringIO(), width=200)
    console.print(renderable)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b" not in text
    return str(text)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_counts_and_status() -> None:
    counts = ReplayCounts(4)
    counts.sent("a")
    counts.sent("b")
    counts.sent("c")
    counts.done(result(ttft_ms=80.0))
    counts.done(result(error_class="http_5xx", ttft_ms=None))
    assert counts.status() == "sent 3  errors 1  in flight 1  TTFT p50 80.0 ms"
    counts.done(result(error_class="client_lag", ttft_ms=None))  # never sent: not in flight
    assert counts.in_flight == 1 and counts.done_count == 3 and counts.errors == 2
    assert ReplayCounts(2).status().endswith("TTFT p50 -")


def test_progress_is_silent_when_not_a_terminal() -> None:
    stream = io.StringIO()
    with ReplayProgress(3, console=Console(file=stream)) as progress:
        progress.sent("a")
        progress.done(result(ttft_ms=80.0))
    assert stream.getvalue() == ""
    assert (progress.counts.sent_count, progress.counts.done_count, progress.counts.in_flight) == (1, 1, 0)


def test_progress_on_a_terminal_shows_the_counts_and_throttles_the_status() -> None:
    stream = io.StringIO()
    clock = FakeClock()
    console = Console(file=stream, force_terminal=True, width=150)
    with ReplayProgress(4, console=console, max_rate_hz=4.0, clock=clock) as progress:
        progress.sent("a")  # updates (first)
        progress.sent("b")  # same instant: throttled
        assert progress.bar.tasks[0].fields["status"].startswith("sent 1 ")
        clock.now = 0.3
        progress.done(result(ttft_ms=80.0))  # updates
        assert progress.bar.tasks[0].completed == 1
        progress.done(result(ttft_ms=90.0))  # throttled
        assert progress.bar.tasks[0].completed == 1
    # the last state is drawn when it ends
    assert progress.bar.tasks[0].completed == 2
    text = stream.getvalue()
    assert "2/4" in text and "sent 2  errors 0  in flight 0  TTFT p50 85.0 ms" in text


def test_render_summary() -> None:
    results = [
        result(ttft_ms=100.0, itl_ms=(20.0, 30.0)),
        result(ttft_ms=None, error_class="timeout", e2e_ms=1.0),
    ]
    text = plain(summary_table(summarize(results, slo=Slo(ttft_ms=200, itl_ms=50), duration_s=2.0)))
    assert "requests 2  completed 1  errors 1" in text
    assert "errors by class: timeout 1" in text
    [ttft] = [line for line in text.splitlines() if line.startswith("TTFT")]
    assert ttft.split() == ["TTFT", "100.0", "100.0", "100.0", "1"]
    assert "attainment 50.0% (target 90%, NOT met)" in text
    assert "client lag ms: p50 0.5" in text
    assert "WARNING" not in text
    late = plain(summary_table(summarize([result(lag_ms=50.0)])))
    assert "WARNING client fell behind: send lag p99 50.0 ms" in late
    empty = plain(summary_table(summarize([])))
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
    text = plain(
        goodput_table(
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
    assert lines[2].split() == ["10.00", "50.0%", "no", "900.0", "10.0", "0/100", "ok"]
    assert lines[-1] == "goodput 5.50 req/s at 90% within TTFT 200 ms and ITL 50 ms (max_runs (3) reached)"
