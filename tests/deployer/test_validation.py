"""Wire -> domain validation of every EndpointService request (pure)."""

from __future__ import annotations

import pytest
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.timestamp_pb2 import Timestamp

from evertune.deployer import validation as v
from evertune.deployer.commands import CreateCommand, Page, UpdateCommand
from evertune.deployer.rollout_policy import RolloutOverrides
from evertune.errors import InvalidArgument
from evertune.v1 import common_pb2, endpoint_pb2
from evertune.v1 import endpoint_service_pb2 as pb
from tests.deployer.helpers import spec


def create(s: endpoint_pb2.EndpointSpec, request_id: str = "r-1") -> CreateCommand:
    return v.create_command(pb.CreateEndpointRequest(request_id=request_id, spec=s), caller_tenant="team-a")


def refused(message_start: str, call: object, *args: object, **kwargs: object) -> None:
    with pytest.raises(InvalidArgument) as err:
        call(*args, **kwargs)  # type: ignore[operator]
    assert str(err.value).startswith(message_start), str(err.value)
    assert "\n" not in str(err.value)


def test_create_fills_defaults_and_the_callers_tenant() -> None:
    command = create(spec("voice-eu"))
    s = command.spec
    assert s.tenant == "team-a" and s.search_policy == "auto"
    assert s.slo.attainment_target == 0.9 and s.correctness_agreement_threshold == 0.95
    assert s.hardware_pool.max_replicas == 1
    assert s.initial_engine.kind == "vllm" and s.initial_engine.model == "tiny-model"
    wire = v.endpoint_spec_proto(s)
    assert wire.search_policy == endpoint_pb2.SEARCH_POLICY_AUTO
    assert wire.initial_engine_config.model == "tiny-model"
    assert v.endpoint_def(wire) == s  # the stored form reads back to the same domain object


def test_an_unset_engine_config_is_vllm_defaults() -> None:
    s = spec("voice-eu")
    s.ClearField("initial_engine_config")
    engine = create(s).spec.initial_engine
    assert engine.kind == "vllm" and engine.max_num_seqs is None and engine.enforce_eager is None


def test_fingerprint_depends_on_the_spec_not_the_request_id() -> None:
    assert create(spec("a-1"), "x").fingerprint == create(spec("a-1"), "y").fingerprint
    assert create(spec("a-1")).fingerprint != create(spec("a-1", ttft_p99_ms=600)).fingerprint


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: setattr(s, "name", ""), "spec.name: required"),
        (lambda s: setattr(s, "name", "Voice"), "spec.name: 'Voice' must be"),
        (lambda s: setattr(s, "name", "a.b"), "spec.name:"),
        (lambda s: setattr(s, "name", "x" * 64), "spec.name:"),
        (lambda s: setattr(s, "tenant", "bad tenant"), "spec.tenant:"),
        (lambda s: setattr(s, "model", ""), "spec.model: required"),
        (lambda s: s.ClearField("slo"), "spec.slo: required"),
        (lambda s: setattr(s.slo, "ttft_p99_ms", 0), "spec.slo.ttft_p99_ms: required"),
        (lambda s: setattr(s.slo, "ttft_p50_ms", -1), "spec.slo.ttft_p50_ms:"),
        (lambda s: setattr(s.slo, "ttft_p50_ms", 900), "spec.slo.ttft_p50_ms: must not exceed"),
        (lambda s: setattr(s.slo, "attainment_target", 1.5), "spec.slo.attainment_target:"),
        (lambda s: setattr(s.slo, "itl_p99_ms", -3), "spec.slo.itl_p99_ms:"),
        (
            lambda s: setattr(s.hardware_pool, "hardware_class", ""),
            "spec.hardware_pool.hardware_class: required",
        ),
        (lambda s: setattr(s.hardware_pool, "hardware_class", "H 200"), "spec.hardware_pool.hardware_class:"),
        (lambda s: setattr(s, "search_policy", 9), "spec.search_policy: unknown"),
        (lambda s: setattr(s, "correctness_agreement_threshold", 2), "spec.correctness_agreement_threshold:"),
        (
            lambda s: setattr(s.initial_engine_config, "max_num_seqs", 0),
            "spec.initial_engine_config.max_num_seqs:",
        ),
        (lambda s: setattr(s.initial_engine_config, "engine", "tgi"), "spec.initial_engine_config.kind:"),
        (
            lambda s: setattr(s.initial_engine_config, "replicas", 3),
            "spec.initial_engine_config.replicas: 3 exceeds",
        ),
        (
            lambda s: s.alert_routes.add(name="", kind=1, url="http://x"),
            "spec.alert_routes[0].name: required",
        ),
        (lambda s: s.alert_routes.add(name="hook", kind=1, url="ftp://x"), "spec.alert_routes[0].url:"),
        (
            lambda s: s.alert_routes.add(name="log", kind=2, url="http://x"),
            "spec.alert_routes[0].url: must be empty",
        ),
        (lambda s: s.alert_routes.add(name="hook", kind=0), "spec.alert_routes[0].kind: required"),
        (
            lambda s: s.alert_routes.add(name="hook", kind=2, event_kinds=["sla.nope"]),
            "spec.alert_routes[0].event_kinds:",
        ),
        (
            lambda s: [s.alert_routes.add(name="x", kind=2) for _ in range(2)],
            "spec.alert_routes[1].name: 'x' is used",
        ),
        (lambda s: s.alert_routes.add(name="am", kind=3), "spec.alert_routes[0].url: an alertmanager route"),
        (lambda s: s.alert_routes.add(name="pd", kind=4), "spec.alert_routes[0].routing_key: required"),
        (
            lambda s: s.alert_routes.add(name="hook", kind=1, url="https://x", routing_key="k"),
            "spec.alert_routes[0].routing_key: for pagerduty routes only",
        ),
    ],
)
def test_create_refuses_a_bad_spec_naming_the_field(change: object, message: str) -> None:
    s = spec("voice-eu")
    change(s)  # type: ignore[operator]
    refused(message, create, s)


