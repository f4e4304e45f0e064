"""The runner service on the session's NATS and chDB: jobs in, rows and trial.completed out, once."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from evertune.domain.engines import EngineSpec, VllmEngine
from evertune.domain.engines.fingerprint import detect as detect_hardware
from evertune.infra.bus import publish, publish_event
from evertune.infra.events import EventKind, new_event
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime import ServiceContext
from evertune.infra.settings import SharedSettings, load_settings
from evertune.infra.store import Store, migrate
from evertune.runner import RunnerService
from evertune.runner.report import COLUMNS
from evertune.runner.trial_runner import TrialEngine
from evertune.v1 import events_pb2, jobs_pb2

from .helpers import fake_factory, job, settings


class Events:
    """Every event of one endpoint, as they arrive."""

    def __init__(self) -> None:
        self.events: list[events_pb2.Event] = []
        self.arrived = asyncio.Event()

    def of(self, kind: str, job_id: str = "") -> list[events_pb2.Event]:
        return [
            e
            for e in self.events
            if e.kind == kind and (not job_id or getattr(e, e.kind.replace(".", "_")).job_id == job_id)
        ]

    async def wait_for(
        self, kind: str, job_id: str, *, timeout_s: float, count: int = 1
    ) -> list[events_pb2.Event]:
        async with asyncio.timeout(timeout_s):
            while len(self.of(kind, job_id)) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.of(kind, job_id)


@contextlib.asynccontextmanager
async def watching(js: JetStreamContext, endpoint: str) -> AsyncIterator[Events]:
    seen = Events()

    async def on_msg(msg) -> None:  # type: ignore[no-untyped-def]
        seen.events.append(events_pb2.Event.FromString(msg.data))
        seen.arrived.set()

    sub = await js.subscribe(
        f"evertune.events.*.*.{endpoint}",
        stream="EVENTS",
        cb=on_msg,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW),
    )
    try:
        yield seen
    finally:
        await sub.unsubscribe()


@contextlib.asynccontextmanager
async def running(service: RunnerService, nc: Client, store: Store) -> AsyncIterator[RunnerService]:
    await migrate(store)
    ctx = ServiceContext(shared=load_settings(SharedSettings), nc=nc, js=nc.jetstream(), store=store)
    await service.start(ctx)
    try:
        yield service
    finally:
        await service.stop(10.0)


def _endpoint() -> str:
    return f"ep-{uuid.uuid4().hex[:10]}"


async def test_a_job_becomes_one_row_and_one_trial_completed(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path, tiny_model: Path
) -> None:
    endpoint = _endpoint()
    # the tiny model's chat format renders the golden chats the stand-in answers
    service = RunnerService(settings(), engine_factory=fake_factory(), model_dir=tiny_model)
    trial_job = job(
        hardware=service.settings.hardware,
        endpoint=endpoint,
        baseline=True,
        gates=("correctness", "slo", "stability"),
    )
    trial_job.endpoint_uid = f"ep-{uuid.uuid4().hex[:24]}"
    async with watching(js, endpoint) as seen, running(service, nc, store):
        await publish(js, service.settings.subject, trial_job, msg_id=trial_job.job_id)
        [event] = await seen.wait_for("trial.completed", trial_job.job_id, timeout_s=60)
    # The trial's events belong to the endpoint the search was started on, by its id too.
    assert event.endpoint_uid == trial_job.endpoint_uid
    assert {e.endpoint_uid for e in seen.of("trial.progress", trial_job.job_id)} == {trial_job.endpoint_uid}
    done = event.trial_completed
    failed = [f"{g.name}: {g.detail or g.value}" for g in done.gates if not g.passed]
    assert done.status == jobs_pb2.TRIAL_STATUS_OK and done.passed and done.baseline, failed
    assert [g.name for g in done.gates] == ["correctness", "slo", "stability"]
    assert done.metrics.ttft_p50_ms > 0 and len(done.metrics.rates) == 2 and done.goodput_rps == 10.0
    assert done.engine_config.model == "/models/fake"
    # The result says what it ran on, and how long each phase took.
    here = detect_hardware()
    assert done.hardware.id == here.id and done.hardware.tier == here.tier and done.hardware.cores >= 1
    assert done.phases.engine_start_s > 0 and done.phases.replay_s > 0 and done.phases.golden_s > 0
    phases = [e.trial_progress.phase for e in seen.of("trial.progress", trial_job.job_id)]
    assert phases[0] == events_pb2.TRIAL_PHASE_ACCEPTED and events_pb2.TRIAL_PHASE_GATES in phases
    rows = (
        await store.query(
            f"SELECT {', '.join(COLUMNS)} FROM trials WHERE job_id = {{j:String}}", {"j": trial_job.job_id}
        )
    ).dicts()
    assert len(rows) == 1
    stored = rows[0]
    assert stored["status"] == "ok" and stored["passed"] and stored["deliveries"] == 1
    assert len(stored["golden_hashes"]) == 6 and all(len(chain) == 8 for chain in stored["golden_hashes"])
    assert stored["golden_set"].startswith("voice-v1-n6-t8-s0-")  # the default recipe: voice turns
    assert stored["hardware_fingerprint"] == here.id and stored["hardware_tier"] == here.tier
    assert [r["rate_rps"] for r in stored["rates"]] == [8.0, 10.0] and stored["gates"][0][
        "name"
    ] == "correctness"
    # The stored reference answers a candidate's correctness gate through the store.
    candidate = job(
        hardware=service.settings.hardware,
        endpoint=endpoint,
        gates=("correctness",),
        reference=f"trial:{trial_job.trial_id}",
        duration_s=1.0,
    )
    candidate.engine_config.enable_chunked_prefill = True
    again = RunnerService(service.settings, engine_factory=fake_factory(), model_dir=tiny_model)
    async with watching(js, endpoint) as seen, running(again, nc, store):
        await publish(js, service.settings.subject, candidate, msg_id=candidate.job_id)
        [event] = await seen.wait_for("trial.completed", candidate.job_id, timeout_s=60)
    gate = event.trial_completed.gates[0]
    assert gate.passed and gate.value == 1.0 and "exact change (enable_chunked_prefill)" in gate.detail


async def test_a_redelivered_finished_job_is_republished_not_rerun(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path
) -> None:
    endpoint = _endpoint()
    service = RunnerService(settings(), engine_factory=fake_factory(), model_dir=tmp_path)
    trial_job = job(hardware=service.settings.hardware, endpoint=endpoint, gates=("slo",), duration_s=1.0)
    async with watching(js, endpoint) as seen, running(service, nc, store):
        await publish(js, service.settings.subject, trial_job, msg_id=trial_job.job_id)
        [first] = await seen.wait_for("trial.completed", trial_job.job_id, timeout_s=60)
        # The same job again (as after a runner died between its insert and its ack).
        await publish(js, service.settings.subject, trial_job, msg_id=f"{trial_job.job_id}-again")
        # Jobs are taken in order, one at a time: once the next job is done, the repeat was handled.
        after = job(hardware=service.settings.hardware, endpoint=endpoint, gates=(), duration_s=1.0)
        await publish(js, service.settings.subject, after, msg_id=after.job_id)
        await seen.wait_for("trial.completed", after.job_id, timeout_s=60)
    assert service.stats.trials_run == 2 and service.stats.republished == 1
    assert seen.of("trial.completed", trial_job.job_id) == [first]  # same event id: stored once
    count = await store.query("SELECT count() FROM trials WHERE job_id = {j:String}", {"j": trial_job.job_id})
    assert count.scalar() == 1


async def test_an_engine_that_never_starts_is_reported_with_its_log_tail(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path
) -> None:
    endpoint = _endpoint()
    service = RunnerService(
        settings(), engine_factory=fake_factory(lambda spec: ["--exit-at-start"]), model_dir=tmp_path
    )
    trial_job = job(hardware=service.settings.hardware, endpoint=endpoint)
    async with watching(js, endpoint) as seen, running(service, nc, store):
        await publish(js, service.settings.subject, trial_job, msg_id=trial_job.job_id)
        [event] = await seen.wait_for("trial.completed", trial_job.job_id, timeout_s=60)
        assert service.state == "running"  # the runner lives on
    done = event.trial_completed
    assert done.status == jobs_pb2.TRIAL_STATUS_ERROR and not done.passed
    assert "exited with code 3" in done.error and "planted start failure" in done.error
    [[status, tail]] = await store.query(
        "SELECT status, log_tail FROM trials WHERE job_id = {j:String}", {"j": trial_job.job_id}
    )
    assert status == "error" and "planted start failure" in tail


async def test_an_undecodable_job_is_terminated_and_reported(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path
) -> None:
    service = RunnerService(settings(), engine_factory=fake_factory(), model_dir=tmp_path)
    poison: list[events_pb2.Event] = []
    got = asyncio.Event()

    async def on_msg(msg) -> None:  # type: ignore[no-untyped-def]
        event = events_pb2.Event.FromString(msg.data)
        if event.service_poison_message.subject == service.settings.subject:
            poison.append(event)
            got.set()

    sub = await js.subscribe(
        "evertune.events.service.poison_message._system",
        stream="EVENTS",
        cb=on_msg,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW),
    )
    try:
        async with running(service, nc, store):
            await publish(js, service.settings.subject, b"\xff\x01 not a job", msg_id=uuid.uuid4().hex)
            await asyncio.wait_for(got.wait(), 30)
    finally:
        await sub.unsubscribe()
    assert "undecodable TrialJob" in poison[0].service_poison_message.error
    assert service.stats.trials_run == 0


async def test_a_job_whose_runner_is_killed_mid_trial_is_redelivered_and_finished_once(
    nats_server: EmbeddedNats, nc: Client, js: JetStreamContext, store: Store, tmp_path: Path
) -> None:
    endpoint = _endpoint()
    hardware = f"test-{uuid.uuid4().hex[:8]}"
    trial_job = job(hardware=hardware, endpoint=endpoint, gates=("slo",), duration_s=2.0)
    first = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("runner_proc.py")),
        "--nats-url", nats_server.url,
        "--store-url", f"chdb://{tmp_path / 'first-store'}",
        "--hardware", hardware,
        "--model-dir", str(tmp_path),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert first.stdout is not None
        line = await asyncio.wait_for(first.stdout.readline(), 60)
        assert line.strip() == b"ready"
        async with watching(js, endpoint) as seen:
            await publish(js, f"evertune.jobs.{hardware}", trial_job, msg_id=trial_job.job_id)
            progress = await seen.wait_for("trial.progress", trial_job.job_id, timeout_s=60, count=4)
            replaying = progress[3].trial_progress  # accepted, starting engine, warm-up, replaying
            assert replaying.phase == events_pb2.TRIAL_PHASE_REPLAYING
            first_runner = replaying.runner
            first.send_signal(signal.SIGKILL)  # dies mid-trial: no ack, no nak
            await first.wait()
            second = RunnerService(
                settings(hardware=hardware), engine_factory=fake_factory(), model_dir=tmp_path
            )
            async with running(second, nc, store):
                [event] = await seen.wait_for("trial.completed", trial_job.job_id, timeout_s=90)
                await asyncio.sleep(1.0)
            assert len(seen.of("trial.completed", trial_job.job_id)) == 1
    finally:
        if first.returncode is None:
            first.kill()
            await first.wait()
    done = event.trial_completed
    assert done.status == jobs_pb2.TRIAL_STATUS_OK and done.runner == second.instance != first_runner
    assert second.stats.trials_run == 1
    rows = await store.query(
        "SELECT deliveries, runner FROM trials WHERE job_id = {j:String}", {"j": trial_job.job_id}
    )
    assert rows == [(2, second.instance)]


async def test_a_long_trial_is_kept_alive_and_not_handed_to_a_second_runner(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path
) -> None:
    endpoint = _endpoint()
    first = RunnerService(settings(ack_wait_s=1.0), engine_factory=fake_factory(), model_dir=tmp_path)
    second = RunnerService(first.settings, engine_factory=fake_factory(), model_dir=tmp_path)
    trial_job = job(hardware=first.settings.hardware, endpoint=endpoint, gates=("slo",), duration_s=2.0)
    async with watching(js, endpoint) as seen, running(first, nc, store), running(second, nc, store):
        await publish(js, first.settings.subject, trial_job, msg_id=trial_job.job_id)
        [event] = await seen.wait_for("trial.completed", trial_job.job_id, timeout_s=60)
        assert event.trial_completed.duration.seconds >= 4  # several ack waits long
        await asyncio.sleep(2.0)  # a redelivery, had there been one, would show by now
    assert first.stats.trials_run + second.stats.trials_run == 1
    assert first.stats.republished + second.stats.republished == 0
    rows = await store.query(
        "SELECT deliveries FROM trials WHERE job_id = {j:String}", {"j": trial_job.job_id}
    )
    assert rows == [(1,)]


async def _end_search(js: JetStreamContext, *, endpoint: str, search_id: str) -> None:
    """What the searcher publishes when a search is cancelled through the API."""
    payload = events_pb2.SearchCompleted(search_id=search_id, outcome=events_pb2.SEARCH_OUTCOME_CANCELLED)
    await publish_event(
        js, new_event(EventKind.SEARCH_COMPLETED, endpoint=endpoint, source="test", payload_message=payload)
    )


async def test_a_trial_whose_search_ends_is_stopped_and_reported_cancelled(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path
) -> None:
    endpoint = _endpoint()
    engines: list[TrialEngine] = []
    make = fake_factory()

    def factory(spec: EngineSpec, log_dir: Path) -> TrialEngine:
        engines.append(make(spec, log_dir))
        return engines[-1]

    service = RunnerService(settings(), engine_factory=factory, model_dir=tmp_path)
    long_job = job(
        hardware=service.settings.hardware, endpoint=endpoint, gates=("slo",), duration_s=60.0, repeats=1
    )
    long_job.search_id = f"search-{uuid.uuid4().hex[:8]}"
    async with watching(js, endpoint) as seen, running(service, nc, store):
        await publish(js, service.settings.subject, long_job, msg_id=long_job.job_id)
        await seen.wait_for("trial.progress", long_job.job_id, timeout_s=30, count=4)
        assert seen.of("trial.progress", long_job.job_id)[-1].trial_progress.phase == (
            events_pb2.TRIAL_PHASE_REPLAYING
        )
        await _end_search(js, endpoint=endpoint, search_id=long_job.search_id)
        [event] = await seen.wait_for("trial.completed", long_job.job_id, timeout_s=20)
        # A job of the ended search that reaches the runner later is not started at all.
        late = job(hardware=service.settings.hardware, endpoint=endpoint, gates=("slo",))
        late.search_id = long_job.search_id
        await publish(js, service.settings.subject, late, msg_id=late.job_id)
        [late_event] = await seen.wait_for("trial.completed", late.job_id, timeout_s=20)
        # The runner goes on with the next search's jobs.
        other = job(hardware=service.settings.hardware, endpoint=endpoint, gates=("slo",), repeats=1)
        await publish(js, service.settings.subject, other, msg_id=other.job_id)
        [other_event] = await seen.wait_for("trial.completed", other.job_id, timeout_s=60)
    done = event.trial_completed
    assert done.status == jobs_pb2.TRIAL_STATUS_CANCELLED and not done.passed
    assert f"the search {long_job.search_id} ended while the trial ran" in done.error
    assert done.duration.seconds < 30  # stopped, not replayed to the end of its 60 s
    assert late_event.trial_completed.status == jobs_pb2.TRIAL_STATUS_CANCELLED
    assert "had ended before the trial started" in late_event.trial_completed.error
    assert other_event.trial_completed.status == jobs_pb2.TRIAL_STATUS_OK
    assert len(engines) == 2  # the long job's and the next search's; none for the late job
    assert not any(isinstance(e, VllmEngine) and e.running for e in engines)
    assert service.stats.cancelled == 2
    rows = await store.query(
        "SELECT status FROM trials WHERE job_id IN ({a:String}, {b:String})",
        {"a": long_job.job_id, "b": late.job_id},
    )
    assert sorted(rows) == [("cancelled",), ("cancelled",)]
