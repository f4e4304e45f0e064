"""Wire -> domain for the EndpointService (pure): every request is checked and converted here, once.

Each `*_command` function takes a request protobuf and returns a frozen domain object, or raises
`InvalidArgument` with one line that starts with the offending field's path as the client wrote it
(`spec.slo.ttft_p99_ms: must be > 0`). Nothing here does I/O; the clock is never read.

Defaults filled in at creation (the stored spec shows them): `search_policy` AUTO, `objective` GOODPUT,
`slo.attainment_target` 0.9, `hardware_pool.max_replicas` 1, `correctness_agreement_threshold`
0.95, an alert route's `min_severity` WARNING, and the initial engine config's `engine` ("vllm")
and `model` (the endpoint's). An unset `initial_engine_config` is vLLM with every knob at its
default. `rollout` is NOT filled in: its unset fields stay unset and take the deployer's defaults
when a rollout begins (`rollout.effective_policy`), so a change of those settings reaches them.
"""

from __future__ import annotations

import base64
import hashlib
import re
from datetime import UTC
from typing import Any, Final

from annotated_types import Ge, Gt, Le, Lt
from google.protobuf.message import Message
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from evertune.deployer.commands import (
    CreateCommand,
    Page,
    PromoteCommand,
    RollbackCommand,
    UpdateCommand,
    WatchFilter,
)
from evertune.deployer.endpoint_spec import (
    EVENT_KINDS,
    AlertKind,
    AlertRouteSpec,
    EndpointDef,
    HardwarePoolSpec,
    ObjectiveName,
    SearchPolicyName,
    SloSpec,
)
from evertune.deployer.model_roots import ModelRoots
from evertune.deployer.rollout_policy import RolloutOverrides
from evertune.domain.engines import EngineSpec, InvalidEngineConfig
from evertune.errors import InvalidArgument
from evertune.infra.outbound import OutboundPolicy
from evertune.v1 import common_pb2, endpoint_pb2, endpoint_service_pb2

#: Endpoint names: 1-63 of [a-z0-9-], starting with a letter (a NATS token and part of URLs).
NAME_RE: Final = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
#: Tenants: 1-63 of letters, digits, '-', '_', starting with a letter or digit.
TENANT_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
#: Deployment ids as the deployer makes them ("dep-" + 12 hex).
DEPLOYMENT_ID_RE: Final = re.compile(r"^dep-[0-9a-f]{12}$")
#: Longest request_id, reason and trial id accepted.
MAX_REQUEST_ID: Final = 128
MAX_REASON: Final = 500
MAX_ID: Final = 128
#: Page sizes: 0 means DEFAULT_PAGE, at most MAX_PAGE.
DEFAULT_PAGE: Final = 100
MAX_PAGE: Final = 1000

#: The wire RolloutPolicy's fields named otherwise in the domain's (rollout_policy.RolloutPolicy),
#: and what the wire adds to the domain's figure: failure_limit N rolls back at the Nth failed
#: analysis, N - 1 failures tolerated.
_ROLLOUT_WIRE_NAME: Final = {"failures_tolerated": "failure_limit"}
_ROLLOUT_DOMAIN_NAME: Final = {wire: name for name, wire in _ROLLOUT_WIRE_NAME.items()}
_ROLLOUT_WIRE_OFFSET: Final = {"failures_tolerated": 1}
#: The wire RolloutPolicy's leaves (UpdateEndpoint paths `rollout.<leaf>`).
ROLLOUT_LEAVES: Final = tuple(f.name for f in endpoint_pb2.RolloutPolicy.DESCRIPTOR.fields)

