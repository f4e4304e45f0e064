"""The wire contracts: stubs are current, event kinds match the Event oneof, telemetry holds no text."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

# protobuf ships no type information; the ignore stays harmless once types-protobuf is installed.
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import (
    FieldDescriptor,
)

from evertune.errors import InvalidArgument
from evertune.infra import protogen
from evertune.infra.events import (
    PAYLOAD_ONEOF,
    PAYLOAD_TYPES,
    SYSTEM_ENDPOINT_TOKEN,
    EventKind,
    event_filter_subject,
    event_kind,
    event_payload,
    event_subject,
    new_event,
    subject_of,
)
from evertune.v1 import (
    common_pb2,
    endpoint_pb2,
    endpoint_service_pb2_grpc,
    events_pb2,
    jobs_pb2,
    search_service_pb2_grpc,
    telemetry_pb2,
)
from tests import checkout

STUB_DIR = checkout.ROOT / protogen.PACKAGE_DIR


# --- generated stubs ------------------------------------------------------------------------


def test_stubs_are_not_stale(tmp_path: Path) -> None:
    written = protogen.generate(tmp_path)
    assert written == sorted(written)
    assert all(p.parent == tmp_path / protogen.PACKAGE_DIR for p in written)
    fresh = {p.name: p.read_bytes() for p in written}
    committed = {
        p.name: p.read_bytes()
        for p in STUB_DIR.iterdir()
        if p.is_file() and p.name.endswith(protogen.GENERATED_SUFFIXES)
    }
    stale = sorted(n for n in set(fresh) | set(committed) if fresh.get(n) != committed.get(n))
    assert not stale, f"stale stubs in evertune/v1/ (run `make proto`): {', '.join(stale)}"


def test_generation_is_deterministic(tmp_path: Path) -> None:
    first = {p.name: p.read_bytes() for p in protogen.generate(tmp_path / "a")}
    second = {p.name: p.read_bytes() for p in protogen.generate(tmp_path / "b")}
    assert first == second


def test_check_command_passes_and_names_stale_files(tmp_path: Path) -> None:
    assert protogen.main(["--check"]) == 0
    # A copy of the stubs with one file changed and one left over is reported, one line.
    protogen.sync(tmp_path)
    (tmp_path / protogen.PACKAGE_DIR / "events_pb2.py").write_text("# edited\n")
    (tmp_path / protogen.PACKAGE_DIR / "gone_pb2.py").write_text("# left over\n")
    assert protogen.stale_files(tmp_path) == ["evertune/v1/events_pb2.py", "evertune/v1/gone_pb2.py"]
    assert protogen.sync(tmp_path) == ["evertune/v1/events_pb2.py", "evertune/v1/gone_pb2.py"]
    assert protogen.stale_files(tmp_path) == []


def test_generated_imports_resolve_to_the_package() -> None:
    text = (STUB_DIR / "events_pb2.py").read_text()
    assert "from evertune.v1 import endpoint_pb2" in text
    assert hasattr(endpoint_service_pb2_grpc, "EndpointServiceStub")
    assert hasattr(search_service_pb2_grpc, "SearchServiceServicer")


def _descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        args = [
            "protoc",
            f"-I{protogen.PROTO_ROOT}",
            f"-I{protogen.well_known_include()}",
            "--include_source_info",
            f"--descriptor_set_out={out}",
            *(str(protogen.PROTO_ROOT / f) for f in protogen.proto_files()),
        ]
        assert protoc.main(args) == 0
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def test_every_declaration_is_commented() -> None:
    # Source-info paths: 4 message_type, 2 field, 5 enum_type, 2 value, 6 service, 2 method.
    missing: list[str] = []
    for fd in _descriptor_set().file:
        commented = {tuple(loc.path) for loc in fd.source_code_info.location if loc.leading_comments.strip()}
        wanted: list[tuple[tuple[int, ...], str]] = []
        for i, msg in enumerate(fd.message_type):
            wanted.append(((4, i), msg.name))
            wanted += [((4, i, 2, j), f"{msg.name}.{f.name}") for j, f in enumerate(msg.field)]
        for i, enum in enumerate(fd.enum_type):
            wanted.append(((5, i), enum.name))
            wanted += [((5, i, 2, j), f"{enum.name}.{v.name}") for j, v in enumerate(enum.value)]
        for i, svc in enumerate(fd.service):
            wanted.append(((6, i), svc.name))
            wanted += [((6, i, 2, j), f"{svc.name}.{m.name}") for j, m in enumerate(svc.method)]
        missing += [f"{fd.name}: {what}" for path, what in wanted if path not in commented]
    assert not missing, "uncommented declarations: " + ", ".join(missing)


def test_all_files_are_in_package_evertune_v1() -> None:
    for fd in _descriptor_set().file:
        assert fd.package == "evertune.v1", fd.name
        assert fd.syntax == "proto3", fd.name


# --- events ---------------------------------------------------------------------------------


def test_event_kinds_and_payload_oneof_match() -> None:
    oneof = events_pb2.Event.DESCRIPTOR.oneofs_by_name[PAYLOAD_ONEOF]
    fields = {f.name: f for f in oneof.fields}
    kinds = {k.payload_field: k for k in EventKind}
    assert set(fields) - set(kinds) == set(), "oneof payload fields without an EventKind"
    assert set(kinds) - set(fields) == set(), "EventKinds without a payload field in Event"
    for name, field in fields.items():
        assert field.message_type is PAYLOAD_TYPES[kinds[name]].DESCRIPTOR, name
    assert set(PAYLOAD_TYPES) == set(EventKind)


def test_every_kind_is_two_subject_tokens() -> None:
    for kind in EventKind:
        words = kind.value.split(".")
        assert len(words) == 2 and all(words), kind
        assert event_subject(kind, "ep").split(".") == ["evertune", "events", *words, "ep"]


def _breach() -> events_pb2.SlaBreach:
    return events_pb2.SlaBreach(
        breach_id="b-1",
        metric=events_pb2.SLO_METRIC_ATTAINMENT,
        burn_rate=14.4,
        observed_ttft_p99_ms=910.0,
        target_ttft_p99_ms=500.0,
    )


@pytest.mark.parametrize("kind", list(EventKind))
def test_new_event_round_trips_for_every_kind(kind: EventKind) -> None:
    payload = PAYLOAD_TYPES[kind]()
    event = new_event(kind, endpoint="voice-eu", source="test", payload_message=payload)
    back = events_pb2.Event.FromString(event.SerializeToString())
    assert back == event
    assert event_kind(back) is kind
    assert type(event_payload(back)) is PAYLOAD_TYPES[kind]
    assert back.WhichOneof(PAYLOAD_ONEOF) == kind.payload_field
    assert subject_of(back) == f"evertune.events.{kind.value}.voice-eu"


def test_new_event_fills_envelope() -> None:
    payload = _breach()
    event = new_event(
        EventKind.SLA_BREACH, endpoint="voice-eu", source="sla-monitor", payload_message=payload, cause_id="c"
    )
    back = events_pb2.Event.FromString(event.SerializeToString())
    assert len(back.id) == 32 and int(back.id, 16) >= 0
    assert back.kind == "sla.breach"
    assert back.endpoint == "voice-eu"
    assert back.source == "sla-monitor"
    assert back.cause_id == "c"
    assert back.severity == common_pb2.SEVERITY_CRITICAL
    assert back.time.seconds > 1_700_000_000
    assert back.sla_breach == payload
    assert back.sla_breach.observed_ttft_p99_ms == 910.0
    other = new_event(EventKind.SLA_BREACH, endpoint="voice-eu", source="s", payload_message=payload)
    assert other.id != event.id
    chosen = new_event(
        EventKind.SLA_BREACH,
        endpoint="voice-eu",
        source="s",
        payload_message=payload,
        severity=common_pb2.SEVERITY_WARNING,
    )
    assert chosen.severity == common_pb2.SEVERITY_WARNING


def test_system_event_without_endpoint() -> None:
    poison = events_pb2.ServicePoisonMessage(
        stream="EVENTS", consumer="deployer", subject="evertune.events.x.y", deliveries=5, error="boom"
    )
    event = new_event(
        EventKind.SERVICE_POISON_MESSAGE, endpoint="", source="deployer", payload_message=poison
    )
    assert subject_of(event) == f"evertune.events.service.poison_message.{SYSTEM_ENDPOINT_TOKEN}"
    assert event.severity == common_pb2.SEVERITY_ERROR


def test_wrong_payload_type_raises() -> None:
    with pytest.raises(InvalidArgument, match=r"sla\.breach.*SlaBreach"):
        new_event(
            EventKind.SLA_BREACH,
            endpoint="voice-eu",
            source="s",
            payload_message=events_pb2.SlaResolved(breach_id="b-1"),
        )
    with pytest.raises(InvalidArgument):
        new_event(
            EventKind.PROFILE_READY,
            endpoint="voice-eu",
            source="s",
            payload_message=endpoint_pb2.Slo(),  # type: ignore[arg-type, unused-ignore]
        )


def test_new_event_rejects_missing_endpoint_source_and_unknown_kind() -> None:
    payload = _breach()
    with pytest.raises(InvalidArgument, match="needs an endpoint"):
        new_event(EventKind.SLA_BREACH, endpoint="", source="s", payload_message=payload)
    with pytest.raises(InvalidArgument, match="source"):
        new_event(EventKind.SLA_BREACH, endpoint="e", source="", payload_message=payload)
    with pytest.raises(InvalidArgument, match="unknown event kind"):
        new_event("sla.exploded", endpoint="e", source="s", payload_message=payload)  # type: ignore[arg-type, unused-ignore]


def test_event_kind_rejects_inconsistent_or_unknown_events() -> None:
    mismatched = events_pb2.Event(id="x", kind="sla.breach", sla_resolved=events_pb2.SlaResolved())
    with pytest.raises(InvalidArgument, match="sla_resolved"):
        event_kind(mismatched)
    with pytest.raises(InvalidArgument, match="none"):
        event_kind(events_pb2.Event(id="x", kind="sla.breach"))
    with pytest.raises(InvalidArgument, match="unknown event kind"):
        event_kind(events_pb2.Event(id="x", kind="future.kind"))


@pytest.mark.parametrize(
    "endpoint",
    ["a.b", "a*", "a>", ">", "a b", "tab\there", "new\nline", " ", "nul\x00", SYSTEM_ENDPOINT_TOKEN],
)
def test_event_subject_rejects_bad_endpoint_tokens(endpoint: str) -> None:
    with pytest.raises(InvalidArgument):
        event_subject(EventKind.SLA_BREACH, endpoint)
    with pytest.raises(InvalidArgument):
        new_event(
            EventKind.SLA_BREACH,
            endpoint=endpoint,
            source="s",
            payload_message=_breach(),
        )


def test_event_subjects() -> None:
    assert event_subject(EventKind.SLA_BREACH, "voice-eu") == "evertune.events.sla.breach.voice-eu"
    assert event_subject(EventKind.DEPLOY_CANARY_STEP, "") == "evertune.events.deploy.canary_step._system"
    assert event_filter_subject() == "evertune.events.>"
    assert event_filter_subject(EventKind.SLA_BREACH) == "evertune.events.sla.breach.*"
    assert event_filter_subject(endpoint="voice-eu") == "evertune.events.*.*.voice-eu"
    assert event_filter_subject(EventKind.TRIAL_PROGRESS, "e") == "evertune.events.trial.progress.e"
    with pytest.raises(InvalidArgument):
        event_filter_subject(endpoint="a.b")


# --- telemetry ------------------------------------------------------------------------------

#: The only string fields a RequestRecord may have: identifiers and labels, never content. Adding a
#: string or bytes field (a prompt, a completion, a header dump) must fail this test on purpose.
ALLOWED_RECORD_STRING_FIELDS = frozenset(
    {"request_id", "endpoint", "endpoint_uid", "deployment", "model", "error_class"}
)


def _text_fields(desc: Any, prefix: str = "", seen: frozenset[str] = frozenset()) -> set[str]:
    """Dotted names of every string/bytes field in message descriptor `desc`, nested ones included."""
    found: set[str] = set()
    for field in desc.fields:
        name = prefix + field.name
        if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
            found.add(name)
        elif field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.full_name not in seen:
            found |= _text_fields(field.message_type, name + ".", seen | {desc.full_name})
    return found


def test_request_record_holds_no_text() -> None:
    text_fields = _text_fields(telemetry_pb2.RequestRecord.DESCRIPTOR)
    assert text_fields <= ALLOWED_RECORD_STRING_FIELDS, (
        f"RequestRecord gained string/bytes fields {sorted(text_fields - ALLOWED_RECORD_STRING_FIELDS)}: "
        "telemetry never holds prompt or completion text"
    )
    names = set(telemetry_pb2.RequestRecord.DESCRIPTOR.fields_by_name)
    assert not names & {"prompt", "completion", "messages", "text", "content", "body"}


def test_request_record_fields_and_batch_round_trip() -> None:
    fields = telemetry_pb2.RequestRecord.DESCRIPTOR.fields_by_name
    assert fields["start_time_unix_ns"].type == FieldDescriptor.TYPE_INT64
    assert fields["prefix_hashes"].type == FieldDescriptor.TYPE_FIXED64
    assert fields["itl_ms"].type == FieldDescriptor.TYPE_FLOAT
    for name in ("prompt_tokens", "cached_tokens", "completion_tokens"):
        assert fields[name].type == FieldDescriptor.TYPE_UINT32
    record = telemetry_pb2.RequestRecord(
        request_id="r-1",
        endpoint="voice-eu",
        deployment="dep-1",
        start_time_unix_ns=1_790_000_000_000_000_000,
        api=telemetry_pb2.API_CHAT,
        stream=True,
        status_code=200,
        ttft_ms=84.5,
        itl_ms=[12.5, 13.0],
        prompt_tokens=1800,
        cached_tokens=1536,
        completion_tokens=3,
        prefix_hashes=[2**64 - 1, 7],
        upstream_ttft_ms=83.6,
    )
    batch = telemetry_pb2.RequestRecordBatch(records=[record] * 3, batch_id="b-1", source="gw-1")
    back = telemetry_pb2.RequestRecordBatch.FromString(batch.SerializeToString())
    assert back == batch
    assert back.records[0].prefix_hashes[0] == 2**64 - 1


def test_engine_config_knobs_distinguish_unset() -> None:
    config = endpoint_pb2.EngineConfig(engine="vllm", max_num_seqs=128)
    back = endpoint_pb2.EngineConfig.FromString(config.SerializeToString())
    assert back.HasField("max_num_seqs")
    assert not back.HasField("max_num_batched_tokens")
    explicit_false = endpoint_pb2.EngineConfig(enable_prefix_caching=False)
    assert endpoint_pb2.EngineConfig.FromString(explicit_false.SerializeToString()).HasField(
        "enable_prefix_caching"
    )


def test_trial_job_round_trips() -> None:
    job = jobs_pb2.TrialJob(
        job_id="j-1",
        search_id="s-1",
        trial_id="t-1",
        endpoint="voice-eu",
        hardware_class="sim-h200",
        engine_config=endpoint_pb2.EngineConfig(engine="sim", max_num_batched_tokens=4096),
        rates_rps=[1.0, 2.0, 4.0],
        repeats=2,
        gates=[jobs_pb2.GateSpec(name="correctness", threshold=0.95)],
    )
    assert jobs_pb2.TrialJob.FromString(job.SerializeToString()) == job