def test_create_needs_a_request_id_and_a_spec() -> None:
    refused("request_id: required", create, spec("voice-eu"), "")
    refused("request_id: must be", create, spec("voice-eu"), "has space")
    refused("spec: required", v.create_command, pb.CreateEndpointRequest(request_id="r"), caller_tenant="t")


def test_alert_routes_get_a_default_severity() -> None:
    s = spec("voice-eu")
    s.alert_routes.add(
        name="oncall", kind=endpoint_pb2.ALERT_ROUTE_KIND_WEBHOOK, url="https://hooks.example/x"
    )
    route = create(s).spec.alert_routes[0]
    assert route.kind == "webhook" and route.min_severity == common_pb2.SEVERITY_WARNING


def test_alertmanager_and_pagerduty_routes_are_accepted_and_read_back() -> None:
    """The kinds the proto documents and the sla-monitor sends to (it had refused all but two)."""
    s = spec("voice-eu")
    s.alert_routes.add(name="am", kind=endpoint_pb2.ALERT_ROUTE_KIND_ALERTMANAGER, url="https://am.example/")
    s.alert_routes.add(name="pd", kind=endpoint_pb2.ALERT_ROUTE_KIND_PAGERDUTY, routing_key="R0UTING-KEY")
    domain = create(s).spec
    assert [(r.kind, r.url, r.routing_key) for r in domain.alert_routes] == [
        ("alertmanager", "https://am.example/", ""),
        ("pagerduty", "", "R0UTING-KEY"),
    ]
    wire = v.endpoint_spec_proto(domain)
    assert [r.kind for r in wire.alert_routes] == [
        endpoint_pb2.ALERT_ROUTE_KIND_ALERTMANAGER,
        endpoint_pb2.ALERT_ROUTE_KIND_PAGERDUTY,
    ]
    assert wire.alert_routes[1].routing_key == "R0UTING-KEY" and v.endpoint_def(wire) == domain


def update(current: endpoint_pb2.EndpointSpec, new: endpoint_pb2.EndpointSpec, *paths: str) -> UpdateCommand:
    request = pb.UpdateEndpointRequest(name=current.name, spec=new, update_mask=FieldMask(paths=list(paths)))
    return v.update_command(request, current=current)