_POLICY_TO_WIRE: Final[dict[SearchPolicyName, int]] = {
    "auto": endpoint_pb2.SEARCH_POLICY_AUTO,
    "advisory": endpoint_pb2.SEARCH_POLICY_ADVISORY,
    "off": endpoint_pb2.SEARCH_POLICY_OFF,
}
#: ... and back; unset is AUTO.
_POLICY_FROM_WIRE: Final[dict[int, SearchPolicyName]] = {
    endpoint_pb2.SEARCH_POLICY_UNSPECIFIED: "auto",
    **{wire: name for name, wire in _POLICY_TO_WIRE.items()},
}
_OBJECTIVE_TO_WIRE: Final[dict[ObjectiveName, int]] = {
    "goodput": endpoint_pb2.SEARCH_OBJECTIVE_GOODPUT,
    "p50_ttft": endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT,
    "cost": endpoint_pb2.SEARCH_OBJECTIVE_COST,
}
#: ... and back; unset is GOODPUT.
_OBJECTIVE_FROM_WIRE: Final[dict[int, ObjectiveName]] = {
    endpoint_pb2.SEARCH_OBJECTIVE_UNSPECIFIED: "goodput",
    **{wire: name for name, wire in _OBJECTIVE_TO_WIRE.items()},
}
_SEVERITIES: Final = frozenset(common_pb2.Severity.values())

#: update_mask paths UpdateEndpoint accepts, and the ones it refuses as immutable.
MUTABLE_PATHS: Final = frozenset(
    {
        "slo",
        *(f"slo.{leaf.name}" for leaf in endpoint_pb2.Slo.DESCRIPTOR.fields),
        "search_policy",
        "objective",
        "alert_routes",
        "hardware_pool.max_replicas",
        "correctness_agreement_threshold",
        "rollout",
        *(f"rollout.{leaf}" for leaf in ROLLOUT_LEAVES),
    }
)
IMMUTABLE_PATHS: Final = frozenset(
    {"name", "tenant", "model", "hardware_pool", "hardware_pool.hardware_class", "initial_engine_config"}
)


#: AlertRoute.kind on the wire <-> the domain's kind (the one mapping, both ways).
ALERT_KIND_OF_WIRE: dict[int, AlertKind] = {
    endpoint_pb2.ALERT_ROUTE_KIND_WEBHOOK: "webhook",
    endpoint_pb2.ALERT_ROUTE_KIND_LOG: "log",
    endpoint_pb2.ALERT_ROUTE_KIND_ALERTMANAGER: "alertmanager",
    endpoint_pb2.ALERT_ROUTE_KIND_PAGERDUTY: "pagerduty",
}
ALERT_KIND_TO_WIRE: dict[str, int] = {kind: wire for wire, kind in ALERT_KIND_OF_WIRE.items()}


# --------------------------------------------------------------------------------------------
# Field checks
# --------------------------------------------------------------------------------------------


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _range(info: Any, *, offset: int = 0) -> str:
    """A field's bounds as one phrase ("must be in (0, 1)", "must be >= 0"), from its declaration."""
    metadata = list(getattr(info, "metadata", ()))
    low = next((m for m in metadata if isinstance(m, Gt | Ge)), None)
    high = next((m for m in metadata if isinstance(m, Lt | Le)), None)
    low_value: Any = None if low is None else low.gt if isinstance(low, Gt) else low.ge
    high_value: Any = None if high is None else high.lt if isinstance(high, Lt) else high.le
    lo = None if low is None else _number(low_value + offset)
    hi = None if high is None else _number(high_value + offset)
    if lo is not None and hi is not None:
        opening, closing = "(" if isinstance(low, Gt) else "[", ")" if isinstance(high, Lt) else "]"
        return f"must be in {opening}{lo}, {hi}{closing}"
    if lo is not None:
        return f"must be {'>' if isinstance(low, Gt) else '>='} {lo}"
    return f"must be {'<' if isinstance(high, Lt) else '<='} {hi}"


def _field_info(model: type[BaseModel], loc: tuple[int | str, ...]) -> Any:
    """The declaration of the field at `loc` under `model` (nested models followed), or None."""
    info: Any = None
    for part in loc:
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return None
        info = fields[part]
        model = info.annotation
    return info


_BOUND_ERRORS: Final = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})


def pydantic_reason(error: ErrorDetails, model: type[BaseModel], *, offset: int = 0, note: str = "") -> str:
    """One error of `model`'s validation as a phrase for a person: a bound as the field's whole
    range (`offset` added, `note` after it) and the value given, a missing field as "required", a
    check's own message as it is."""
    if error["type"] == "missing":
        return "required"
    if error["type"] == "finite_number":
        return "must be a finite number"
    info = _field_info(model, error["loc"])
    if error["type"] in _BOUND_ERRORS and info is not None:
        given = error["input"] + offset if isinstance(error["input"], int | float) else error["input"]
        return f"{_range(info, offset=offset)}{note}, got {_number(given)}"
    return str(error["msg"]).removeprefix("Value error, ")


