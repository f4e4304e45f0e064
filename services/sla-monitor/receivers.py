"""Alert integrations, async shell: one bounded queue and one delivery task per receiver.

The monitor only calls `AlertDispatcher.enqueue` / `enqueue_event` (synchronous, never waits): the
body is built there (pure, `payloads.py`) and appended to the queue of every receiver whose
`min_severity` the incident meets and whose `event_kinds` take it. The receivers of an alert are
the settings' (`defaults`) unless the caller passes an endpoint's own; a queue and its delivery
task are made the first time a receiver is used. A "log" receiver writes a log line at once.
Each receiver's task POSTs its queue in order with aiohttp; 429, 5xx and
connection errors are retried with capped, jittered exponential backoff (`RetryPolicy.backoff`,
from `evertune.infra.retry`); other answers (400, ...)
drop the alert (counted); an alert older than `max_age_s` is dropped; a full queue drops its oldest.
Tasks wait on their queue or the service's stop event; nothing polls.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import structlog

from evertune.infra.outbound import OutboundPolicy
from evertune.infra.retry import rest
from evertune.sla_monitor.alerts import Decision
from evertune.sla_monitor.guarded_resolver import GuardedResolver
from evertune.sla_monitor.payloads import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    AlertFacts,
    AlertSeverity,
    ReceiverConfig,
    RetryPolicy,
    alert_facts,
    payload_for,
    signature,
)


class Spawn(Protocol):
    """A service's `spawn`: runs a coroutine as a named loop for the life of the service."""

    def __call__(self, coro: Coroutine[Any, Any, None], *, name: str) -> None: ...


@dataclass
class PendingAlert:
    """One body waiting for delivery to one receiver."""

    breach_id: str  #: incident id (for logs)
    status: str  #: "firing" or "resolved" (for logs)
    body: dict[str, Any]  #: JSON body POSTed
    created_at: float  #: when it was enqueued, on the dispatcher's clock
    attempts: int = 0  #: POSTs tried so far


@dataclass
class ReceiverStats:
    """Counters of one receiver, shown in the service status."""

    enqueued: int = 0  #: alerts queued for it
    delivered: int = 0  #: alerts it answered 2xx to
    retried: int = 0  #: attempts that failed with a retryable error (429, 5xx, connection)
    dropped: int = 0  #: alerts given up on (rejected + expired + overflow)
    rejected: int = 0  #: of which answered with a non-retryable code (400, 404, ...)
    expired: int = 0  #: of which older than max_age_s
    overflow: int = 0  #: of which pushed out of a full queue (the oldest goes)

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class ReceiverQueue:
    """A receiver's pending alerts (oldest first) and its counters."""

    config: ReceiverConfig  #: the receiver
    maxsize: int  #: pending alerts kept at most
    pending: deque[PendingAlert] = field(default_factory=deque)  #: oldest first
    stats: ReceiverStats = field(default_factory=ReceiverStats)  #: counters
    wake: asyncio.Event = field(default_factory=asyncio.Event)  #: set when something is queued


