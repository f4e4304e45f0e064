"""The shared Azure trace served THROUGH the gateway: `evertune profile show` reports its statistics.

A minute of the trace (its busiest early minute, 180-240 s: 531 requests) is replayed 4 times faster
by the replay client through a real gateway to a sim engine; records cross JetStream and the
profiler's sink into chDB; `evertune profile show --json --build` (the CLI, in a subprocess, asking
the profiler over NATS) must give the cut's mean rate (scaled back by 4), gap CV and prompt/output
length statistics as computed from the CSV, within 5%. `evertune bench azure-profile` does the same
on longer cuts, with the per-window peak rate (15 s of replay is shorter than one profile window).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evertune.apps.benchmarks.azure_profile import TRACE, measure_trace
from evertune.domain.model import make_model
from evertune.domain.workloads import parse_azure_csv
from evertune.infra.store import Store


@pytest.mark.skipif(not TRACE.exists(), reason="the shared Azure trace is not on this machine")
async def test_profile_show_matches_the_trace_it_was_served(
    tmp_path: Path, store_engine: Store, store_url: str
) -> None:
    # The session's store (chDB opens one folder per process); the bench uses a database of its own.
    with TRACE.open(encoding="utf-8", newline="") as lines:
        every, _ = parse_azure_csv(lines, source=TRACE.name)
    rows = [row for row in every if 180.0 <= row.t_s < 240.0]
    assert len(rows) == 531
    model_dir = make_model(tmp_path / "model", size="tiny", seed=0)
    figures = await measure_trace(rows, time_scale=4.0, model_dir=model_dir, store_url=store_url)
    assert figures["request_errors"] == 0
    assert figures["rows_stored"] == figures["profile_requests"] == len(rows)
    compared = set(figures["rel_err"])
    assert {
        "mean_rps",
        "gap_cv",
        "prompt_tokens_p50",
        "prompt_tokens_p99",
        "completion_tokens_mean",
    } <= compared
    for name, err in figures["rel_err"].items():
        assert err <= 0.05, (name, figures["profile"][name], figures["csv"][name])