def _one_line(err: ValidationError, prefix: str, model: type[BaseModel]) -> InvalidArgument:
    """The first error of validating `model` as INVALID_ARGUMENT naming its field under `prefix`."""
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    path = f"{prefix}.{where}" if where else prefix
    return InvalidArgument(f"{path}: {pydantic_reason(first, model)}")


def _given(message: Message, *names: str) -> dict[str, Any]:
    """The fields of `message` that are set: 0, empty and unset stand for "the default" on the wire."""
    return {name: getattr(message, name) for name in names if getattr(message, name)}


def endpoint_name(value: str, field: str) -> str:
    """An endpoint name, or InvalidArgument naming `field`."""
    if not value:
        raise InvalidArgument(f"{field}: required")
    if not NAME_RE.match(value):
        raise InvalidArgument(f"{field}: {value[:80]!r} must be 1-63 of [a-z0-9-] starting with a letter")
    return value


def request_id(value: str, field: str = "request_id") -> str:
    """A client request id: required, 1-128 printable characters without whitespace."""
    if not value:
        raise InvalidArgument(f"{field}: required (a client-chosen id, e.g. a uuid)")
    if len(value) > MAX_REQUEST_ID or any(c.isspace() or not c.isprintable() for c in value):
        raise InvalidArgument(f"{field}: must be 1-{MAX_REQUEST_ID} printable characters without spaces")
    return value


def reason_line(value: str, field: str = "reason") -> str:
    """An optional one-line reason."""
    if len(value) > MAX_REASON or "\n" in value or "\r" in value:
        raise InvalidArgument(f"{field}: must be one line of at most {MAX_REASON} characters")
    return value


def tenant_name(value: str, field: str) -> str:
    if not TENANT_RE.match(value):
        raise InvalidArgument(f"{field}: {value[:80]!r} must be 1-63 of letters, digits, '-', '_'")
    return value


def expected_revision(value: int, field: str = "expected_revision") -> int:
    if value < 0:
        raise InvalidArgument(f"{field}: must be >= 0 (0 = any)")
    return value


def engine_spec(config: endpoint_pb2.EngineConfig, *, default_model: str, field: str) -> EngineSpec:
    """An EngineSpec from the wire, errors prefixed with `field`."""
    try:
        return EngineSpec.from_proto(config, default_model=default_model)
    except InvalidEngineConfig as err:
        detail = str(err).removeprefix("invalid engine config: ")
        where, sep, reason = detail.partition(": ")
        if sep and where and " " not in where:
            raise InvalidArgument(f"{field}.{where}: {reason}") from None
        raise InvalidArgument(f"{field}: {detail}") from None


def _fingerprint(message: endpoint_pb2.EndpointSpec | endpoint_service_pb2.PromoteRequest | bytes) -> str:
    data = message if isinstance(message, bytes) else message.SerializeToString(deterministic=True)
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------------------------
# Endpoint spec: wire <-> domain
# --------------------------------------------------------------------------------------------


