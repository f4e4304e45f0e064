"""A runner SIGKILLed in the middle of a trial while a search's jobs are being run.

Two runners take the jobs of one hardware class (`sim-cpu`, the sim engine) from the JetStream
work queue: one in a process of its own, which the test kills while it replays a trial, and one
hosted here. The killed runner's job is neither acked nor nak'ed; once its ack wait passes, the
work queue hands it to the surviving runner, and every job ends with exactly one `trial.completed`
and one row in the `trials` table.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from pathlib import Path

import pytest

from evertune.apps.harness.waiting import eventually
from evertune.infra.bus import connect, publish
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime.host import host_services
from evertune.infra.settings import SharedSettings, load_settings
from evertune.infra.store import open_store
from evertune.runner import RunnerService
from evertune.v1 import endpoint_pb2, events_pb2, jobs_pb2
from tests.reliability.loop import watching
from tests.reliability.runner_process import runner_settings
from tests.runner.helpers import job

pytestmark = pytest.mark.reliability

HARDWARE = "sim-cpu"
JOBS = 3  #: trial jobs of the "search"
ACK_WAIT_S = 3.0  #: a job taken by a dead runner is redelivered after this long


async def test_a_runner_killed_mid_trial_hands_its_job_to_another_runner(
    store_url: str, tokenizer_dir: Path, tmp_path: Path
) -> None:
    nats = EmbeddedNats(tmp_path / "nats")
    await nats.start()
    endpoint = f"rel-run-{uuid.uuid4().hex[:6]}"
    database = f"rel_{uuid.uuid4().hex[:8]}"
    doomed = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.reliability.runner_process",
        "--nats", nats.url,
        "--store", f"chdb://{tmp_path / 'doomed-store'}",
        "--hardware", HARDWARE,
        "--model-dir", str(tokenizer_dir),
        "--ack-wait-s", str(ACK_WAIT_S),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    survivor = RunnerService(runner_settings(HARDWARE, ack_wait_s=ACK_WAIT_S), model_dir=tokenizer_dir)
    shared = load_settings(
        SharedSettings, data_dir=tmp_path / "data", clickhouse_url=store_url, clickhouse_database=database
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    hosting = asyncio.create_task(
        host_services([survivor], shared=shared, nats_url=nats.url, stop=stop, on_ready=lambda _: ready.set())
    )
    nc = await connect(nats.url, name="reliability-runner-test")
    store = await open_store(store_url, database=database)
    try:
        assert doomed.stdout is not None
        assert (await asyncio.wait_for(doomed.stdout.readline(), 60)).strip() == b"ready"
        await asyncio.wait_for(ready.wait(), 60)
        js = nc.jetstream()
        config = endpoint_pb2.EngineConfig(engine="sim", model=str(tokenizer_dir), max_num_seqs=16)
        jobs = [
            job(hardware=HARDWARE, config=config, endpoint=endpoint, gates=("slo",), rates=(4.0,), target=4.0,
                duration_s=3.0, repeats=1, ttft_p99_ms=2000.0)
            for _ in range(JOBS)
        ]  # fmt: skip
        async with watching(js, endpoint) as seen:
            for trial_job in jobs:
                await publish(js, f"evertune.jobs.{HARDWARE}", trial_job, msg_id=trial_job.job_id)

            def doomed_replaying() -> bool:
                return any(
                    e.trial_progress.phase == events_pb2.TRIAL_PHASE_REPLAYING
                    and e.trial_progress.runner != survivor.instance
                    for e in seen.of("trial.progress")
                )

            await eventually(doomed_replaying, timeout_s=60, what="the doomed runner replaying a trial")
            killed = next(
                e.trial_progress
                for e in seen.of("trial.progress")
                if e.trial_progress.phase == events_pb2.TRIAL_PHASE_REPLAYING
                and e.trial_progress.runner != survivor.instance
            )
            doomed.send_signal(signal.SIGKILL)  # mid-trial: no ack, no nak, no last word
            await doomed.wait()
            await eventually(
                lambda: len({e.trial_completed.job_id for e in seen.of("trial.completed")}) == JOBS,
                timeout_s=90,
                what="every job completed",
            )
            await asyncio.sleep(ACK_WAIT_S + 1.0)  # a second delivery of any job would have shown by now
        completed = [e.trial_completed for e in seen.of("trial.completed")]
        assert sorted(c.job_id for c in completed) == sorted(j.job_id for j in jobs)  # once each
        assert {c.runner for c in completed} == {survivor.instance}  # the dead runner finished none
        assert all(c.status == jobs_pb2.TRIAL_STATUS_OK for c in completed), [c.status for c in completed]
        rows = await store.query("SELECT job_id, count(), max(deliveries) FROM trials GROUP BY job_id")
        per_job = {str(j): (int(n), int(d)) for j, n, d in rows}
        assert set(per_job) == {j.job_id for j in jobs}
        assert all(n == 1 for n, _ in per_job.values()), per_job  # one trial row per job
        assert per_job[killed.job_id][1] == 2  # the killed job was delivered twice
        print(
            f"\nloop-runner-killed: jobs={JOBS} completed={len(completed)}"
            f" rows={sum(n for n, _ in per_job.values())}"
            f" killed_job_deliveries={per_job[killed.job_id][1]} survivor_trials={survivor.stats.trials_run}"
        )
    finally:
        if doomed.returncode is None:
            doomed.kill()
            await doomed.wait()
        stop.set()
        await asyncio.wait_for(hosting, 60)
        await store.command(f"DROP DATABASE IF EXISTS `{database}`")
        await store.close()
        await nc.close()
        await nats.stop()
