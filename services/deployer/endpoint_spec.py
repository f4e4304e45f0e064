"""An endpoint's spec in its domain form (pure): `EndpointDef` and its parts, validated by pydantic,
defaults filled in. `validation.py` converts the wire's `EndpointSpec` to and from it."""

from __future__ import annotations

import re
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evertune.deployer.rollout_policy import RolloutOverrides
from evertune.domain.engines import EngineSpec
from evertune.domain.gate_result import DEFAULT_AGREEMENT
from evertune.domain.slo import DEFAULT_ATTAINMENT
from evertune.infra.events import EventKind
from evertune.v1 import common_pb2

#: Alert route names, unique within an endpoint.
ROUTE_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
#: Hardware classes ("cpu", "h200", "sim-h200").
HARDWARE_RE: Final = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
#: Event kinds an alert route may forward.
EVENT_KINDS: Final = frozenset(k.value for k in EventKind)

SearchPolicyName = Literal["auto", "advisory", "off"]
ObjectiveName = Literal["goodput", "p50_ttft", "cost"]
AlertKind = Literal["webhook", "log", "alertmanager", "pagerduty"]


class SloSpec(BaseModel):
    """Latency targets of an endpoint (client-observed, at the gateway)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Target median TTFT, ms (0 = none).
    ttft_p50_ms: float = Field(default=0.0, ge=0, le=3_600_000)
    #: Target p99 TTFT, ms; required.
    ttft_p99_ms: float = Field(gt=0, le=3_600_000)
    #: Target p99 inter-token latency, ms (0 = none).
    itl_p99_ms: float = Field(default=0.0, ge=0, le=3_600_000)
    #: Share of requests that must meet the targets (0 < x < 1).
    attainment_target: float = Field(default=DEFAULT_ATTAINMENT, gt=0, lt=1)


class HardwarePoolSpec(BaseModel):
    """Where an endpoint's deployments run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Hardware class ("cpu", "h200", "sim-h200").
    hardware_class: str
    #: Most replicas one deployment may run.
    max_replicas: int = Field(default=1, ge=1, le=1024)

    @field_validator("hardware_class")
    @classmethod
    def _class(cls, value: str) -> str:
        if not HARDWARE_RE.match(value):
            raise ValueError("must be 1-63 of [a-z0-9-], e.g. 'cpu' or 'h200'")
        return value


class AlertRouteSpec(BaseModel):
    """One alert integration of an endpoint."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Name, unique within the endpoint.
    name: str
    #: "webhook" (POST to url), "log", "alertmanager" (Alertmanager's API at url) or "pagerduty"
    #: (PagerDuty Events v2, at url or PagerDuty's own).
    kind: AlertKind
    #: http(s) URL for webhook and alertmanager routes (optional for pagerduty); empty for log.
    url: str = ""
    #: PagerDuty integration (routing) key; pagerduty routes only.
    routing_key: str = ""
    #: Lowest severity forwarded (a common_pb2.Severity value).
    min_severity: int = common_pb2.SEVERITY_WARNING
    #: Event kinds forwarded (empty = the defaults the sla-monitor documents).
    event_kinds: tuple[str, ...] = ()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not ROUTE_NAME_RE.match(value):
            raise ValueError("must be 1-63 of letters, digits, '_', '.', '-'")
        return value

    @field_validator("event_kinds")
    @classmethod
    def _kinds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [k for k in value if k not in EVENT_KINDS]
        if unknown:
            raise ValueError(f"unknown event kind {unknown[0]!r}")
        return value


class EndpointDef(BaseModel):
    """A validated endpoint spec, defaults filled in (the domain form of `EndpointSpec`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Endpoint name (NAME_RE).
    name: str
    #: Owning tenant (TENANT_RE).
    tenant: str
    #: Model served, as clients name it... and as the engine loads it.
    model: str = Field(min_length=1, max_length=1024)
    #: Latency targets.
    slo: SloSpec
    #: Hardware pool.
    hardware_pool: HardwarePoolSpec
    #: Engine config of the first deployment (engine and model filled in).
    initial_engine: EngineSpec
    #: What the loop may do with search results.
    search_policy: SearchPolicyName = "auto"
    #: What a search of the endpoint optimises.
    objective: ObjectiveName = "goodput"
    #: Alert integrations.
    alert_routes: tuple[AlertRouteSpec, ...] = ()
    #: Agreement a lossy change must reach at the correctness gate (0 < x <= 1).
    correctness_agreement_threshold: float = Field(default=DEFAULT_AGREEMENT, gt=0, le=1)
    #: The endpoint's own rollout settings (None fields: the deployer's defaults).
    rollout: RolloutOverrides = RolloutOverrides()
