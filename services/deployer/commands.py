"""What each EndpointService call asks, validated (`validation.py` makes them): frozen dataclasses
the API hands to `lifecycle.py` and `deployments.py`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from evertune.deployer.endpoint_spec import EndpointDef
from evertune.domain.engines import EngineSpec
from evertune.v1 import endpoint_service_pb2


@dataclass(frozen=True)
class CreateCommand:
    """CreateEndpoint, validated."""

    request_id: str  #: client's idempotency key
    spec: EndpointDef  #: the endpoint to create, tenant and defaults filled in
    fingerprint: str  #: sha256 of the normalized spec: a retry must match it


@dataclass(frozen=True)
class UpdateCommand:
    """UpdateEndpoint, validated against the endpoint's current spec."""

    name: str  #: endpoint name
    spec: EndpointDef  #: the spec after the masked fields were applied to the spec read
    changed_fields: tuple[str, ...]  #: update_mask paths, normalized and deduplicated
    expected_revision: int  #: 0 = any
    request: endpoint_service_pb2.UpdateEndpointRequest  #: re-applied to the spec each CAS attempt reads


@dataclass(frozen=True)
class Page:
    """One page of a list call."""

    size: int  #: most items to return
    after: str  #: return items whose key sorts after this ("" = from the start)


@dataclass(frozen=True)
class PromoteCommand:
    """Promote, validated (the engine config is checked against the endpoint's model)."""

    endpoint: str  #: endpoint name
    request_id: str  #: idempotency key
    engine: EngineSpec | None  #: an explicit config, or None when a trial is named
    trial_id: str  #: the trial whose config to roll out ("" when a config is given)
    skip_canary: bool  #: move all traffic once ready (the interim rollout always does)
    reason: str  #: one line for the record
    fingerprint: str  #: sha256 of the normalized request (without request_id)


@dataclass(frozen=True)
class RollbackCommand:
    """Rollback, validated."""

    endpoint: str  #: endpoint name
    request_id: str  #: idempotency key
    to_deployment_id: str  #: "" = the deployment stable before the latest rollout
    reason: str  #: one line for the record
    fingerprint: str  #: sha256 of the normalized request (without request_id)


@dataclass(frozen=True)
class WatchFilter:
    """WatchEvents, validated."""

    endpoint: str  #: "" = every endpoint (the caller's tenant's, for a scoped caller)
    kinds: frozenset[str]  #: empty = every kind
    min_severity: int  #: SEVERITY_UNSPECIFIED = every severity
    since: datetime | None  #: replay stored events from this UTC time; None = new ones only

    def accepts(self, *, kind: str, severity: int) -> bool:
        """Whether an event of this kind and severity passes the kind and severity filters."""
        return (not self.kinds or kind in self.kinds) and severity >= self.min_severity