def endpoint_def(spec: endpoint_pb2.EndpointSpec, *, field: str = "spec") -> EndpointDef:
    """Validate a wire EndpointSpec (tenant already set) into the domain form, defaults filled in."""
    endpoint_name(spec.name, f"{field}.name")
    if not spec.tenant:
        raise InvalidArgument(f"{field}.tenant: required")
    tenant_name(spec.tenant, f"{field}.tenant")
    if not spec.model:
        raise InvalidArgument(f"{field}.model: required (the model served)")
    if not spec.HasField("slo"):
        raise InvalidArgument(f"{field}.slo: required (at least slo.ttft_p99_ms)")
    if not spec.HasField("hardware_pool") or not spec.hardware_pool.hardware_class:
        raise InvalidArgument(f"{field}.hardware_pool.hardware_class: required (e.g. 'cpu')")
    if spec.search_policy not in _POLICY_FROM_WIRE:
        raise InvalidArgument(f"{field}.search_policy: unknown value {spec.search_policy}")
    if spec.objective not in _OBJECTIVE_FROM_WIRE:
        raise InvalidArgument(
            f"{field}.objective: unknown value {spec.objective} (goodput, p50_ttft or cost)"
        )
    routes = []
    seen: set[str] = set()
    for i, route in enumerate(spec.alert_routes):
        routes.append(_alert_route(route, f"{field}.alert_routes[{i}]"))
        if route.name in seen:
            raise InvalidArgument(f"{field}.alert_routes[{i}].name: {route.name!r} is used twice")
        seen.add(route.name)
    initial = engine_spec(
        spec.initial_engine_config, default_model=spec.model, field=f"{field}.initial_engine_config"
    )
    try:
        slo = SloSpec(**_given(spec.slo, *SloSpec.model_fields))
    except ValidationError as err:
        raise _one_line(err, f"{field}.slo", SloSpec) from None
    if slo.ttft_p50_ms and slo.ttft_p50_ms > slo.ttft_p99_ms:
        raise InvalidArgument(f"{field}.slo.ttft_p50_ms: must not exceed slo.ttft_p99_ms")
    try:
        pool = HardwarePoolSpec(**_given(spec.hardware_pool, *HardwarePoolSpec.model_fields))
    except ValidationError as err:
        raise _one_line(err, f"{field}.hardware_pool", HardwarePoolSpec) from None
    rollout = rollout_overrides(spec.rollout, field=f"{field}.rollout")
    if initial.replica_count > pool.max_replicas:
        raise InvalidArgument(
            f"{field}.initial_engine_config.replicas: {initial.replica_count} exceeds "
            f"hardware_pool.max_replicas {pool.max_replicas}"
        )
    try:
        return EndpointDef(
            name=spec.name,
            tenant=spec.tenant,
            model=spec.model,
            slo=slo,
            hardware_pool=pool,
            initial_engine=initial,
            search_policy=_POLICY_FROM_WIRE[spec.search_policy],
            objective=_OBJECTIVE_FROM_WIRE[spec.objective],
            alert_routes=tuple(routes),
            rollout=rollout,
            **_given(spec, "correctness_agreement_threshold"),
        )
    except ValidationError as err:
        raise _one_line(err, field, EndpointDef) from None


def rollout_overrides(policy: endpoint_pb2.RolloutPolicy, *, field: str) -> RolloutOverrides:
    """An endpoint's wire RolloutPolicy as overrides of the deployer's defaults: 0, empty and unset
    fields are None (an `optional` field set to 0 is 0); `failure_limit` N is N - 1 failures
    tolerated. Errors name the wire's field under `field` (`spec.rollout.p_value: must be in
    (0, 1), got 1.5`)."""
    values: dict[str, Any] = {}
    for leaf in policy.DESCRIPTOR.fields:
        value = getattr(policy, leaf.name)
        if not (policy.HasField(leaf.name) if leaf.has_presence else value):
            continue
        name = _ROLLOUT_DOMAIN_NAME.get(leaf.name, leaf.name)
        is_list = leaf.is_repeated
        values[name] = tuple(value) if is_list else value - _ROLLOUT_WIRE_OFFSET.get(name, 0)
    try:
        return RolloutOverrides(**values)
    except ValidationError as err:
        first = err.errors()[0]
        name = str(first["loc"][0])
        leaf = policy.DESCRIPTOR.fields_by_name[_ROLLOUT_WIRE_NAME.get(name, name)]
        offset = _ROLLOUT_WIRE_OFFSET.get(name, 0)
        note = "" if leaf.has_presence else " (0 = the deployer's default)"
        reason = pydantic_reason(first, RolloutOverrides, offset=offset, note=note)
        raise InvalidArgument(f"{field}.{leaf.name}: {reason}") from None


def rollout_policy_proto(rollout: RolloutOverrides) -> endpoint_pb2.RolloutPolicy:
    """The wire form of an endpoint's rollout overrides (unset where the deployer decides)."""
    out = endpoint_pb2.RolloutPolicy()
    for name, value in rollout.set_fields().items():
        leaf = _ROLLOUT_WIRE_NAME.get(name, name)
        if isinstance(value, tuple):
            getattr(out, leaf).extend(value)
        else:
            setattr(out, leaf, value + _ROLLOUT_WIRE_OFFSET.get(name, 0))
    return out


