"""Real trials over the bus: publish `TrialJob`s, collect their `trial.completed`.

`TrialBus.execute(orders, template=, slo=, gate_rps=)` is the searcher's trial executor:

1. registers a waiter per job id, then publishes each job on `evertune.jobs.<hardware>` (JOBS work
   queue) with Nats-Msg-Id = job id, so a repeated publish is stored once;
2. `on_completed` (the handler of the durable consumer `searcher-trials` on EVENTS, filtered to
   `trial.completed`) hands each report to its waiter; a report nobody waits for (another
   searcher's, or from before a restart) is acked and dropped;
3. at a trial's deadline (the job's, plus a grace) without a report the `trials` table is asked
   (a report consumed by another searcher instance is still stored there); without a row either,
   the trial counts as failed: "no runner answered".

Cancelling `execute` deletes its jobs no runner has taken yet from the work queue; a trial already
running is stopped by its runner when the search's `search.completed` arrives (the runner reports it
cancelled, and the report is dropped here).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Sequence
from datetime import UTC, datetime

from google.protobuf.message import DecodeError
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from evertune.infra.bus import PoisonMessage, publish
from evertune.infra.logging import get_logger
from evertune.infra.store import Store
from evertune.searcher.jobs import JobTemplate, deadline_of, missing_result, trial_job, trial_result
from evertune.searcher.orchestrate import TrialOrder, TrialResult
from evertune.v1 import endpoint_pb2, events_pb2

log = get_logger("evertune.searcher.trial_bus")

#: Stream of the work queues.
JOBS_STREAM = "JOBS"
#: Seconds after a job's deadline the searcher still waits for its report.
GRACE_S = 30.0


class TrialBus:
    """Publishes jobs and waits for their reports (see the module doc)."""

    def __init__(self, js: JetStreamContext, store: Store | None, *, grace_s: float = GRACE_S) -> None:
        self._js = js
        self._store = store
        self._grace_s = grace_s
        self._waiting: dict[str, asyncio.Future[events_pb2.TrialCompleted]] = {}
        self.published = 0  #: jobs published
        self.reports = 0  #: reports handed to a waiter
        self.missing = 0  #: jobs without a report by their deadline (nor one stored)

    async def on_completed(self, msg: Msg) -> None:
        """Handler of the trial.completed consumer."""
        try:
            event = events_pb2.Event.FromString(msg.data)
        except DecodeError as err:
            raise PoisonMessage(f"undecodable event: {err}") from None
        done = event.trial_completed
        waiter = self._waiting.get(done.job_id)
        if waiter is not None and not waiter.done():
            waiter.set_result(done)
            self.reports += 1

    async def execute(
        self,
        orders: Sequence[TrialOrder],
        *,
        template: JobTemplate,
        slo: endpoint_pb2.Slo,
        gate_rps: float,
    ) -> list[TrialResult]:
        """Run a batch of trials on the runners (see the module doc)."""
        loop = asyncio.get_running_loop()
        now = datetime.now(UTC)
        waiters = {o.job_id: loop.create_future() for o in orders}
        self._waiting.update(waiters)
        sequences: dict[str, int] = {}
        try:
            for order in orders:
                job = trial_job(order, template, now=now)
                ack = await publish(self._js, f"evertune.jobs.{order.hardware_class}", job, msg_id=job.job_id)
                sequences[order.job_id] = ack.seq
                self.published += 1
            results = await asyncio.gather(
                *(
                    self._wait(order, waiters[order.job_id], deadline_of(order, template, now=now))
                    for order in orders
                )
            )
        except asyncio.CancelledError:
            await self._withdraw(sequences)
            raise
        finally:
            for job_id in waiters:
                self._waiting.pop(job_id, None)
        self.missing += sum(1 for done in results if done is None)
        return [
            trial_result(done, order=order, slo=slo, gate_rps=gate_rps)
            if done is not None
            else missing_result(
                order,
                f"no trial.completed for job {order.job_id} by its deadline: "
                f"is a runner for {order.hardware_class!r} running?",
            )
            for order, done in zip(orders, results, strict=True)
        ]

    @property
    def waiting(self) -> int:
        """Published jobs whose report is awaited now."""
        return len(self._waiting)

    async def _wait(
        self, order: TrialOrder, waiter: asyncio.Future[events_pb2.TrialCompleted], deadline: datetime
    ) -> events_pb2.TrialCompleted | None:
        timeout = (deadline - datetime.now(UTC)).total_seconds() + self._grace_s
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout=max(timeout, 0.0))
        except TimeoutError:
            return await self._stored(order.job_id)

    async def _stored(self, job_id: str) -> events_pb2.TrialCompleted | None:
        """The report of a job from the `trials` table, if a runner stored one."""
        if self._store is None:
            return None
        try:
            rows = await self._store.query(
                "SELECT completed_pb FROM trials WHERE job_id = {j:String} ORDER BY finished_at LIMIT 1",
                {"j": job_id},
            )
        except Exception as err:  # the table may not exist where no runner ever ran
            log.warning("trials table not readable", error=str(err))
            return None
        if not rows:
            return None
        try:
            return events_pb2.TrialCompleted.FromString(base64.b64decode(rows[0][0]))
        except (DecodeError, ValueError, binascii.Error):
            return None

    async def _withdraw(self, sequences: dict[str, int]) -> None:
        """Delete jobs still waiting in the work queue (those taken are gone already)."""
        for job_id, seq in sequences.items():
            try:
                deleted = await self._js.delete_msg(JOBS_STREAM, seq)
            except NotFoundError:
                continue  # taken by a runner already
            except NatsError as err:  # (the bus away): the job stays queued and a runner will run it
                log.warning("job not withdrawn", job=job_id, error=str(err) or repr(err))
                continue
            if deleted:
                log.info("job withdrawn", job=job_id)
