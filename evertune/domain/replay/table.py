"""Tables of a `Summary` and a `GoodputResult` for the terminal, as rich renderables (print them on
a `rich.console.Console`; plain aligned text when it is not a terminal). The figures come from the
plain functions here; rich only lays them out."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from evertune.domain.percentiles import Percentiles
from evertune.domain.replay.goodput import GoodputResult
from evertune.domain.replay.summary import Summary


def _ms(value: float) -> str:
    return "-" if value != value else f"{value:.1f}"


def _table(*headers: str) -> Table:
    """Borderless: a header row, one line a row; the first column left, the figures right."""
    grid = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for index, header in enumerate(headers):
        grid.add_column(header, justify="left" if index == 0 else "right")
    return grid


def latency_rows(summary: Summary) -> list[tuple[str, ...]]:
    """(name, p50, p90, p99, n) of TTFT, the inter-token gaps and end to end, in ms."""

    def spread(name: str, spread: Percentiles) -> tuple[str, ...]:
        return (name, _ms(spread.p50), _ms(spread.p90), _ms(spread.p99), str(spread.count))

    return [
        spread("TTFT", summary.ttft_ms),
        spread("ITL (all gaps)", summary.itl_ms),
        spread("ITL (request p99)", summary.itl_request_p99_ms),
        spread("end to end", summary.e2e_ms),
    ]


def summary_lines(summary: Summary) -> tuple[list[str], list[str]]:
    """The lines above the latency table (counts, throughput, errors by class) and below it (SLO,
    client lag, a warning when the client fell behind)."""
    head = [
        f"requests {summary.requests}  completed {summary.completed}  errors {summary.errors}"
        f"  duration {summary.duration_s:.1f} s",
        f"throughput {summary.throughput_rps:.2f} req/s  {summary.output_tokens_per_s:.1f} output tok/s",
    ]
    if summary.error_classes:
        head.append("errors by class: " + ", ".join(f"{k} {v}" for k, v in summary.error_classes.items()))
    tail = []
    if summary.slo is not None and summary.attainment is not None:
        slo = summary.slo
        verdict = "met" if summary.meets_slo else "NOT met"
        tail.append(
            f"SLO TTFT <= {slo.ttft_ms:g} ms and request ITL p99 <= {slo.itl_ms:g} ms: "
            f"attainment {summary.attainment:.1%} (target {slo.share:.0%}, {verdict})"
        )
    lag = summary.lag
    line = f"client lag ms: p50 {_ms(lag.p50_ms)}  p99 {_ms(lag.p99_ms)}  max {_ms(lag.max_ms)}"
    if lag.loop_stall_p99_ms == lag.loop_stall_p99_ms:
        line += f"  loop stall p99 {_ms(lag.loop_stall_p99_ms)}"
    tail.append(line)
    if lag.fell_behind:
        tail.append(f"WARNING client fell behind: {lag.reason}; figures are partly the client's")
    return head, tail


def summary_table(summary: Summary) -> RenderableType:
    """The summary: counts and throughput, a latency table, SLO, client lag."""
    head, tail = summary_lines(summary)
    latency = _table("latency (ms)", "p50", "p90", "p99", "n")
    for row in latency_rows(summary):
        latency.add_row(*row)
    return Group(*(Text(line) for line in head), latency, *(_warn(line) for line in tail))


def probe_rows(result: GoodputResult) -> list[tuple[str, ...]]:
    """One row a probe: rate, attainment, whether it meets the SLO, TTFT and ITL p99, errors, client."""
    return [
        (
            f"{probe.rps:.2f}",
            f"{probe.attainment:.1%}",
            "yes" if probe.meets else "no",
            _ms(probe.ttft_p99_ms),
            _ms(probe.itl_p99_ms),
            f"{probe.errors}/{probe.requests}",
            "behind" if probe.fell_behind else "ok",
        )
        for probe in result.probes
    ]


def goodput_lines(result: GoodputResult) -> list[str]:
    """The goodput line under the probes, and a warning when the client fell behind."""
    slo = result.slo
    lines = [
        f"goodput {result.goodput_rps:.2f} req/s at {slo.share:.0%} within TTFT {slo.ttft_ms:g} ms"
        f" and ITL {slo.itl_ms:g} ms ({result.stopped})"
    ]
    if result.client_limited:
        lines.append("WARNING the client fell behind in some probes: their figures are partly the client's")
    return lines


def goodput_table(result: GoodputResult) -> RenderableType:
    """Every probe, then the goodput line."""
    probes = _table("rate (req/s)", "attainment", "meets", "TTFT p99", "ITL p99", "errors", "client")
    for row in probe_rows(result):
        probes.add_row(*row)
    return Group(probes, *(_warn(line) for line in goodput_lines(result)))


def _warn(line: str) -> Text:
    return Text(line, style="bold yellow" if line.startswith("WARNING") else "")
