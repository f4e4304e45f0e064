"""Plain-text tables of a `Summary` and a `GoodputResult`, for the terminal (pure)."""

from __future__ import annotations

from evertune.domain.percentiles import Percentiles
from evertune.domain.replay.goodput import GoodputResult
from evertune.domain.replay.summary import Summary


def _ms(value: float) -> str:
    return "-" if value != value else f"{value:.1f}"


def _rows(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _spread(name: str, spread: Percentiles) -> tuple[str, ...]:
    return (name, _ms(spread.p50), _ms(spread.p90), _ms(spread.p99), str(spread.count))


def render_summary(summary: Summary) -> str:
    """The summary as a few aligned lines: counts and throughput, a latency table, SLO, client lag."""
    head = (
        f"requests {summary.requests}  completed {summary.completed}  errors {summary.errors}"
        f"  duration {summary.duration_s:.1f} s\n"
        f"throughput {summary.throughput_rps:.2f} req/s  {summary.output_tokens_per_s:.1f} output tok/s"
    )
    if summary.error_classes:
        head += "\nerrors by class: " + ", ".join(f"{k} {v}" for k, v in summary.error_classes.items())
    table = _rows(
        [
            ("latency (ms)", "p50", "p90", "p99", "n"),
            _spread("TTFT", summary.ttft_ms),
            _spread("ITL (all gaps)", summary.itl_ms),
            _spread("ITL (request p99)", summary.itl_request_p99_ms),
            _spread("end to end", summary.e2e_ms),
        ]
    )
    parts = [head, table]
    if summary.slo is not None and summary.attainment is not None:
        slo = summary.slo
        verdict = "met" if summary.meets_slo else "NOT met"
        parts.append(
            f"SLO TTFT <= {slo.ttft_ms:g} ms and request ITL p99 <= {slo.itl_ms:g} ms: "
            f"attainment {summary.attainment:.1%} (target {slo.share:.0%}, {verdict})"
        )
    lag = summary.lag
    line = f"client lag ms: p50 {_ms(lag.p50_ms)}  p99 {_ms(lag.p99_ms)}  max {_ms(lag.max_ms)}"
    if lag.loop_stall_p99_ms == lag.loop_stall_p99_ms:
        line += f"  loop stall p99 {_ms(lag.loop_stall_p99_ms)}"
    parts.append(line)
    if lag.fell_behind:
        parts.append(f"WARNING client fell behind: {lag.reason}; figures are partly the client's")
    return "\n".join(parts)


def render_goodput(result: GoodputResult) -> str:
    """Every probe, then the goodput line."""
    rows: list[tuple[str, ...]] = [
        ("rate (req/s)", "attainment", "meets", "TTFT p99", "ITL p99", "errors", "client")
    ]
    for probe in result.probes:
        rows.append(
            (
                f"{probe.rps:.2f}",
                f"{probe.attainment:.1%}",
                "yes" if probe.meets else "no",
                _ms(probe.ttft_p99_ms),
                _ms(probe.itl_p99_ms),
                f"{probe.errors}/{probe.requests}",
                "behind" if probe.fell_behind else "ok",
            )
        )
    slo = result.slo
    tail = (
        f"goodput {result.goodput_rps:.2f} req/s at {slo.share:.0%} within TTFT {slo.ttft_ms:g} ms"
        f" and ITL {slo.itl_ms:g} ms ({result.stopped})"
    )
    if result.client_limited:
        tail += "\nWARNING the client fell behind in some probes: their figures are partly the client's"
    return _rows(rows) + "\n" + tail