def test_update_applies_only_the_masked_fields() -> None:
    current = v.endpoint_spec_proto(create(spec("voice-eu")).spec)
    new = spec("ignored", model="other", ttft_p99_ms=300)
    new.slo.ttft_p50_ms = 100
    new.search_policy = endpoint_pb2.SEARCH_POLICY_ADVISORY
    command = update(current, new, "slo.ttft_p99_ms", "search_policy")
    assert command.spec.slo.ttft_p99_ms == 300 and command.spec.slo.ttft_p50_ms == 0
    assert command.spec.search_policy == "advisory" and command.spec.model == "tiny-model"
    assert command.changed_fields == ("slo.ttft_p99_ms", "search_policy")
    whole = update(current, new, "spec.slo")
    assert whole.spec.slo.ttft_p50_ms == 100 and whole.changed_fields == ("slo",)


def test_update_refuses_immutable_unknown_and_missing_paths_and_bad_values() -> None:
    current = v.endpoint_spec_proto(create(spec("voice-eu")).spec)
    new = spec("voice-eu")
    refused("update_mask: required", update, current, new)
    for path in ("name", "model", "tenant", "hardware_pool.hardware_class", "initial_engine_config"):
        refused(f"update_mask: '{path}' cannot change", update, current, new, path)
    refused("update_mask: unknown path 'slo.nope'", update, current, new, "slo.nope")
    bad = spec("voice-eu", ttft_p99_ms=0)
    refused("spec.slo.ttft_p99_ms: required", update, current, bad, "slo")
    request = pb.UpdateEndpointRequest(
        name="voice-eu", update_mask=FieldMask(paths=["slo"]), expected_revision=-1
    )
    refused("expected_revision:", v.update_command, request, current=current)


def test_pages() -> None:
    assert v.page(0, "") == Page(size=100, after="")
    token = v.page_token("voice-eu")
    assert v.page(5, token) == Page(size=5, after="voice-eu")
    refused("page_size: at most 1000", v.page, 1001, "")
    refused("page_token: not a page token", v.page, 10, "garbage!")
    refused("page_token: not a page token", v.page, 10, "aGVsbG8")


def test_promote_needs_one_source_and_normalizes_the_config() -> None:
    refused(
        "source: one of",
        v.promote_command,
        pb.PromoteRequest(endpoint="e", request_id="r"),
        default_model="m",
    )
    refused(
        "endpoint: required",
        v.promote_command,
        pb.PromoteRequest(request_id="r", trial_id="t"),
        default_model="m",
    )
    refused(
        "request_id: required",
        v.promote_command,
        pb.PromoteRequest(endpoint="e", trial_id="t"),
        default_model="m",
    )
    bad = pb.PromoteRequest(
        endpoint="e", request_id="r", engine_config=endpoint_pb2.EngineConfig(block_size=0)
    )
    refused("engine_config.block_size:", v.promote_command, bad, default_model="m")
    refused(
        "reason: must be one line",
        v.promote_command,
        pb.PromoteRequest(endpoint="e", request_id="r", trial_id="t", reason="a\nb"),
        default_model="m",
    )
    explicit = v.promote_command(
        pb.PromoteRequest(endpoint="e", request_id="r", engine_config=endpoint_pb2.EngineConfig(model="m")),
        default_model="m",
    )
    implicit = v.promote_command(
        pb.PromoteRequest(endpoint="e", request_id="q", engine_config=endpoint_pb2.EngineConfig()),
        default_model="m",
    )
    assert explicit.engine == implicit.engine and explicit.fingerprint == implicit.fingerprint
    trial = v.promote_command(
        pb.PromoteRequest(endpoint="e", request_id="r", trial_id="t-1"), default_model="m"
    )
    assert trial.engine is None and trial.trial_id == "t-1" and trial.fingerprint != explicit.fingerprint


def test_rollback_checks_its_fields() -> None:
    refused("request_id: required", v.rollback_command, pb.RollbackRequest(endpoint="e"))
    refused(
        "to_deployment_id:",
        v.rollback_command,
        pb.RollbackRequest(endpoint="e", request_id="r", to_deployment_id="x"),
    )
    ok = v.rollback_command(
        pb.RollbackRequest(endpoint="e", request_id="r", to_deployment_id="dep-0123456789ab")
    )
    assert ok.to_deployment_id == "dep-0123456789ab"


