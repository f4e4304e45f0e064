"""Alert URLs chosen by an endpoint's owner cannot reach inside the platform (hole 6 of the security
issue): the cloud's metadata service, loopback, private and link-local addresses are refused when
a route is created and again when an alert is sent (after DNS), unless an operator allowed the
network; the operator's own receivers stay trusted."""

from __future__ import annotations

import time

import pytest

from evertune.apps.harness.waiting import eventually
from evertune.deployer import validation
from evertune.errors import InvalidArgument, SettingsError
from evertune.infra.nats_server import free_port
from evertune.infra.outbound import OutboundPolicy, parse_networks
from evertune.infra.settings import SharedSettings, load_settings
from evertune.sla_monitor.alerts import AlertKey, Breach, Incident
from evertune.sla_monitor.burn_rate import BurnRateRule, RuleEvaluation, WindowBurn
from evertune.sla_monitor.guarded_resolver import GuardedResolver
from evertune.sla_monitor.payloads import ReceiverConfig, RetryPolicy
from evertune.v1 import endpoint_pb2
from tests.sla_monitor.test_receivers import Receiver, _running

PRODUCTION = OutboundPolicy()  #: nothing internal allowed (a gateway joined to a NATS of its own)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://127.0.0.1:4222/",
        "http://localhost:50051/",
        "http://api.localhost/",
        "http://10.0.0.7/hook",
        "http://192.168.1.1/",
        "http://[::1]/",
        "http://[::ffff:169.254.169.254]/",
        "http://0.0.0.0/",
    ],
)
def test_internal_targets_are_refused(url: str) -> None:
    assert "EVERTUNE_ALERT_ALLOWED_NETWORKS" in PRODUCTION.refusal(url)


def test_public_targets_and_allowed_networks_pass() -> None:
    assert PRODUCTION.refusal("https://hooks.slack.com/services/x") == ""
    assert PRODUCTION.refusal("https://8.8.8.8/hook") == ""
    allowed = OutboundPolicy(allowed=parse_networks("10.0.0.0/8, ::1/128"))
    assert allowed.refusal("http://10.0.0.7/hook") == "" and allowed.refusal("http://[::1]/") == ""
    assert allowed.refusal("http://169.254.169.254/") != ""
    embedded = SharedSettings().outbound_policy()  # no NATS URL: the single-machine setup
    assert embedded.refusal("http://127.0.0.1:9/alerts") == "" and embedded.refusal("http://10.0.0.7/") != ""
    joined = SharedSettings(nats_url="nats://nats-1:4222").outbound_policy()
    assert joined.refusal("http://127.0.0.1:9/alerts") != ""


def test_a_bad_network_setting_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVERTUNE_ALERT_ALLOWED_NETWORKS", "10.0.0.0/8,intranet")
    with pytest.raises(SettingsError, match=r"EVERTUNE_ALERT_ALLOWED_NETWORKS.*'intranet' is not a network"):
        load_settings(SharedSettings)
    with pytest.raises(InvalidArgument):
        parse_networks("300.1.2.3/8")


def test_the_deployer_refuses_a_route_to_the_metadata_service() -> None:
    spec = endpoint_pb2.EndpointSpec(
        name="ep",
        tenant="t",
        model="/m",
        slo=endpoint_pb2.Slo(ttft_p99_ms=500),
        hardware_pool=endpoint_pb2.HardwarePool(hardware_class="cpu"),
    )
    spec.alert_routes.add(
        name="ok", kind=endpoint_pb2.ALERT_ROUTE_KIND_WEBHOOK, url="https://hooks.example/x"
    )
    spec.alert_routes.add(
        name="imds", kind=endpoint_pb2.ALERT_ROUTE_KIND_WEBHOOK, url="http://169.254.169.254/"
    )
    domain = validation.endpoint_def(spec)
    with pytest.raises(InvalidArgument, match=r"^spec.alert_routes\[1\].url: 169.254.169.254 is an internal"):
        validation.check_alert_targets(domain, PRODUCTION)
    validation.check_alert_targets(domain, OutboundPolicy(allowed=parse_networks("169.254.0.0/16")))


async def test_a_name_resolving_inside_is_refused_when_sent() -> None:
    resolver = GuardedResolver(PRODUCTION)
    try:
        with pytest.raises(OSError, match="resolves only to internal addresses"):
            await resolver.resolve("localhost", 80)
    finally:
        await resolver.close()


def _breach() -> Breach:
    rule = BurnRateRule(
        name="page-1h", long_window_s=3600, short_window_s=300, burn_rate=6.0, severity="page"
    )
    now = time.time()
    evaluation = RuleEvaluation(
        rule=rule,
        now=now,
        long=WindowBurn(window_s=3600, requests=200, good=100, burn_rate=8.0),
        short=WindowBurn(window_s=300, requests=20, good=5, burn_rate=9.0),
        firing=True,
    )
    incident = Incident(breach_id="ab" * 16, opened_at=now, since=now - 300)
    return Breach(
        key=AlertKey(endpoint="voice", deployment="", rule=rule.name),
        incident=incident,
        evaluation=evaluation,
    )


async def test_an_endpoints_receiver_inside_gets_nothing_the_operators_does() -> None:
    from evertune.sla_monitor.receivers import AlertDispatcher

    owners, operators = Receiver(free_port()), Receiver(free_port())
    operator_config = ReceiverConfig(kind="webhook", url=operators.url, name="oncall")
    retry = RetryPolicy(base_s=0.05, cap_s=0.2, max_age_s=60)
    dispatcher = AlertDispatcher([operator_config], policy=retry, timeout_s=2, outbound=PRODUCTION)
    owner_config = ReceiverConfig(kind="webhook", url=owners.url, name="owner-hook")
    async with _running(dispatcher, owners, operators):
        dispatcher.enqueue(_breach())  # the operator's receivers
        dispatcher.enqueue(_breach(), [owner_config])  # an endpoint's own route
        await eventually(
            lambda: len(operators.bodies) == 1 and dispatcher.details()["owner-hook"]["dropped"] == 1
        )
    assert owners.hits == 0 and dispatcher.details()["owner-hook"]["rejected"] == 1
