"""`evertune trial run`: the job it builds, and a hand-submitted trial answered by a runner."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from nats.aio.client import Client

from evertune.apps.cli.trial import TrialRequest, build_job, parse_rates
from evertune.errors import InvalidArgument
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.store import Store
from evertune.runner import RunnerService
from tests.apps.cli.helpers import run_cli

from .helpers import fake_factory, settings
from .test_service import running


def _request(**overrides: object) -> TrialRequest:
    values: dict[str, object] = {
        "config": '{"max_num_seqs": 32}',
        "workload": "voice",
        "rates_rps": (2.0, 4.0),
        "target_rate_rps": 4.0,
        "duration_s": 20.0,
        "warmup_s": 5.0,
        "repeats": 2,
        "seed": 1,
        "slo_ttft_ms": 250.0,
        "slo_itl_ms": 100.0,
        "slo_share": 0.9,
        "gates": ("slo", "stability"),
        "reference": "",
        "threshold": 0.0,
        "baseline": False,
        "hardware": "cpu",
        "endpoint": "manual",
        "timeout_s": 600.0,
        **overrides,
    }
    return TrialRequest(**values)  # type: ignore[arg-type]


def test_the_job_carries_every_setting_and_leaves_the_model_to_the_runner() -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    job = build_job(_request(), now=now)
    assert job.engine_config.max_num_seqs == 32 and job.engine_config.model == ""
    assert list(job.rates_rps) == [2.0, 4.0] and job.target_rate_rps == 4.0 and job.repeats == 2
    assert job.duration_per_rate.seconds == 20 and job.warmup.seconds == 5
    assert job.deadline.ToDatetime(tzinfo=UTC) == datetime(2026, 11, 30, 0, 10, tzinfo=UTC)
    assert job.trace_uri == "voice" and job.hardware_class == "cpu" and job.job_id != job.trial_id
    reference = build_job(_request(gates=("correctness",), reference="trial-abc", threshold=0.9), now=now)
    assert reference.gates[0].reference_uri == "trial:trial-abc" and reference.gates[0].threshold == 0.9


def test_bad_input_is_one_line() -> None:
    now = datetime.now(UTC)
    with pytest.raises(InvalidArgument, match="not JSON"):
        build_job(_request(config="{max"), now=now)
    with pytest.raises(InvalidArgument, match="max_num_seqs"):
        build_job(_request(config='{"max_num_seqs": -1}'), now=now)
    with pytest.raises(InvalidArgument, match="needs --reference"):
        build_job(_request(gates=("correctness",)), now=now)
    with pytest.raises(InvalidArgument, match="not found"):
        build_job(_request(workload="/no/such.jsonl"), now=now)
    # A knob the hardware cannot run is refused before any job is sent, naming knob and hardware.
    with pytest.raises(InvalidArgument, match=r"--config cannot run on cpu: quantization 'fp8' cannot run"):
        build_job(_request(config='{"quantization": "fp8"}', hardware="cpu"), now=now)
    with pytest.raises(InvalidArgument, match="tensor_parallel_size 16 exceeds the 8 devices of h200"):
        build_job(_request(config='{"tensor_parallel_size": 16}', hardware="h200"), now=now)
    # A class an operator named (not a known profile) is left to its runners.
    assert build_job(_request(config='{"quantization": "fp8"}', hardware="pool-a"), now=now).hardware_class
    with pytest.raises(InvalidArgument, match="positive"):
        parse_rates("2,-1")
    assert parse_rates("1, 2.5") == (1.0, 2.5)


async def test_a_trial_submitted_by_hand_is_run_and_its_result_printed(
    nats_server: EmbeddedNats, nc: Client, store: Store, tmp_path: Path
) -> None:
    service = RunnerService(settings(), engine_factory=fake_factory(), model_dir=tmp_path)
    async with running(service, nc, store):
        # the command in this process, on a thread: the runner answers on this test's loop
        command = await asyncio.to_thread(
            run_cli, "trial", "run",
            "--nats-url", nats_server.url,
            "--hardware", service.settings.hardware,
            "--config", '{"model": "/models/fake"}',
            "--rates", "8", "--duration", "1.5", "--timeout", "120", "--json",
        )  # fmt: skip
    assert command.returncode == 0, command.stderr
    result = json.loads(command.stdout.strip().splitlines()[-1])
    assert result["status"] == "TRIAL_STATUS_OK" and result["passed"] is True
    assert [g["name"] for g in result["gates"]] == ["slo", "stability"]
    assert "submitted trial" in command.stderr and "replaying 8 rps" in command.stderr