def _alert_route(route: endpoint_pb2.AlertRoute, field: str) -> AlertRouteSpec:
    if not route.name:
        raise InvalidArgument(f"{field}.name: required")
    kind = ALERT_KIND_OF_WIRE.get(route.kind)
    if kind is None:
        raise InvalidArgument(
            f"{field}.kind: required (ALERT_ROUTE_KIND_WEBHOOK, _LOG, _ALERTMANAGER or _PAGERDUTY)"
        )
    web_url = route.url.startswith(("http://", "https://")) and len(route.url) <= 2048
    if kind in ("webhook", "alertmanager") and not web_url:
        article = "an" if kind == "alertmanager" else "a"
        raise InvalidArgument(f"{field}.url: {article} {kind} route needs an http:// or https:// URL")
    if kind == "log" and route.url:
        raise InvalidArgument(f"{field}.url: must be empty for a log route")
    if kind == "pagerduty":
        if not route.routing_key:
            raise InvalidArgument(f"{field}.routing_key: required for a pagerduty route")
        if route.url and not web_url:
            raise InvalidArgument(f"{field}.url: empty (PagerDuty's own) or an http:// or https:// URL")
    elif route.routing_key:
        raise InvalidArgument(f"{field}.routing_key: for pagerduty routes only")
    if route.min_severity not in _SEVERITIES:
        raise InvalidArgument(f"{field}.min_severity: unknown value {route.min_severity}")
    try:
        return AlertRouteSpec(
            name=route.name,
            kind=kind,
            url=route.url,
            routing_key=route.routing_key,
            event_kinds=tuple(route.event_kinds),
            **_given(route, "min_severity"),
        )
    except ValidationError as err:
        raise _one_line(err, field, AlertRouteSpec) from None


def check_models(spec: EndpointDef, roots: ModelRoots | None, *, field: str = "spec") -> None:
    """`InvalidArgument` when the endpoint's model (or its first engine's, or a speculative
    draft's) lies outside the folders its tenant may serve (`model_roots.py`); no rule: nothing."""
    if roots is None:
        return
    refusal = roots.refusal(spec.model, tenant=spec.tenant)
    if refusal:
        raise InvalidArgument(f"{field}.model: {refusal}")
    check_engine_models(
        spec.initial_engine, roots, tenant=spec.tenant, field=f"{field}.initial_engine_config"
    )


def check_engine_models(engine: EngineSpec, roots: ModelRoots | None, *, tenant: str, field: str) -> None:
    """`InvalidArgument` naming the engine config's model or draft model outside `tenant`'s folders."""
    if roots is None:
        return
    for name, model in (("model", engine.model), ("speculative.draft_model", _draft(engine))):
        refusal = roots.refusal(model, tenant=tenant) if model else ""
        if refusal:
            raise InvalidArgument(f"{field}.{name}: {refusal}")


def _draft(engine: EngineSpec) -> str:
    return engine.speculative.draft_model or "" if engine.speculative is not None else ""


def check_alert_targets(spec: EndpointDef, outbound: OutboundPolicy, *, field: str = "spec") -> None:
    """`InvalidArgument` naming the first alert route whose URL points where alerts may not go
    (an internal address the operator did not allow: `evertune.infra.outbound`)."""
    for i, route in enumerate(spec.alert_routes):
        refusal = outbound.refusal(route.url) if route.url else ""
        if refusal:
            raise InvalidArgument(f"{field}.alert_routes[{i}].url: {refusal}")