def test_watch_filter() -> None:
    refused("kinds: unknown event kind 'x.y'", v.watch_filter, pb.WatchEventsRequest(kinds=["x.y"]))
    refused("endpoint:", v.watch_filter, pb.WatchEventsRequest(endpoint="Bad!"))
    refused("min_severity: unknown", v.watch_filter, pb.WatchEventsRequest(min_severity=17))  # type: ignore[arg-type]
    filt = v.watch_filter(
        pb.WatchEventsRequest(
            kinds=["deploy.promoted"], min_severity=common_pb2.SEVERITY_WARNING, since=Timestamp(seconds=1000)
        )
    )
    assert filt.since is not None and filt.since.timestamp() == 1000
    assert filt.accepts(kind="deploy.promoted", severity=common_pb2.SEVERITY_ERROR)
    assert not filt.accepts(kind="deploy.promoted", severity=common_pb2.SEVERITY_INFO)
    assert not filt.accepts(kind="sla.breach", severity=common_pb2.SEVERITY_CRITICAL)


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"steps": [5000, 1000, 10000]}, "spec.rollout.steps: must strictly increase and end at 10000"),
        ({"steps": [1000, 5000]}, "spec.rollout.steps: must strictly increase and end at 10000"),
        ({"steps": [0, 10000]}, "spec.rollout.steps: each weight must be in 1..10000"),
        ({"p_value": 1.5}, "spec.rollout.p_value: must be in (0, 1)"),
        ({"p_value": -0.01}, "spec.rollout.p_value: must be in (0, 1)"),
        ({"max_ttft_regression": -0.1}, "spec.rollout.max_ttft_regression: must be >= 0"),
        ({"itl_slack_ms": -2.0}, "spec.rollout.itl_slack_ms: must be >= 0"),
        ({"max_error_share_increase": 1.5}, "spec.rollout.max_error_share_increase:"),
        (
            {"step_duration_s": -1.0},
            "spec.rollout.step_duration_s: must be in (0, 86400] (0 = the deployer's default), got -1",
        ),
        ({"step_duration_s": float("nan")}, "spec.rollout.step_duration_s: must be a finite number"),
        (
            {"failure_limit": 101},
            "spec.rollout.failure_limit: must be in [1, 100] (0 = the deployer's default)",
        ),
    ],
)
def test_create_refuses_a_bad_rollout_policy_naming_the_field(
    policy: dict[str, object], message: str
) -> None:
    s = spec("voice-eu")
    s.rollout.CopyFrom(endpoint_pb2.RolloutPolicy(**policy))  # type: ignore[arg-type]
    refused(message, create, s)


def test_a_rollout_policy_reads_back_and_changes_by_path() -> None:
    s = spec("voice-eu")
    s.rollout.CopyFrom(endpoint_pb2.RolloutPolicy(steps=[5000, 10000], failure_limit=2, ttft_slack_ms=0))
    domain = create(s).spec
    assert domain.rollout.steps == (5000, 10000) and domain.rollout.failures_tolerated == 1
    assert domain.rollout.ttft_slack_ms == 0.0 and domain.rollout.max_ttft_regression is None
    wire = v.endpoint_spec_proto(domain)
    assert wire.rollout.failure_limit == 2 and list(wire.rollout.steps) == [5000, 10000]
    assert wire.rollout.HasField("ttft_slack_ms") and not wire.rollout.HasField("max_ttft_regression")
    assert v.endpoint_def(wire) == domain
    assert not v.endpoint_spec_proto(create(spec("plain")).spec).HasField("rollout")  # nothing to store
    new = spec("voice-eu")
    new.rollout.step_duration_s = 30
    leaf = update(wire, new, "spec.rollout.step_duration_s").spec.rollout
    assert leaf.step_duration_s == 30 and leaf.steps == (5000, 10000) and leaf.ttft_slack_ms == 0.0
    assert update(wire, new, "rollout.ttft_slack_ms").spec.rollout.ttft_slack_ms is None  # unset: default
    assert update(wire, new, "rollout").spec.rollout == RolloutOverrides(step_duration_s=30)
    new.rollout.steps.extend([6000, 3000])
    refused("spec.rollout.steps: must strictly increase", update, wire, new, "rollout.steps")
