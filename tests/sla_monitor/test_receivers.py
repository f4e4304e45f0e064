"""Alert integrations: pure payloads and retry policy, then delivery against a local aiohttp receiver."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from aiohttp import web

from evertune.apps.harness.waiting import eventually
from evertune.errors import SettingsError
from evertune.infra.nats_server import free_port
from evertune.infra.settings import load_settings
from evertune.sla_monitor import SlaMonitorService, SlaMonitorSettings
from evertune.sla_monitor.alerts import AlertKey, Breach, Incident, Resolved
from evertune.sla_monitor.burn_rate import BurnRateRule, RuleEvaluation, WindowBurn
from evertune.sla_monitor.payloads import (
    ReceiverConfig,
    RetryPolicy,
    alert_facts,
    alertmanager_payload,
    pagerduty_payload,
    signature,
    webhook_payload,
)
from evertune.sla_monitor.receivers import AlertDispatcher
from evertune.sla_monitor.window import Observation

RULE = BurnRateRule(name="page-1h", long_window_s=3600, short_window_s=300, burn_rate=6.0, severity="page")
TICKET = BurnRateRule(
    name="ticket-3d", long_window_s=259200, short_window_s=21600, burn_rate=1.0, severity="ticket"
)
T0 = 1_800_000_000.0


def _evaluation(rule: BurnRateRule = RULE, *, now: float = T0, firing: bool = True) -> RuleEvaluation:
    return RuleEvaluation(
        rule=rule,
        now=now,
        long=WindowBurn(
            window_s=rule.long_window_s, requests=200, good=100, burn_rate=5.0 if firing else 0.5
        ),
        short=WindowBurn(window_s=rule.short_window_s, requests=20, good=5, burn_rate=7.5),
        firing=firing,
    )


def _breach(rule: BurnRateRule = RULE, *, deployment: str = "", breach_id: str = "ab" * 16) -> Breach:
    incident = Incident(breach_id=breach_id, opened_at=T0, since=T0 - rule.short_window_s)
    key = AlertKey(endpoint="voice", deployment=deployment, rule=rule.name)
    return Breach(key=key, incident=incident, evaluation=_evaluation(rule))


def _resolved(breach: Breach) -> Resolved:
    ev = _evaluation(breach.evaluation.rule, now=T0 + 900, firing=False)
    return Resolved(key=breach.key, incident=breach.incident, resolved_at=T0 + 900, evaluation=ev)


# --- pure ----------------------------------------------------------------------------------------
def test_alertmanager_payload_firing_and_resolved() -> None:
    breach = _breach(deployment="dep-b")
    body = alertmanager_payload(alert_facts(breach), receiver="am", external_url="http://evertune")
    assert body["version"] == "4" and body["status"] == "firing" and body["receiver"] == "am"
    assert body["groupLabels"] == {"alertname": "SlaBurnRate", "endpoint": "voice"}
    assert body["groupKey"] == '{}:{alertname="SlaBurnRate", endpoint="voice"}'
    assert body["externalURL"] == "http://evertune"
    [alert] = body["alerts"]
    assert alert["labels"] == {
        "alertname": "SlaBurnRate",
        "endpoint": "voice",
        "deployment": "dep-b",
        "severity": "critical",
        "rule": "page-1h",
    }
    assert body["commonLabels"] == alert["labels"] and body["commonAnnotations"] == alert["annotations"]
    assert "voice/dep-b" in alert["annotations"]["summary"] and "5.0x > 6x" in alert["annotations"]["summary"]
    assert "200 requests" in alert["annotations"]["description"]
    assert alert["startsAt"] == "2027-01-15T07:55:00.000Z" and alert["endsAt"] == "0001-01-01T00:00:00Z"
    assert alert["fingerprint"] == "ab" * 8

    done = alertmanager_payload(alert_facts(_resolved(breach)), receiver="am")
    assert done["status"] == "resolved" and done["alerts"][0]["status"] == "resolved"
    assert done["alerts"][0]["startsAt"] == alert["startsAt"]
    assert done["alerts"][0]["endsAt"] == "2027-01-15T08:15:00.000Z"
    assert done["alerts"][0]["fingerprint"] == alert["fingerprint"] and done["groupKey"] == body["groupKey"]
    json.dumps(done)


def test_pagerduty_trigger_and_resolve_share_the_dedup_key() -> None:
    breach = _breach(TICKET)
    trigger = pagerduty_payload(alert_facts(breach), routing_key="rk")
    assert trigger["routing_key"] == "rk" and trigger["event_action"] == "trigger"
    assert trigger["dedup_key"] == breach.incident.breach_id
    p = trigger["payload"]
    assert (
        p["severity"] == "warning" and p["source"] == "voice" and p["timestamp"] == "2027-01-15T08:00:00.000Z"
    )
    assert p["summary"].startswith("SLO burn on voice") and p["custom_details"]["rule"] == "ticket-3d"
    assert p["custom_details"]["requests"] == 200 and p["custom_details"]["attainment"] == 0.5
    resolve = pagerduty_payload(alert_facts(_resolved(breach)), routing_key="rk")
    assert resolve == {"routing_key": "rk", "event_action": "resolve", "dedup_key": breach.incident.breach_id}


def test_webhook_payload_is_the_decision() -> None:
    body = webhook_payload(alert_facts(_breach()))
    assert body["kind"] == "sla.breach" and body["breach_id"] == "ab" * 16 and body["severity"] == "critical"
    assert body["endpoint"] == "voice" and body["deployment"] == "" and body["details"]["burn_rate"] == 5.0
    resolved = webhook_payload(alert_facts(_resolved(_breach())))
    assert resolved["kind"] == "sla.resolved" and resolved["details"]["duration_s"] == 1200
    json.loads(json.dumps(resolved))


def test_retry_policy() -> None:
    policy = RetryPolicy(base_s=1.0, cap_s=10.0, max_age_s=60)
    assert [policy.outcome(s) for s in (200, 202, None, 429, 500, 503, 400, 401, 404, 301)] == [
        "delivered",
        "delivered",
        "retry",
        "retry",
        "retry",
        "retry",
        "drop",
        "drop",
        "drop",
        "drop",
    ]
    backoff = policy.backoff  # the settings' base and cap, floored at base/10
    assert [backoff.delay(n, 0.999999) for n in (1, 2, 3, 4, 5, 50, 5000)] == pytest.approx(
        [1, 2, 4, 8, 10, 10, 10], rel=1e-5
    )
    assert backoff.delay(3, 0.0) == 0.1 and backoff.delay(3, 0.5) == 2.0  # jitter, floored at base/10
    assert not policy.expired(100, 160) and policy.expired(100, 160.5)


def test_receivers_setting_is_validated() -> None:
    ok = load_settings(
        SlaMonitorSettings,
        receivers=[
            {"kind": "webhook", "url": "http://127.0.0.1:1/hook"},
            {"kind": "pagerduty", "routing_key": "rk", "min_severity": "critical"},
        ],
    )
    assert [r.name for r in ok.receivers] == ["webhook-0", "pagerduty-1"]
    assert ok.receivers[1].target == "https://events.pagerduty.com/v2/enqueue"
    assert ok.receivers[1].accepts("critical") and not ok.receivers[1].accepts("warning")
    for bad in (
        [{"kind": "pagerduty"}],
        [{"kind": "webhook", "url": "ftp://x"}],
        [{"kind": "slack", "url": "http://x"}],
        [{"kind": "webhook", "url": "http://x", "min_severity": "loud"}],
    ):
        with pytest.raises(SettingsError, match=r"(?i)receivers") as err:
            load_settings(SlaMonitorSettings, receivers=bad)
        assert "\n" not in str(err.value)


# --- delivery against a local receiver -------------------------------------------------------------
class Receiver:
    """A local HTTP receiver answering with a scripted list of codes, then 200 (a 3xx redirects to
    `/elsewhere`, which counts what reaches it)."""

    def __init__(self, port: int, codes: list[int] | None = None, delay_s: float = 0.0) -> None:
        self.port = port
        self.codes = list(codes or [])
        self.delay_s = delay_s
        self.bodies: list[dict[str, Any]] = []  #: bodies answered 2xx
        self.raw: list[tuple[bytes, dict[str, str]]] = []  #: every request's body and headers
        self.hits = 0  #: requests seen
        self.redirected = 0  #: requests that followed a redirect to /elsewhere
        self.got = asyncio.Event()
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _handle(self, request: web.Request) -> web.Response:
        self.hits += 1
        self.raw.append((await request.read(), dict(request.headers)))
        body = await request.json()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        code = self.codes.pop(0) if self.codes else 200
        if code < 300:
            self.bodies.append(body)
            self.got.set()
        if 300 <= code < 400:
            return web.Response(status=code, headers={"Location": "/elsewhere"})
        return web.Response(status=code, text=f"code {code}")

    async def _elsewhere(self, request: web.Request) -> web.Response:
        self.redirected += 1
        return web.Response(status=200)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        app.router.add_post("/elsewhere", self._elsewhere)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@contextlib.asynccontextmanager
async def _running(dispatcher: AlertDispatcher, *receivers: Receiver) -> AsyncIterator[asyncio.Event]:
    for r in receivers:
        await r.start()
    stopping = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    def spawn(coro: Coroutine[Any, Any, None], *, name: str) -> None:
        tasks.append(asyncio.create_task(coro, name=name))

    dispatcher.start(spawn, stopping)
    try:
        yield stopping
    finally:
        stopping.set()
        started = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*tasks), 2)
        # A backoff wait ends at once; a POST in flight is finished (the slowest test receiver
        # answers after 1 s), never retried.
        assert time.monotonic() - started < 1.5
        await dispatcher.close()
        for r in receivers:
            await r.stop()


def _dispatcher(
    url: str,
    *,
    kind: str = "webhook",
    clock: Callable[[], float] = time.monotonic,
    signing_secret: bytes = b"",
    **policy: float,
) -> AlertDispatcher:
    config = ReceiverConfig(kind=kind, url=url, routing_key="rk", name="r")  # type: ignore[arg-type]
    retry = RetryPolicy(**{"base_s": 0.05, "cap_s": 0.2, "max_age_s": 60, **policy})
    return AlertDispatcher([config], policy=retry, timeout_s=2, clock=clock, signing_secret=signing_secret)


async def test_delivers_breach_then_resolved_in_order() -> None:
    rx = Receiver(free_port())
    dispatcher = _dispatcher(rx.url, kind="pagerduty")
    async with _running(dispatcher, rx):
        breach = _breach()
        assert dispatcher.enqueue(breach) == 1
        dispatcher.enqueue(_resolved(breach))
        await eventually(lambda: len(rx.bodies) == 2)
    assert [b["event_action"] for b in rx.bodies] == ["trigger", "resolve"]
    assert rx.bodies[0]["dedup_key"] == rx.bodies[1]["dedup_key"] == breach.incident.breach_id
    stats = dispatcher.details()["r"]
    assert (
        stats["delivered"] == 2 and stats["retried"] == 0 and stats["dropped"] == 0 and stats["pending"] == 0
    )


@pytest.mark.parametrize("code", [500, 503, 429])
async def test_retryable_answer_is_retried_and_delivered_once(code: int) -> None:
    rx = Receiver(free_port(), codes=[code])
    dispatcher = _dispatcher(rx.url)
    async with _running(dispatcher, rx):
        dispatcher.enqueue(_breach())
        await eventually(lambda: dispatcher.details()["r"]["delivered"] == 1)
        await asyncio.sleep(0.2)
    assert rx.hits == 2 and len(rx.bodies) == 1
    assert dispatcher.details()["r"] | {"pending": 0} == dispatcher.details()["r"]
    assert dispatcher.details()["r"]["retried"] == 1


async def test_bad_request_is_not_retried_and_counted_dropped() -> None:
    rx = Receiver(free_port(), codes=[400])
    dispatcher = _dispatcher(rx.url)
    async with _running(dispatcher, rx):
        breach = _breach()
        dispatcher.enqueue(breach)
        await eventually(lambda: dispatcher.details()["r"]["dropped"] == 1)
        dispatcher.enqueue(_resolved(breach))  # the next one still goes
        await eventually(lambda: dispatcher.details()["r"]["delivered"] == 1)
    stats = dispatcher.details()["r"]
    assert rx.hits == 2 and stats["retried"] == 0 and stats["rejected"] == 1 and stats["pending"] == 0


async def test_alerts_are_signed_and_redirects_not_followed() -> None:
    rx = Receiver(free_port(), codes=[307])
    dispatcher = _dispatcher(rx.url, signing_secret=b"s3cret")
    async with _running(dispatcher, rx):
        dispatcher.enqueue(_breach())
        await eventually(lambda: dispatcher.details()["r"]["dropped"] == 1)
        dispatcher.enqueue(_breach(breach_id="cd" * 16))
        await eventually(lambda: dispatcher.details()["r"]["delivered"] == 1)
    assert rx.redirected == 0  # the 307 was an answer (dropped), not followed
    for body, headers in rx.raw:
        sent_at = int(headers["X-Evertune-Timestamp"])
        assert abs(sent_at - time.time()) < 60
        assert hmac.compare_digest(
            headers["X-Evertune-Signature"], signature(b"s3cret", timestamp=sent_at, body=body)
        )
        assert headers["X-Evertune-Signature"] != signature(b"other", timestamp=sent_at, body=body)


async def test_alerts_without_a_secret_go_unsigned() -> None:
    rx = Receiver(free_port())
    dispatcher = _dispatcher(rx.url)
    async with _running(dispatcher, rx):
        dispatcher.enqueue(_breach())
        await eventually(lambda: len(rx.bodies) == 1)
    assert "X-Evertune-Signature" not in rx.raw[0][1]


async def test_receiver_down_then_up_gets_the_alert() -> None:
    rx = Receiver(free_port())  # not started: the port is closed
    dispatcher = _dispatcher(rx.url)
    stopping = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    dispatcher.start(lambda coro, *, name: tasks.append(asyncio.create_task(coro, name=name)), stopping)
    try:
        dispatcher.enqueue(_breach())
        await eventually(lambda: dispatcher.details()["r"]["retried"] >= 2)
        assert not rx.bodies
        await rx.start()
        await asyncio.wait_for(rx.got.wait(), 5)
        assert len(rx.bodies) == 1 and rx.bodies[0]["breach_id"] == "ab" * 16
    finally:
        stopping.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 2)
        await dispatcher.close()
        await rx.stop()
    assert dispatcher.details()["r"]["delivered"] == 1


async def test_expired_alert_is_dropped() -> None:
    now = [0.0]
    rx = Receiver(free_port(), codes=[503] * 1000)
    dispatcher = _dispatcher(rx.url, clock=lambda: now[0], max_age_s=10)
    async with _running(dispatcher, rx):
        dispatcher.enqueue(_breach())
        await eventually(lambda: dispatcher.details()["r"]["retried"] >= 1)
        now[0] = 11.0  # past max age: the next try drops it instead
        await eventually(lambda: dispatcher.details()["r"]["expired"] == 1)
        hits = rx.hits
        await asyncio.sleep(0.3)
        assert rx.hits == hits  # no more tries
    stats = dispatcher.details()["r"]
    assert stats["dropped"] == 1 and stats["delivered"] == 0 and stats["pending"] == 0


async def test_slow_failing_receiver_does_not_block_enqueue_and_full_queue_drops_oldest() -> None:
    slow = Receiver(free_port(), codes=[500] * 1000, delay_s=1.0)
    fast = Receiver(free_port())
    configs = [
        ReceiverConfig(kind="webhook", url=slow.url, name="slow"),
        ReceiverConfig(kind="alertmanager", url=fast.url, name="fast"),
        ReceiverConfig(kind="webhook", url=fast.url, name="critical-only", min_severity="critical"),
    ]
    dispatcher = AlertDispatcher(
        configs, policy=RetryPolicy(base_s=0.05, cap_s=0.1), queue_size=5, timeout_s=5
    )
    async with _running(dispatcher, slow, fast):
        started = time.perf_counter()
        for i in range(20):
            dispatcher.enqueue(_breach(TICKET, breach_id=f"{i:032x}"))
        assert time.perf_counter() - started < 0.05  # enqueue never waits on a receiver
        await eventually(lambda: len(fast.bodies) >= 5)
        details = dispatcher.details()
        assert details["slow"]["pending"] == 5 and details["slow"]["overflow"] == 15
        assert details["slow"]["delivered"] == 0
        assert details["critical-only"]["enqueued"] == 0  # a ticket is only WARNING
    # the fast receiver kept up: it got the newest alert (the oldest may have been pushed out)
    assert fast.bodies[-1]["alerts"][0]["labels"]["rule"] == "ticket-3d"
    assert fast.bodies[-1]["alerts"][0]["fingerprint"] == f"{19:032x}"[:16]


def test_service_queues_each_decision_for_the_receivers_it_meets() -> None:
    settings = load_settings(
        SlaMonitorSettings,
        slot_s=1,
        sketch_history_s=60,
        resolve_hold_s=1,
        min_requests=10,
        rules=[BurnRateRule(name="page-fast", long_window_s=10, short_window_s=2, burn_rate=6.0)],
        receivers=[
            {"kind": "alertmanager", "url": "http://127.0.0.1:1/am", "name": "am"},
            {"kind": "webhook", "url": "http://127.0.0.1:1/hook", "min_severity": "critical"},
        ],
    )
    service = SlaMonitorService(settings)
    targets = service.slo_for("voice")
    for i in range(50):  # every request far too slow
        obs = Observation(
            "voice", "dep-a", time_s=T0 + i * 0.1, ttft_ms=5000.0, itl_p99_ms=10.0, failed=False
        )
        service.monitor.observe(obs, targets)
    [decision] = service.evaluate_and_queue(T0 + 5)
    assert isinstance(decision, Breach)
    receivers = service.details()["receivers"]
    assert receivers["am"]["pending"] == 1 and receivers["webhook-1"]["pending"] == 1
    assert service.alerts.queues[0].pending[0].body["status"] == "firing"