def endpoint_spec_proto(spec: EndpointDef) -> endpoint_pb2.EndpointSpec:
    """The wire form of a validated spec (what the deployer stores and answers)."""
    return endpoint_pb2.EndpointSpec(
        name=spec.name,
        tenant=spec.tenant,
        model=spec.model,
        slo=endpoint_pb2.Slo(
            ttft_p50_ms=spec.slo.ttft_p50_ms,
            ttft_p99_ms=spec.slo.ttft_p99_ms,
            itl_p99_ms=spec.slo.itl_p99_ms,
            attainment_target=spec.slo.attainment_target,
        ),
        hardware_pool=endpoint_pb2.HardwarePool(
            hardware_class=spec.hardware_pool.hardware_class, max_replicas=spec.hardware_pool.max_replicas
        ),
        initial_engine_config=spec.initial_engine.to_proto(),
        search_policy=_POLICY_TO_WIRE[spec.search_policy],  # type: ignore[arg-type]
        objective=_OBJECTIVE_TO_WIRE[spec.objective],  # type: ignore[arg-type]
        alert_routes=[
            endpoint_pb2.AlertRoute(
                name=r.name,
                kind=ALERT_KIND_TO_WIRE[r.kind],  # type: ignore[arg-type]
                url=r.url,
                routing_key=r.routing_key,
                min_severity=r.min_severity,  # type: ignore[arg-type]
                event_kinds=list(r.event_kinds),
            )
            for r in spec.alert_routes
        ],
        correctness_agreement_threshold=spec.correctness_agreement_threshold,
        rollout=None if spec.rollout.empty else rollout_policy_proto(spec.rollout),
    )


# --------------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------------


def create_command(
    request: endpoint_service_pb2.CreateEndpointRequest, *, caller_tenant: str
) -> CreateCommand:
    """CreateEndpoint: request_id and spec checked; an empty spec.tenant takes the caller's tenant.

    A spec naming another tenant than a scoped caller's is left for the API to refuse (the
    caller's scope is not a validation matter).
    """
    rid = request_id(request.request_id)
    if not request.HasField("spec"):
        raise InvalidArgument("spec: required")
    wire = endpoint_pb2.EndpointSpec()
    wire.CopyFrom(request.spec)
    if not wire.tenant:
        wire.tenant = caller_tenant
    spec = endpoint_def(wire)
    return CreateCommand(request_id=rid, spec=spec, fingerprint=_fingerprint(endpoint_spec_proto(spec)))


def _normalize_paths(paths: list[str]) -> tuple[str, ...]:
    if not paths:
        raise InvalidArgument("update_mask: required (e.g. paths: ['slo'])")
    out: list[str] = []
    for path in paths:
        clean = path.strip()
        if clean.startswith("spec."):
            clean = clean.removeprefix("spec.")
        if clean in IMMUTABLE_PATHS:
            raise InvalidArgument(
                f"update_mask: {path!r} cannot change after creation (engine changes go through Promote)"
            )
        if clean not in MUTABLE_PATHS:
            allowed = ", ".join(sorted(MUTABLE_PATHS))
            raise InvalidArgument(f"update_mask: unknown path {path!r}; one of: {allowed}")
        if clean not in out:
            out.append(clean)
    return tuple(out)


def _copy_path(to: Message, source: Message, path: str) -> None:
    """Set the field at dotted `path` of `to` as it is in `source` (unset there: unset here)."""
    *parents, leaf = path.split(".")
    for part in parents:
        to, source = getattr(to, part), getattr(source, part)
    field = source.DESCRIPTOR.fields_by_name[leaf]
    to.ClearField(leaf)
    if field.is_repeated:
        getattr(to, leaf).extend(getattr(source, leaf))
    elif field.message_type is not None:
        getattr(to, leaf).CopyFrom(getattr(source, leaf))
    elif not field.has_presence or source.HasField(leaf):
        setattr(to, leaf, getattr(source, leaf))


def update_command(
    request: endpoint_service_pb2.UpdateEndpointRequest, *, current: endpoint_pb2.EndpointSpec
) -> UpdateCommand:
    """UpdateEndpoint: the masked fields of request.spec applied to `current`, then all validated."""
    name = endpoint_name(request.name, "name")
    paths = _normalize_paths(list(request.update_mask.paths))
    revision = expected_revision(request.expected_revision)
    merged = endpoint_pb2.EndpointSpec()
    merged.CopyFrom(current)
    for path in paths:
        _copy_path(merged, request.spec, path)
    spec = endpoint_def(merged)
    return UpdateCommand(
        name=name, spec=spec, changed_fields=paths, expected_revision=revision, request=request
    )


