"""The runner service: takes trial jobs for its hardware class, one at a time, and reports each.

A thin shell around `TrialRunner` (trial_runner.py) and the pure report (report.py). For each job on
`evertune.jobs.<hardware>` (JOBS work queue, durable consumer `runner-<hardware>` shared by every
runner of the class):

1. decode it; an undecodable job, or one without ids or endpoint, is terminated and reported as
   `service.poison_message`;
2. if a row for its job id is stored already (an earlier delivery finished, and its runner died
   before the ack), republish that result and ack: a job is never run twice;
3. run the trial, kept alive with in-progress acks (`DurableConsumer`, three per `ack_wait_s`) so
   JetStream does not hand the job to another runner, with `trial.progress` events at each phase
   and finished rate;
4. store the row (deduplicated by job id), publish `trial.completed` as stored (event id derived
   from the job id), then ack.

A trial whose search ends while it runs (a `search.completed` for its search id: cancelled through
the API, or ended otherwise) is stopped where it is, engine included, and reported as cancelled; a
job of a search that already ended (among the last `ENDED_SEARCHES` this runner heard of) is
reported as cancelled without starting an engine.

A trial that fails (invalid job, engine that never gets ready or crashes, deadline) is a result
like any other: stored, reported, acked. Storing or publishing that fails is retried: the job is
nak'ed with a growing delay (`RETRY_DELAYS_S`); at the last of `max_deliver` deliveries it is
terminated and reported as poison. A runner that dies mid-trial leaves the job unacked: JetStream
redelivers it after `ack_wait_s` to another runner. A runner that is stopped mid-trial stops its
engine and naks the job at once (`nak_on_stop`), so another runner takes it.

Prometheus metrics (`metrics.py`: trials by outcome, phase durations, events, failures, the jobs
consumer) are served on `metrics_port`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import time
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any, ClassVar

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from evertune.domain.engines.fingerprint import Fingerprint
from evertune.domain.engines.fingerprint import detect as detect_hardware
from evertune.domain.model import ensure_model
from evertune.infra.bus import DurableConsumer, publish_event
from evertune.infra.bus.wiring import Delivery, durable_consumers, handler_of
from evertune.infra.events import EventKind, new_event
from evertune.infra.runtime import Service, ServiceContext
from evertune.infra.runtime.metrics import FunctionCollector
from evertune.runner.job import decode_job
from evertune.runner.metrics import runner_metrics
from evertune.runner.records import TrialRecords
from evertune.runner.report import completed, completed_event_id, row
from evertune.runner.settings import RunnerSettings
from evertune.runner.stats import RunnerStats
from evertune.runner.trial_runner import TrialEngineFactory, TrialOutcome, TrialRunner, default_engine_factory
from evertune.runner.wiring import STREAM, wiring
from evertune.v1 import common_pb2, events_pb2, jobs_pb2

#: Ended searches a runner remembers (a job of one of them is not started).
ENDED_SEARCHES = 1000
#: Longest wait for the jobs consumer's info before a scrape answers without its backlog, s.
CONSUMER_INFO_TIMEOUT_S = 1.0


class RunnerService(Service):
    name: ClassVar[str] = "runner"
    description: ClassVar[str] = "Runs trial jobs on its hardware class: engine, replay, measure, gates"
    needs_store: ClassVar[bool] = True

    def __init__(
        self,
        settings: RunnerSettings,
        *,
        engine_factory: TrialEngineFactory | None = None,
        model_dir: Path | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.instance = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._engine_factory = engine_factory
        self._model_dir = model_dir
        self._js: JetStreamContext | None = None
        self._records: TrialRecords | None = None
        self._runner: TrialRunner | None = None
        self._jobs: DurableConsumer | None = None  #: the work queue
        self._current_search = ""  #: search of the trial running now
        self._search_ended = asyncio.Event()  #: set when that search ends
        self._ended: OrderedDict[str, None] = OrderedDict()  #: searches heard to end, oldest first
        self._ended_sub: Subscription | None = None
        #: the runner's state and counts: what `details()` shows and the metrics export
        self.stats = RunnerStats(
            hardware=settings.hardware,
            jobs_subject=settings.subject,
            durable=settings.durable,
            instance=self.instance,
        )
        self.metrics_registry.register(FunctionCollector(lambda: runner_metrics(self.stats)))

    def details(self) -> dict[str, Any]:
        return self.stats.details()

    # --- lifecycle ---------------------------------------------------------------------------
    async def on_start(self, ctx: ServiceContext) -> None:
        assert ctx.store is not None, "the runner needs the store (needs_store)"
        self._js = ctx.js
        self._records = TrialRecords(ctx.store)
        data_dir = ctx.shared.data_dir.expanduser()
        model_dir = self._model_dir or functools.partial(ensure_model, data_dir)  # made at the first job
        log_dir = self.settings.log_dir or data_dir / "runner" / "logs"
        self._runner = TrialRunner(
            self.settings,
            engine_factory=self._engine_factory or default_engine_factory(self.settings),
            model_dir=model_dir,
            log_dir=log_dir,
            references=self._records.reference,
            traces=self._records.stored_trace,
        )
        s = self.settings
        declared = wiring(s)
        ended = declared.one(Delivery.CORE)
        self._ended_sub = await ctx.nc.subscribe(ended.subject, cb=handler_of(self, ended.handler))
        (self._jobs,) = durable_consumers(ctx.js, declared, self, source=self.name).values()
        await self.serve_metrics(
            ctx, host=s.metrics_host, port=s.metrics_port, refresh=self._read_jobs_pending
        )
        self.stats.jobs = self._jobs.stats
        self.spawn(self._jobs.run(self.stopping), name="jobs")

    async def _read_jobs_pending(self) -> None:
        """Before each scrape: the jobs of this class not yet delivered, from JetStream."""
        self.stats.jobs_pending = None
        if self._js is None:
            return
        # no consumer yet, NATS away: the gauge is left out
        with contextlib.suppress(NatsError, TimeoutError):
            info = await asyncio.wait_for(
                self._js.consumer_info(STREAM, self.settings.durable), CONSUMER_INFO_TIMEOUT_S
            )
            self.stats.jobs_pending = info.num_pending or 0

    async def on_stop(self) -> None:
        if self._ended_sub is not None:
            with contextlib.suppress(NatsError):  # stopping: it ends with the connection
                await self._ended_sub.unsubscribe()

    async def _on_search_completed(self, msg: Msg) -> None:
        """Remember the ended search; stop its trial if one runs here."""
        try:
            search_id = events_pb2.Event.FromString(msg.data).search_completed.search_id
        except Exception:  # not ours to judge: the searcher's events are checked where consumed
            return
        if not search_id:
            return
        self._ended[search_id] = None
        while len(self._ended) > ENDED_SEARCHES:
            self._ended.popitem(last=False)
        if search_id == self._current_search and not self._search_ended.is_set():
            trial = self.stats.current_trial
            self.log.info("search ended; stopping its trial", search=search_id, trial=trial)
            self._search_ended.set()

    # --- one job -----------------------------------------------------------------------------
    async def _take(self, msg: Msg) -> None:
        """Run one job to a stored, published result (the consumer acks after it)."""
        try:
            await self._run_job(msg)
        finally:
            self.stats.current_trial = ""
            self.stats.phase = ""

    async def _run_job(self, msg: Msg) -> None:
        job = decode_job(msg.data)
        records = self._require_records()
        stored = await records.completed(job.job_id)
        if stored is not None:
            self.stats.republished += 1
            self.log.info("job already finished; result republished", trial=job.trial_id, job=job.job_id)
            await self._publish_completed(job, stored)
            return
        self.stats.current_trial = job.trial_id
        deliveries = msg.metadata.num_delivered or 1

        async def progress(phase: events_pb2.TrialPhase, rate: float, done: int, total: int) -> None:
            await self._progress(job, phase=phase, rate=rate, done=done, total=total)

        await progress(events_pb2.TRIAL_PHASE_ACCEPTED, 0.0, 0, len(job.rates_rps))
        hardware = await self._hardware()
        runner = self._require_runner()
        self._current_search, self._search_ended = job.search_id, asyncio.Event()
        try:
            if job.search_id and job.search_id in self._ended:
                outcome = TrialOutcome(job=job, started_at=time.time(), finished_at=time.time())
                outcome.fail("cancelled", f"the search {job.search_id} had ended before the trial started")
            else:
                outcome = await runner.run(job, progress=progress, cancel=self._search_ended)
        finally:
            self._current_search = ""
        self.stats.trial_ended(outcome)
        if outcome.status != "ok":
            self.log.warning("trial failed", trial=job.trial_id, status=outcome.status, error=outcome.error)
        payload = completed(
            outcome, runner=self.instance, simulated=self.settings.simulated, hardware=hardware
        )
        await records.insert(
            row(outcome, payload, deliveries=deliveries), trial_id=job.trial_id, job_id=job.job_id
        )
        stored = await records.completed(job.job_id)  # a concurrent runner may have stored first
        await self._publish_completed(job, stored or payload)
        self.log.info(
            "trial reported",
            trial=job.trial_id,
            status=outcome.status,
            passed=payload.passed,
            goodput_rps=round(payload.goodput_rps, 3),
        )

    async def _hardware(self) -> Fingerprint:
        """This machine's fingerprint now; a change since the last trial is logged (the results
        carry their own fingerprint, so they are never compared across the change)."""
        now = await asyncio.to_thread(detect_hardware)
        was = self.stats.fingerprint
        if was is not None and now.id != was.id:
            self.log.warning(
                "hardware fingerprint changed; results are keyed by the new one",
                was=was.id,
                now=now.id,
                tier=now.tier,
            )
        self.stats.fingerprint = now
        return now

    async def _publish_completed(self, job: jobs_pb2.TrialJob, payload: events_pb2.TrialCompleted) -> None:
        """trial.completed about the job's endpoint (by name and by id)."""
        severity = common_pb2.SEVERITY_INFO if payload.status == 1 else common_pb2.SEVERITY_WARNING
        event = new_event(
            EventKind.TRIAL_COMPLETED,
            endpoint=job.endpoint,
            source=self.name,
            payload_message=payload,
            severity=severity,
            endpoint_uid=job.endpoint_uid,
        )
        event.id = completed_event_id(payload.job_id)
        await publish_event(self._require_js(), event)
        self.stats.event(EventKind.TRIAL_COMPLETED.value)

    async def _progress(
        self,
        job: jobs_pb2.TrialJob,
        *,
        phase: events_pb2.TrialPhase,
        rate: float,
        done: int,
        total: int,
    ) -> None:
        """Publish a trial.progress event; a failure is logged (progress is news, not a result)."""
        self.stats.phase = events_pb2.TrialPhase.Name(phase)
        payload = events_pb2.TrialProgress(
            search_id=job.search_id,
            trial_id=job.trial_id,
            job_id=job.job_id,
            phase=phase,
            rate_rps=rate,
            rates_done=done,
            rates_total=total,
            runner=self.instance,
        )
        try:
            await publish_event(
                self._require_js(),
                new_event(
                    EventKind.TRIAL_PROGRESS,
                    endpoint=job.endpoint,
                    source=self.name,
                    payload_message=payload,
                    endpoint_uid=job.endpoint_uid,
                ),
            )
            self.stats.event(EventKind.TRIAL_PROGRESS.value)
        except Exception as err:
            self.stats.failure("progress_unpublished")
            self.log.warning("trial.progress not published", error=str(err))

    def _require_js(self) -> JetStreamContext:
        assert self._js is not None, "runner not started"
        return self._js

    def _require_records(self) -> TrialRecords:
        assert self._records is not None, "runner not started"
        return self._records

    def _require_runner(self) -> TrialRunner:
        assert self._runner is not None, "runner not started"
        return self._runner
