"""A JSONL trace file as trials replay it: each run plans only the records it reaches."""

from __future__ import annotations

from pathlib import Path

import pytest

from evertune.domain.model import load_tokenizer
from evertune.domain.replay import plan_rps
from evertune.domain.workloads import DailyCurve, VoiceWorkload, plan_voice
from evertune.domain.workloads.jsonl import format_records, records_of_plan
from evertune.domain.workloads.source import CorpusText, load_workload
from evertune.infra.file_hash import sha256_of
from evertune.runner.trace import TraceUnavailable, open_trace


def _trace(folder: Path, model_dir: Path) -> Path:
    """Five minutes of voice traffic as evertune JSONL (no text), as the searcher writes a profile's."""
    plan = plan_voice(
        VoiceWorkload(duration_s=300, peak_calls_per_s=1.0, seed=5, curve=DailyCurve(shape="flat")),
        text=CorpusText(),
    )
    tokenizer = load_tokenizer(model_dir)
    records = records_of_plan(plan, count_tokens=lambda text: len(tokenizer.encode(text).ids))
    path = folder / "voice.jsonl"
    path.write_text("".join(format_records(records)), encoding="utf-8")
    return path


@pytest.mark.parametrize(("rate_rps", "duration_s"), [(2.5, 15.0), (1.0, 40.0), (6.0, 5.0)])
def test_a_run_is_the_whole_trace_planned_then_cut(
    tiny_model: Path, tmp_path: Path, rate_rps: float, duration_s: float
) -> None:
    path = _trace(tmp_path, tiny_model)
    source = open_trace(path.as_uri(), sha256=sha256_of(path), model_dir=tiny_model)
    assert source.kind == "file"
    for run in ("warmup/2.5", "2.5/0"):
        got = source.run(rate_rps=rate_rps, duration_s=duration_s, seed=3, run=run)
        # the way runs were planned before: every record of the file, then the cut
        whole = load_workload(
            str(path), duration_s=None, seed=_seed(3, run), rate_scale=1.0, tokenizer_dir=tiny_model
        ).plan
        multiplier = rate_rps / plan_rps(whole)
        cut = [r for r in whole if r.at_s / multiplier < duration_s]
        assert got.multiplier == pytest.approx(multiplier)
        assert got.plan == cut and len(cut) < len(whole)
        assert any(len(r.messages) > 2 for r in cut)  # conversations with history are among them


def test_a_trace_file_with_fewer_than_two_requests_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    path = _trace(tmp_path, tiny_model)
    path.write_text(path.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    with pytest.raises(TraceUnavailable, match="has 1 requests"):
        open_trace(path.as_uri(), sha256="", model_dir=tiny_model)


def _seed(seed: int, run: str) -> int:
    from evertune.runner.trace import _run_seed

    return _run_seed(seed, run)
