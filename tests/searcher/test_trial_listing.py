"""The pure parts of ListTrials: a `trials` row becomes a `Trial`, and the command line's line for it."""

from __future__ import annotations

import base64
from datetime import datetime

from evertune.apps.cli.search import config_diff, trial_line
from evertune.searcher.records import trial_of_row
from evertune.v1 import endpoint_pb2, events_pb2, jobs_pb2
from evertune.v1 import search_service_pb2 as pb

BASE = endpoint_pb2.EngineConfig(engine="vllm", model="m", max_num_seqs=8, enable_prefix_caching=False)


def _row(payload: str, *, status: str = "ok") -> tuple[object, ...]:
    started, finished = datetime(2026, 11, 30, 1, 0, 0), datetime(2026, 11, 30, 1, 0, 5)
    return (payload, started, finished, 2, "engine log", "ab" * 8, "t-1", "j-1", "s-1", "cpu", status, "")


def test_a_row_is_served_as_the_runners_report_with_the_tables_extras() -> None:
    report = events_pb2.TrialCompleted(
        search_id="s-1", trial_id="t-1", job_id="j-1", status=jobs_pb2.TRIAL_STATUS_OK, passed=True
    )
    trial = trial_of_row(_row(base64.b64encode(report.SerializeToString()).decode()))
    assert trial.result == report and trial.deliveries == 2 and trial.log_tail == "engine log"
    assert trial.end_time.seconds - trial.start_time.seconds == 5  # naive times read as UTC
    assert trial.start_time.ToDatetime() == datetime(2026, 11, 30, 1, 0, 0)


def test_an_undecodable_report_is_served_from_the_columns_and_says_so() -> None:
    trial = trial_of_row(_row("not base64 !", status="error"))
    assert trial.result.trial_id == "t-1" and trial.result.status == jobs_pb2.TRIAL_STATUS_ERROR
    assert trial.result.error == "the stored report cannot be decoded" and not trial.result.passed


def test_the_config_is_shown_as_its_difference_from_the_baseline() -> None:
    changed = endpoint_pb2.EngineConfig(
        engine="vllm", model="other", max_num_seqs=8, enable_prefix_caching=True
    )
    assert config_diff(changed, BASE) == "enable_prefix_caching off -> on"  # the model is not a knob
    assert config_diff(BASE, BASE) == "= baseline"
    fewer = endpoint_pb2.EngineConfig(engine="vllm", enable_prefix_caching=False)
    assert config_diff(fewer, BASE) == "max_num_seqs 8 -> unset"
    assert config_diff(changed, None) == "enable_prefix_caching=on engine=vllm max_num_seqs=8"


def test_a_failed_trial_line_names_its_gate_and_error() -> None:
    report = events_pb2.TrialCompleted(
        trial_id="t-2",
        hardware_class="cpu",
        status=jobs_pb2.TRIAL_STATUS_ERROR,
        engine_config=BASE,
        gates=[
            jobs_pb2.GateResult(name="correctness", passed=False, value=0.5, threshold=1.0, detail="differs")
        ],
        error="engine exited with code 1",
    )
    line = trial_line(pb.Trial(result=report), None)
    assert line.startswith("t-2  cpu  error  FAILED  [")
    assert "gates: correctness FAIL 0.50/1.00 (differs)" in line
    assert line.endswith("error: engine exited with code 1")
    assert "goodput" not in line  # no figures for a run that did not finish
