"""What the command line prints for people, rendered as a pipe sees it (plain text, one line a row)
and as a terminal does: status, endpoints and deployments, a trial's result, a benchmark's steps."""

from __future__ import annotations

import io

from google.protobuf.duration_pb2 import Duration
from rich.console import Console, RenderableType

from evertune.apps.benchmarks import showing_steps, step
from evertune.apps.cli.bench import step_count
from evertune.apps.cli.endpoint import deployment_table, endpoint_table
from evertune.apps.cli.status import status_table
from evertune.apps.cli.trial import render, trial_bar
from evertune.apps.services import SERVICE_NAMES
from evertune.infra.runtime.micro import InstanceStatus
from evertune.v1 import endpoint_pb2, events_pb2, jobs_pb2


def _plain(renderable: RenderableType) -> list[str]:
    console = Console(file=io.StringIO(), width=200)
    console.print(renderable)
    text = str(console.file.getvalue())  # type: ignore[attr-defined]
    assert "\x1b" not in text
    return text.splitlines()


def test_status_lists_services_in_the_loops_order_one_line_each() -> None:
    found = [
        InstanceStatus(
            SERVICE_NAMES[-1], "b", "1", "2026-12-05T10:00:00", "running", "42", {"hardware": "cpu", "x": ""}
        ),
        InstanceStatus(SERVICE_NAMES[0], "a", "1", "2026-12-05T10:00:00", "running", "42", {}),
    ]
    lines = _plain(status_table(found))
    assert lines[0].split() == ["SERVICE", "STATE", "PID", "STARTED", "(UTC)", "DETAILS"]
    # in the loop's order, empty details left out
    assert lines[1].split() == [SERVICE_NAMES[0], "running", "42", "2026-12-05T10:00:00"]
    assert lines[2].split() == [SERVICE_NAMES[-1], "running", "42", "2026-12-05T10:00:00", "hardware=cpu"]


def test_endpoints_and_deployments_are_tables() -> None:
    endpoint = endpoint_pb2.Endpoint(
        spec=endpoint_pb2.EndpointSpec(
            name="voice", tenant="t", model="tiny", slo=endpoint_pb2.Slo(ttft_p99_ms=400.0)
        ),
        state=endpoint_pb2.ENDPOINT_STATE_READY,
        revision=3,
        stable_deployment_id="dep-1",
    )
    lines = _plain(endpoint_table([endpoint]))
    assert lines[1].split() == ["voice", "t", "READY", "3", "dep-1", "400", "tiny"]
    deployment = endpoint_pb2.Deployment(
        id="dep-1",
        state=endpoint_pb2.DEPLOYMENT_STATE_ACTIVE,
        weight=10_000,
        origin=endpoint_pb2.DEPLOYMENT_ORIGIN_PROMOTE,
        engine_config=endpoint_pb2.EngineConfig(model="m", max_num_seqs=8),
    )
    [head, row] = _plain(deployment_table([deployment]))
    assert head.split()[:4] == ["ID", "STATE", "WEIGHT", "ORIGIN"]
    assert row.startswith("dep-1") and row.split()[:4] == ["dep-1", "ACTIVE", "10000", "PROMOTE"]
    assert '{"max_num_seqs": 8}' in row


def _completed() -> events_pb2.TrialCompleted:
    done = events_pb2.TrialCompleted(
        trial_id="trial-1",
        hardware_class="cpu",
        status=jobs_pb2.TRIAL_STATUS_OK,
        passed=False,
        runner="r1",
        goodput_rps=2.5,
        duration=Duration(seconds=61),
    )
    done.metrics.rates.add(
        rate_rps=2.0,
        request_count=120,
        error_count=1,
        ttft_p50_ms=40.0,
        ttft_p90_ms=80.0,
        ttft_p99_ms=120.5,
        itl_p99_ms=9.0,
        attainment=0.95,
    )
    done.gates.add(name="slo", passed=True, detail="0.95 >= 0.9")
    done.gates.add(name="stability", passed=False, detail="p99 spread 40%")
    return done


def test_a_trials_result_shows_its_rates_goodput_and_gates() -> None:
    lines = _plain(render(_completed()))
    assert lines[0] == "trial trial-1 on cpu: ok, FAILED (61 s, runner r1)"
    assert lines[1].split()[:3] == ["rate", "rps", "requests"]
    assert lines[2].split() == ["2.00", "120", "1", "40.0", "80.0", "120.5", "9.0", "0.950"]
    assert lines[3] == "goodput 2.5 rps"
    assert lines[5].split() == ["slo", "pass", "0.95", ">=", "0.9"]
    assert lines[6].split()[:2] == ["stability", "FAIL"]


def test_a_trials_bar_is_drawn_on_a_terminal_only() -> None:
    piped = io.StringIO()
    with trial_bar(Console(file=piped)) as bar:
        task = bar.add_task("measure", total=2)
        bar.update(task, completed=1)
    assert piped.getvalue() == ""
    terminal = io.StringIO()
    with trial_bar(Console(file=terminal, force_terminal=True, width=120)) as bar:
        task = bar.add_task("measure", total=2)
        bar.update(task, completed=1)
    assert "measure" in terminal.getvalue() and "1/2" in terminal.getvalue()


def test_a_benchmarks_steps_reach_whoever_shows_them() -> None:
    step("nobody shows this")  # no error, nothing happens
    seen: list[tuple[str, int, int]] = []
    with showing_steps(lambda what, done, total: seen.append((what, done, total))):
        step("grid cell", 3, 48)
    step("after")
    assert seen == [("grid cell", 3, 48)]
    assert step_count(3, 48) == "3/48" and step_count(0, 0) == ""
