"""The canary loop's last resort, over real NATS: a canary whose loop fails and whose roll back then
fails too is not swallowed: the deployer logs both, with the error and its traceback."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from nats.js import JetStreamContext
from structlog.testing import capture_logs

from evertune.deployer.backend import EngineReport
from evertune.deployer.backend_local import LocalBackend
from evertune.deployer.canary_loop import CanaryLoop
from evertune.deployer.rollout_policy import RolloutPolicy
from evertune.deployer.state import RolloutRecord, State
from evertune.deployer.workspace import Workspace
from evertune.v1 import endpoint_pb2 as D


async def _ignore(report: EngineReport) -> None:
    """No engine runs here to report on."""


async def test_a_failed_roll_back_of_a_failed_canary_is_logged_with_its_error(
    js: JetStreamContext, tmp_path: Path
) -> None:
    # a rollout record without its endpoint or deployments: the loop's first write fails, and so
    # does the roll back that follows it
    name, canary = f"ep-{uuid.uuid4().hex[:8]}", f"dep-{uuid.uuid4().hex[:12]}"
    state = await State.open(js)
    await state.begin_rollout(name, canary, RolloutRecord(deployment_id=canary, cause_id="req-1"))
    backend = LocalBackend(
        log_dir=tmp_path,
        hardware_classes=["cpu"],
        report=_ignore,
        health_interval_s=2.0,
        max_restarts=0,
        restart_window_s=60.0,
        ready_timeout_s=10.0,
        cpu_cores_per_engine=0,
    )
    work = Workspace(state=state, backend=backend, drain_timeout_s=0.0)
    loop = CanaryLoop(work, telemetry=None, telemetry_lag_s=0.0)
    try:
        with capture_logs() as logs:
            await loop.run(
                name,
                D.Deployment(id=canary, endpoint=name),
                stable_id="dep-000000000000",
                policy=RolloutPolicy(),
                urls=[],
                cause_id="req-1",
            )
            await asyncio.wait_for(work.idle(), 10)
    finally:
        await state.end_rollout(name, canary)
        await work.close()
    errors = [e for e in logs if e["log_level"] == "error"]
    assert [e["event"] for e in errors][:2] == [
        "canary failed",
        "canary roll back failed; the endpoint's routes and rollout record need a look",
    ]
    assert errors[1]["canary"] == canary and errors[1]["error"] and errors[1]["exc_info"] is True
    assert loop.signal(name) is None  # the loop is gone either way
