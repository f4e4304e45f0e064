"""`evertune replay` (in this process) against the fake engine with known delays (a process of its own)."""

from __future__ import annotations

import json
from pathlib import Path

from evertune.domain.workloads.shared_traces import AZURE_CODE_2023, shared_trace
from tests.apps.cli.helpers import assert_one_line_error, cli_env, run_cli

TRACE = shared_trace(AZURE_CODE_2023)


def test_voice_replay_prints_a_summary_with_attainment(fake_url: str) -> None:
    args = ("replay", "--target", fake_url, "--workload", "voice", "--duration", "30", "--time-scale", "6")
    # SLO far above the fake's delays: a 2-core machine running the suite stalled one request in
    # twelve past a 100 ms target once
    result = run_cli(*args, "--slo-ttft-ms", "400", "--slo-itl-ms", "200", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["requests"] > 5 and summary["errors"] == 0
    assert 15 <= summary["ttft_ms"]["p50"] <= 60  # the fake server answers after 20 ms
    assert summary["attainment"] == 1.0 and summary["meets_slo"] is True


def test_trace_replay_sizes_prompts_with_the_local_tokenizer(fake_url: str, tmp_path: Path) -> None:
    env = cli_env(EVERTUNE_DATA_DIR=str(tmp_path))
    args = ("replay", "--target", fake_url, "--workload", str(TRACE), "--duration", "20", "--json")
    result = run_cli(*args, env=env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["requests"] > 0 and summary["errors"] == 0
    assert "azure_llm_code_2023.csv: 8819 rows" in result.stderr


def test_bad_inputs_are_one_line(fake_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,5\nnot,a,row\n")
    strict = run_cli(
        "replay",
        "--target",
        fake_url,
        "--workload",
        str(bad),
        "--strict",
        env=cli_env(EVERTUNE_DATA_DIR=str(tmp_path)),
    )
    assert_one_line_error(strict, "line 3")
    assert_one_line_error(run_cli("replay", "--target", fake_url, "--workload", "podcast"), "'podcast'")
    assert_one_line_error(
        run_cli("replay", "--target", "http://127.0.0.1:1", "--workload", "voice", "--duration", "5"),
        "cannot reach http://127.0.0.1:1",
    )
    assert_one_line_error(
        run_cli("replay", "--target", fake_url, "--workload", "voice", "--find-goodput", "1", "4"), "SLO"
    )