def page(size: int, token: str, *, field: str = "page_token") -> Page:
    """A page request: size 0 = DEFAULT_PAGE, at most MAX_PAGE; the token is one this API gave."""
    if size > MAX_PAGE:
        raise InvalidArgument(f"page_size: at most {MAX_PAGE}")
    after = ""
    if token:
        try:
            decoded = base64.urlsafe_b64decode(token.encode() + b"=" * (-len(token) % 4)).decode()
        except (ValueError, UnicodeDecodeError):
            raise InvalidArgument(f"{field}: not a page token from this API") from None
        if not decoded.startswith("after:"):
            raise InvalidArgument(f"{field}: not a page token from this API")
        after = decoded.removeprefix("after:")
    return Page(size=size or DEFAULT_PAGE, after=after)


def page_token(last_key: str) -> str:
    """The token of the page that starts after `last_key`."""
    return base64.urlsafe_b64encode(f"after:{last_key}".encode()).decode().rstrip("=")


def promote_command(request: endpoint_service_pb2.PromoteRequest, *, default_model: str) -> PromoteCommand:
    """Promote: endpoint, request_id, one source (engine_config or trial_id), reason."""
    name = endpoint_name(request.endpoint, "endpoint")
    rid = request_id(request.request_id)
    reason = reason_line(request.reason)
    source = request.WhichOneof("source")
    engine: EngineSpec | None = None
    trial_id = ""
    if source == "engine_config":
        engine = engine_spec(request.engine_config, default_model=default_model, field="engine_config")
    elif source == "trial_id":
        trial_id = request.trial_id
        if not trial_id or len(trial_id) > MAX_ID or any(c.isspace() for c in trial_id):
            raise InvalidArgument(f"trial_id: must be 1-{MAX_ID} characters without spaces")
    else:
        raise InvalidArgument("source: one of engine_config or trial_id is required")
    normalized = endpoint_service_pb2.PromoteRequest(
        endpoint=name, skip_canary=request.skip_canary, reason=reason
    )
    if engine is not None:
        normalized.engine_config.CopyFrom(engine.to_proto())
    else:
        normalized.trial_id = trial_id
    return PromoteCommand(
        endpoint=name,
        request_id=rid,
        engine=engine,
        trial_id=trial_id,
        skip_canary=request.skip_canary,
        reason=reason,
        fingerprint=_fingerprint(normalized),
    )


def rollback_command(request: endpoint_service_pb2.RollbackRequest) -> RollbackCommand:
    """Rollback: endpoint, request_id, an optional deployment id, reason."""
    name = endpoint_name(request.endpoint, "endpoint")
    rid = request_id(request.request_id)
    reason = reason_line(request.reason)
    target = request.to_deployment_id
    if target and not DEPLOYMENT_ID_RE.match(target):
        raise InvalidArgument(f"to_deployment_id: {target[:80]!r} is not a deployment id (dep-<12 hex>)")
    data = f"rollback\0{name}\0{target}\0{reason}".encode()
    return RollbackCommand(
        endpoint=name, request_id=rid, to_deployment_id=target, reason=reason, fingerprint=_fingerprint(data)
    )


def watch_filter(request: endpoint_service_pb2.WatchEventsRequest) -> WatchFilter:
    """WatchEvents: an optional endpoint, known kinds, a known severity, an optional start time."""
    if request.endpoint:
        endpoint_name(request.endpoint, "endpoint")
    unknown = [k for k in request.kinds if k not in EVENT_KINDS]
    if unknown:
        known = ", ".join(sorted(EVENT_KINDS))
        raise InvalidArgument(f"kinds: unknown event kind {unknown[0]!r}; one of: {known}")
    if request.min_severity not in _SEVERITIES:
        raise InvalidArgument(f"min_severity: unknown value {request.min_severity}")
    since = None
    if request.HasField("since"):
        if request.since.seconds < 0:
            raise InvalidArgument("since: must be after 1970-01-01")
        try:
            since = request.since.ToDatetime(tzinfo=UTC)
        except ValueError:  # nanos outside 0-999999999, or seconds past 9999-12-31
            raise InvalidArgument("since: not a valid timestamp") from None
    return WatchFilter(
        endpoint=request.endpoint,
        kinds=frozenset(request.kinds),
        min_severity=request.min_severity,
        since=since,
    )