class AlertDispatcher:
    """Fans decisions out to the receivers and runs one delivery task per receiver."""

    def __init__(
        self,
        receivers: list[ReceiverConfig],
        *,
        policy: RetryPolicy,
        timeout_s: float = 5.0,
        queue_size: int = 1000,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
        log: structlog.stdlib.BoundLogger | None = None,
        signing_secret: bytes = b"",
        outbound: OutboundPolicy | None = None,
    ) -> None:
        """`signing_secret`: when set, every POST carries `TIMESTAMP_HEADER` and `SIGNATURE_HEADER`
        (`payloads.signature`), so a receiver can tell evertune's alerts from forged ones.
        `outbound`: which internal networks an endpoint's own receivers may be on (None: any
        address, for tests of delivery alone); an alert to a refused one is dropped (`rejected`),
        never sent. The operator's receivers (`receivers`, from the settings) are trusted."""
        self.signing_secret = signing_secret
        self.outbound = outbound
        self.policy = policy
        self.timeout_s = timeout_s
        self.clock = clock
        self.rand = rand
        self.log = log or structlog.stdlib.get_logger("evertune.sla-monitor.receivers")
        self.queue_size = max(1, queue_size)
        self.defaults = list(receivers)  #: receivers of endpoints that have none of their own
        self.queues: list[ReceiverQueue] = []  #: every receiver used so far, in order of first use
        self.logged: dict[str, int] = {}  #: alerts written by each "log" receiver
        self._by_config: dict[ReceiverConfig, ReceiverQueue] = {}
        self._session: aiohttp.ClientSession | None = None  #: for the operator's receivers
        self._guarded: aiohttp.ClientSession | None = None  #: for endpoints' receivers (`outbound`)
        self._spawn: Spawn | None = None
        self._stopping: asyncio.Event | None = None
        for r in self.defaults:
            if r.kind != "log":
                self._queue(r)

    def _queue(self, config: ReceiverConfig) -> ReceiverQueue:
        """The queue of `config`, made (and its delivery task started) on first use."""
        q = self._by_config.get(config)
        if q is None:
            q = self._by_config[config] = ReceiverQueue(config=config, maxsize=self.queue_size)
            self.queues.append(q)
            if self._spawn is not None and self._stopping is not None:
                self._spawn(self._deliver_loop(q, self._stopping), name=f"alerts:{config.name}")
        return q

    # --- monitor side (synchronous, never blocks) --------------------------------------------
    def enqueue(self, decision: Decision, receivers: Sequence[ReceiverConfig] | None = None) -> int:
        """Queue `decision` for every receiver (default: `defaults`) that takes its severity;
        returns how many."""
        return self.enqueue_facts(alert_facts(decision), receivers)

    def enqueue_facts(self, facts: AlertFacts, receivers: Sequence[ReceiverConfig] | None = None) -> int:
        kind = "sla.breach" if facts.status == "firing" else "sla.resolved"
        return self._fan_out(
            kind,
            facts.severity,
            ident=facts.breach_id,
            status=facts.status,
            body=lambda config: payload_for(config, facts),
            receivers=receivers,
            summary=facts.summary,
        )

    def enqueue_event(
        self,
        kind: str,
        *,
        severity: AlertSeverity,
        ident: str,
        body: dict[str, Any],
        summary: str,
        receivers: Sequence[ReceiverConfig] | None = None,
    ) -> int:
        """Queue a plain-JSON alert of another kind (drift.detected) for the receivers taking it
        (webhook and log ones; see `ReceiverConfig.takes`); returns how many."""
        return self._fan_out(
            kind,
            severity,
            ident=ident,
            status=kind,
            body=lambda _: body,
            receivers=receivers,
            summary=summary,
        )

    def _fan_out(
        self,
        kind: str,
        severity: AlertSeverity,
        *,
        ident: str,
        status: str,
        body: Callable[[ReceiverConfig], dict[str, Any]],
        receivers: Sequence[ReceiverConfig] | None,
        summary: str,
    ) -> int:
        now = self.clock()
        queued = 0
        for config in self.defaults if receivers is None else receivers:
            if not config.accepts(severity) or not config.takes(kind):
                continue
            queued += 1
            if config.kind == "log":
                self.logged[config.name] = self.logged.get(config.name, 0) + 1
                self.log.warning(
                    "alert", receiver=config.name, kind=kind, id=ident, severity=severity, summary=summary
                )
                continue
            q = self._queue(config)
            if len(q.pending) >= q.maxsize:
                old = q.pending.popleft()
                q.stats.dropped += 1
                q.stats.overflow += 1
                self.log.warning(
                    "alert queue full; dropped the oldest", receiver=q.config.name, breach_id=old.breach_id
                )
            q.pending.append(PendingAlert(ident, status, body(config), created_at=now))
            q.stats.enqueued += 1
            q.wake.set()
        return queued

    # --- delivery side -----------------------------------------------------------------------
    def start(self, spawn: Spawn, stopping: asyncio.Event) -> None:
        """Spawn one delivery task per receiver (and later per receiver first used); they return
        once `stopping` is set."""
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        self._session = aiohttp.ClientSession(timeout=timeout)
        if self.outbound is not None:  # endpoints' receivers: every address a name resolves to checked
            connector = aiohttp.TCPConnector(resolver=GuardedResolver(self.outbound))
            self._guarded = aiohttp.ClientSession(connector=connector, timeout=timeout)
        self._spawn, self._stopping = spawn, stopping
        for q in self.queues:
            spawn(self._deliver_loop(q, stopping), name=f"alerts:{q.config.name}")

    async def close(self) -> None:
        """Close the HTTP session (after the delivery tasks have ended)."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._guarded is not None:
            await self._guarded.close()
            self._guarded = None

    async def _deliver_loop(self, q: ReceiverQueue, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            if not q.pending:
                q.wake.clear()
                await _wait_either(q.wake, stopping)
                continue
            alert = q.pending[0]
            if self.policy.expired(alert.created_at, self.clock()):
                self._drop(q, alert, "expired")
                continue
            guarded = self.outbound is not None and q.config not in self.defaults
            refusal = self.outbound.refusal(q.config.target) if self.outbound and guarded else ""
            if refusal:
                self._drop(q, alert, "rejected", error=refusal)
                continue
            status, error = await self._post(q.config.target, alert.body, guarded=guarded)
            alert.attempts += 1
            outcome = self.policy.outcome(status)
            if outcome == "delivered":
                _remove(q, alert)
                q.stats.delivered += 1
                self.log.info(
                    "alert delivered",
                    receiver=q.config.name,
                    breach_id=alert.breach_id,
                    alert_status=alert.status,
                    attempts=alert.attempts,
                )
            elif outcome == "drop":
                self._drop(q, alert, "rejected", http_status=status, error=error)
            elif alert not in q.pending:  # pushed out of a full queue while in flight (counted there)
                continue
            else:
                q.stats.retried += 1
                delay = self.policy.backoff.delay(alert.attempts, self.rand())
                self.log.warning(
                    "alert delivery failed; will retry",
                    receiver=q.config.name,
                    breach_id=alert.breach_id,
                    http_status=status,
                    error=error,
                    attempt=alert.attempts,
                    retry_in_s=round(delay, 3),
                )
                await rest(stopping, delay)

    def _drop(self, q: ReceiverQueue, alert: PendingAlert, why: str, **fields: Any) -> None:
        if not _remove(q, alert):
            return  # pushed out of a full queue while in flight: counted as overflow already
        q.stats.dropped += 1
        if why == "expired":
            q.stats.expired += 1
        else:
            q.stats.rejected += 1
        self.log.warning(
            f"alert dropped ({why})",
            receiver=q.config.name,
            breach_id=alert.breach_id,
            alert_status=alert.status,
            attempts=alert.attempts,
            **fields,
        )

    async def _post(self, url: str, body: dict[str, Any], *, guarded: bool) -> tuple[int | None, str]:
        """POST `body` (signed when a secret is set; a redirect is an answer, never followed: it
        could point anywhere); (status, "") on a 2xx, (status, text) on another answer, (None,
        error) when none came."""
        session = self._guarded if guarded else self._session
        assert session is not None, "AlertDispatcher.start was not called"
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.signing_secret:
            now = int(time.time())
            headers[TIMESTAMP_HEADER] = str(now)
            headers[SIGNATURE_HEADER] = signature(self.signing_secret, timestamp=now, body=data)
        try:
            async with session.post(url, data=data, headers=headers, allow_redirects=False) as resp:
                text = await resp.text()
                return resp.status, "" if resp.status < 300 else " ".join(text.split())[:200]
        except (aiohttp.ClientError, TimeoutError) as err:
            return None, str(err) or type(err).__name__

    # --- status ------------------------------------------------------------------------------
    def details(self) -> dict[str, Any]:
        """Per receiver: kind, pending and the counters ("log" receivers: how many they wrote)."""
        figures: dict[str, Any] = {
            q.config.name: {"kind": q.config.kind, "pending": len(q.pending), **q.stats.as_dict()}
            for q in self.queues
        }
        for name, count in self.logged.items():
            figures[name] = {"kind": "log", "pending": 0, "enqueued": count, "delivered": count}
        return figures


def _remove(q: ReceiverQueue, alert: PendingAlert) -> bool:
    """Take `alert` off the head of `q`; False when it is no longer there."""
    if q.pending and q.pending[0] is alert:
        q.pending.popleft()
        return True
    return False


async def _wait_either(first: asyncio.Event, second: asyncio.Event) -> None:
    """Return when either event is set."""
    waits = [asyncio.ensure_future(first.wait()), asyncio.ensure_future(second.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
