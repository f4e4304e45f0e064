"""The runner's /metrics, scraped for real after real trials on the session's NATS and chDB."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.domain.engines import EngineSpec
from evertune.infra.bus import publish
from evertune.infra.store import Store
from evertune.runner import RunnerService
from tests.metrics import samples_of, scrape, scrape_text, types_of, value

from .helpers import fake_factory, job, settings
from .test_service import running, watching


def _fails_at_start(spec: EngineSpec) -> list[str]:
    """The stand-in exits at start for a config with chunked prefill on (a planted failure)."""
    return ["--exit-at-start"] if spec.enable_chunked_prefill else []


async def test_trials_phases_and_the_jobs_consumer_are_scraped(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path
) -> None:
    endpoint = f"ep-{uuid.uuid4().hex[:10]}"
    service = RunnerService(settings(), engine_factory=fake_factory(_fails_at_start), model_dir=tmp_path)
    good = job(hardware=service.settings.hardware, endpoint=endpoint, gates=("slo",), duration_s=1.0)
    bad = job(hardware=service.settings.hardware, endpoint=endpoint, gates=("slo",), duration_s=1.0)
    bad.engine_config.enable_chunked_prefill = True
    async with watching(js, endpoint) as seen, running(service, nc, store):
        url = service.metrics_url()
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":9404/metrics")  # a free port
        assert service.listen()["metrics"] == url.removeprefix("http://").removesuffix("/metrics")
        before = await scrape(url)
        assert value(before, "evertune_runner_trial_running") == 0
        for trial_job in (good, bad):
            await publish(js, service.settings.subject, trial_job, msg_id=trial_job.job_id)
        await publish(js, service.settings.subject, b"\xff\x01 not a job", msg_id=uuid.uuid4().hex)
        await seen.wait_for("trial.completed", good.job_id, timeout_s=60)
        await seen.wait_for("trial.completed", bad.job_id, timeout_s=60)
        for _ in range(100):  # the consumer acks after the handler's return; the poison after that
            if service.stats.jobs and service.stats.jobs.acked >= 2 and service.stats.jobs.poisoned:
                break
            await asyncio.sleep(0.05)
        text = await scrape_text(url)
    samples = samples_of(text)
    types = types_of(text)
    assert types["evertune_runner_trials"] == "counter"
    assert types["evertune_runner_trial_phase_seconds"] == "histogram"
    assert value(samples, "evertune_runner_trials_total", outcome="passed") == 1
    assert value(samples, "evertune_runner_trials_total", outcome="error") == 1
    assert value(samples, "evertune_runner_failures_total", kind="trial_error") == 1
    # the good trial's engine started, replayed and stopped; the bad one's never got ready
    start_count = value(samples, "evertune_runner_trial_phase_seconds_count", phase="engine_start")
    assert start_count == 1
    start_s = value(samples, "evertune_runner_trial_phase_seconds_sum", phase="engine_start")
    assert 0 < start_s < 20
    assert value(samples, "evertune_runner_trial_phase_seconds_count", phase="replay") == 1
    replay_s = value(samples, "evertune_runner_trial_phase_seconds_sum", phase="replay")
    assert 2.0 <= replay_s < 60  # two repeats of 1 s of traffic, at least
    assert value(samples, "evertune_runner_trial_phase_seconds_bucket", phase="replay", le="+Inf") == 1
    assert value(samples, "evertune_runner_trial_phase_seconds_bucket", phase="replay", le="1.0") == 0
    assert value(samples, "evertune_runner_trial_duration_seconds_count") == 2
    assert value(samples, "evertune_runner_events_published_total", kind="trial.completed") == 2
    assert value(samples, "evertune_runner_events_published_total", kind="trial.progress") >= 4
    durable = service.settings.durable
    assert value(samples, "evertune_runner_messages_acked_total", consumer=durable) == 2
    assert value(samples, "evertune_runner_messages_poisoned_total", consumer=durable) == 1
    assert value(samples, "evertune_runner_messages_in_flight", consumer=durable) == 0
