"""The deployer's state in NATS KV, written with compare-and-set, and the events every change emits.

Layout (values are the protobufs, serialized):

| bucket | key | value |
|---|---|---|
| `endpoints` | `<endpoint>` | `Endpoint`; `Endpoint.revision` counts its changes (1, 2, ...) |
| `deployments` | `<endpoint>.<deployment id>` | `Deployment` |
| `deployments` | `<endpoint>._rollout` | id of the deployment whose rollout holds the endpoint (a mutex) |
| `routes` | `<endpoint>` | `RouteTable` (the gateway watches this bucket) |
| `requests` | sha256(tenant, rpc, request_id) | JSON `RequestRecord` (idempotency; TTL 48 h) |

Every write is a compare-and-set on the KV revision read just before; a conflict re-reads and
re-applies the change (the change functions are pure), so two deployers writing the same endpoint
never lose an update. Every bucket, `requests` with its TTL included, is declared from
infra/nats/jetstream.toml by the host.

The rollout mutex's value is a JSON `RolloutRecord`: the rollout's progress (policy, step, weight,
windows, failures), so a deployer that restarts carries the rollout on where it was.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

from google.protobuf.message import DecodeError, Message
from nats.js import JetStreamContext

from evertune.deployer.stats import DeployerStats
from evertune.errors import AlreadyExists, ConflictError, FailedPrecondition, NotFound
from evertune.infra.bus import Bucket, publish_event
from evertune.infra.events import EventKind, EventPayload, new_event
from evertune.infra.logging import get_logger
from evertune.v1 import common_pb2, endpoint_pb2, events_pb2

log = get_logger("evertune.deployer.state")

ENDPOINTS: Final = "endpoints"
DEPLOYMENTS: Final = "deployments"
ROUTES: Final = "routes"
REQUESTS: Final = "requests"
#: Key suffix of an endpoint's rollout mutex in the deployments bucket.
ROLLOUT_KEY: Final = "_rollout"
#: Attempts of one compare-and-set change before giving up.
CAS_ATTEMPTS: Final = 20

M = TypeVar("M", bound=Message)
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class RequestRecord:
    """What a request id was first used for."""

    rpc: str  #: "create", "promote" or "rollback"
    fingerprint: str  #: sha256 of the normalized request
    endpoint: str  #: endpoint concerned
    deployment_id: str  #: the deployment the first call made (or restored)
    endpoint_uid: str = ""  #: the endpoint id a create gave (a retry finishes the same endpoint)


@dataclass(frozen=True)
class RolloutRecord:
    """A rollout in progress: the value of the endpoint's rollout mutex, updated at every step."""

    deployment_id: str  #: the deployment rolling out (the canary)
    skip_canary: bool = False  #: move all traffic at once when ready (Promote.skip_canary, Rollback)
    trigger: int = 0  #: DeployTrigger of its deploy.started (API, SEARCH, ...)
    replaced_final: int = endpoint_pb2.DEPLOYMENT_STATE_RETIRED  #: the replaced deployment's final state
    policy: dict[str, Any] = field(default_factory=dict)  #: RolloutPolicy as JSON (fixed at start)
    stable_id: str = ""  #: the stable deployment the canary is compared with
    step: int = -1  #: canary step index now (-1: not taking traffic yet)
    weight: int = 0  #: canary weight now, basis points
    started_s: float = 0.0  #: unix time the canary first took traffic (the stable arm's window)
    step_started_s: float = 0.0  #: unix time the current step's weight was set (the canary's window)
    failures: int = 0  #: failed analyses so far
    breach_id: str = ""  #: an sla.breach recorded by a deployer that does not run this rollout
    breach_cause_id: str = ""  #: that sla.breach event's id (the cause of the roll back it brings)
    #: what began the rollout, the cause id of each of its deploy.* events: the search.completed
    #: event's id for a search winner, the request id of a Promote, Rollback or CreateEndpoint
    cause_id: str = ""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> RolloutRecord:
        """The record; a plain deployment id (an older deployer's mutex) reads as a bare record."""
        text = data.decode()
        if not text.startswith("{"):
            return cls(deployment_id=text)
        raw = json.loads(text)
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in raw.items() if k in known})


def request_key(*, tenant: str, rpc: str, request_id: str) -> str:
    """KV key of a request id (hashed: a client's id need not be a valid NATS token)."""
    return hashlib.sha256(f"{tenant}\0{rpc}\0{request_id}".encode()).hexdigest()


def _decode(cls: type[M], data: bytes) -> M:
    message = cls()
    message.ParseFromString(data)
    return message


class State:
    """Endpoints, deployments, route tables and request ids in KV; events on the EVENTS stream."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        endpoints: Bucket,
        deployments: Bucket,
        routes: Bucket,
        requests: Bucket,
        source: str = "deployer",
        clock: Clock = utc_now,
    ) -> None:
        self.js = js
        self.endpoints = endpoints
        self.deployments = deployments
        self.routes = routes
        self.requests = requests
        self.source = source
        self.clock = clock
        self.stats = DeployerStats()  #: what the deployer counts (the metrics export it)

    @classmethod
    async def open(cls, js: JetStreamContext, *, clock: Clock = utc_now) -> State:
        """Open the buckets (declared by the host from infra/nats/jetstream.toml)."""
        return cls(
            js,
            endpoints=await Bucket.open(js, ENDPOINTS),
            deployments=await Bucket.open(js, DEPLOYMENTS),
            routes=await Bucket.open(js, ROUTES),
            requests=await Bucket.open(js, REQUESTS),
            clock=clock,
        )

    # -- generic compare-and-set ----------------------------------------------------------------

    async def _change(
        self, bucket: Bucket, key: str, cls: type[M], change: Callable[[M], M | None]
    ) -> tuple[M, M]:
        """Read `key`, apply `change` (None = leave it), write back with compare-and-set; retried
        on conflict. Returns (before, after). NotFound when the key is missing."""
        for _ in range(CAS_ATTEMPTS):
            entry = await bucket.get(key)
            if entry is None:
                raise NotFound(f"{bucket.name}/{key} not found")
            before = _decode(cls, entry.value)
            work = cls()
            work.CopyFrom(before)
            after = change(work)
            if after is None:
                return before, before
            try:
                await bucket.update(key, after.SerializeToString(), revision=entry.revision)
            except ConflictError:
                continue
            return before, after
        raise ConflictError(f"{bucket.name}/{key}: gave up after {CAS_ATTEMPTS} conflicting writes")

    # -- endpoints ------------------------------------------------------------------------------

    async def get_endpoint(self, name: str) -> endpoint_pb2.Endpoint | None:
        entry = await self.endpoints.get(name)
        return _decode(endpoint_pb2.Endpoint, entry.value) if entry else None

    async def list_endpoints(self) -> list[endpoint_pb2.Endpoint]:
        """Every endpoint, by name. An entry that is not an Endpoint (written by something else) is
        skipped with a warning: one bad key must not stop listing or a deployer's resume."""
        out = []
        for key in await self.endpoints.keys():
            try:
                endpoint = await self.get_endpoint(key)
            except DecodeError:
                log.warning("endpoints bucket entry is not an Endpoint; skipped", key=key)
                continue
            if endpoint is not None:
                out.append(endpoint)
        return out

    async def create_endpoint(self, endpoint: endpoint_pb2.Endpoint) -> None:
        """Store a new endpoint (AlreadyExists when the name is taken)."""
        try:
            await self.endpoints.create(endpoint.spec.name, endpoint.SerializeToString())
        except AlreadyExists:
            raise AlreadyExists(f"endpoint {endpoint.spec.name} already exists") from None

    async def change_endpoint(
        self,
        name: str,
        change: Callable[[endpoint_pb2.Endpoint], endpoint_pb2.Endpoint | None],
        *,
        expected_revision: int = 0,
    ) -> tuple[endpoint_pb2.Endpoint, endpoint_pb2.Endpoint]:
        """Compare-and-set change of an endpoint; revision +1 and update_time set on a change.

        `expected_revision` (non-zero) must equal the stored revision, else FailedPrecondition.
        """

        def apply(endpoint: endpoint_pb2.Endpoint) -> endpoint_pb2.Endpoint | None:
            if expected_revision and endpoint.revision != expected_revision:
                raise FailedPrecondition(
                    f"endpoint {name} is at revision {endpoint.revision}, not expected_revision "
                    f"{expected_revision}; read it again"
                )
            before = endpoint.SerializeToString(deterministic=True)
            stored_revision = endpoint.revision
            changed = change(endpoint)
            if changed is None or changed.SerializeToString(deterministic=True) == before:
                return None
            changed.revision = stored_revision + 1
            changed.update_time.FromDatetime(self.clock())
            return changed

        try:
            return await self._change(self.endpoints, name, endpoint_pb2.Endpoint, apply)
        except NotFound:
            raise NotFound(f"endpoint {name} not found") from None

    async def delete_endpoint(self, name: str) -> None:
        try:
            await self.endpoints.delete(name)
        except NotFound:
            pass

    # -- deployments ----------------------------------------------------------------------------

    async def get_deployment(self, endpoint: str, deployment_id: str) -> endpoint_pb2.Deployment | None:
        entry = await self.deployments.get(f"{endpoint}.{deployment_id}")
        return _decode(endpoint_pb2.Deployment, entry.value) if entry else None

    async def list_deployments(self, endpoint: str) -> list[endpoint_pb2.Deployment]:
        """An endpoint's deployments, newest first (then by id)."""
        prefix = f"{endpoint}.dep-"
        out = []
        for key in await self.deployments.keys():
            if key.startswith(prefix):
                entry = await self.deployments.get(key)
                if entry is None:
                    continue
                try:
                    out.append(_decode(endpoint_pb2.Deployment, entry.value))
                except DecodeError:
                    log.warning("deployments bucket entry is not a Deployment; skipped", key=key)
        out.sort(key=lambda d: (d.create_time.ToNanoseconds(), d.id), reverse=True)
        return out

    async def create_deployment(self, deployment: endpoint_pb2.Deployment) -> None:
        await self.deployments.create(
            f"{deployment.endpoint}.{deployment.id}", deployment.SerializeToString()
        )

    async def change_deployment(
        self,
        endpoint: str,
        deployment_id: str,
        change: Callable[[endpoint_pb2.Deployment], endpoint_pb2.Deployment | None],
    ) -> endpoint_pb2.Deployment:
        """Compare-and-set change of a deployment (update_time set); returns it as stored."""

        def apply(deployment: endpoint_pb2.Deployment) -> endpoint_pb2.Deployment | None:
            before = deployment.SerializeToString(deterministic=True)
            changed = change(deployment)
            if changed is None or changed.SerializeToString(deterministic=True) == before:
                return None
            changed.update_time.FromDatetime(self.clock())
            return changed

        try:
            _, after = await self._change(
                self.deployments, f"{endpoint}.{deployment_id}", endpoint_pb2.Deployment, apply
            )
        except NotFound:
            raise NotFound(f"deployment {deployment_id} of endpoint {endpoint} not found") from None
        return after

    async def delete_deployment(self, endpoint: str, deployment_id: str) -> None:
        try:
            await self.deployments.delete(f"{endpoint}.{deployment_id}")
        except NotFound:
            pass

    # -- the rollout mutex ----------------------------------------------------------------------

    async def begin_rollout(
        self, endpoint: str, deployment_id: str, record: RolloutRecord | None = None
    ) -> None:
        """Take the endpoint's rollout mutex for `deployment_id` (idempotent for the same id: the
        stored record stays); FailedPrecondition when another deployment holds it."""
        key = f"{endpoint}.{ROLLOUT_KEY}"
        value = (record or RolloutRecord(deployment_id=deployment_id)).to_json()
        try:
            await self.deployments.create(key, value)
        except AlreadyExists:
            holder = await self.rollout_holder(endpoint)
            if holder == deployment_id:
                return
            if holder is None:  # released in between: try once more
                await self.deployments.create(key, value)
                return
            raise FailedPrecondition(
                f"endpoint {endpoint} has a rollout in progress (deployment {holder}); "
                "wait for it or call Rollback"
            ) from None

    async def get_rollout(self, endpoint: str) -> RolloutRecord | None:
        """The rollout holding the endpoint, if any."""
        entry = await self.deployments.get(f"{endpoint}.{ROLLOUT_KEY}")
        return RolloutRecord.from_json(entry.value) if entry else None

    async def rollout_holder(self, endpoint: str) -> str | None:
        record = await self.get_rollout(endpoint)
        return record.deployment_id if record else None

    async def change_rollout(self, endpoint: str, deployment_id: str, **changes: Any) -> RolloutRecord | None:
        """Set fields of the rollout record of `deployment_id` (compare-and-set); None when that
        deployment no longer holds the mutex."""
        key = f"{endpoint}.{ROLLOUT_KEY}"
        for _ in range(CAS_ATTEMPTS):
            entry = await self.deployments.get(key)
            if entry is None:
                return None
            record = RolloutRecord.from_json(entry.value)
            if record.deployment_id != deployment_id:
                return None
            new = replace(record, **changes)
            try:
                await self.deployments.update(key, new.to_json(), revision=entry.revision)
            except ConflictError:
                continue
            return new
        raise ConflictError(f"{DEPLOYMENTS}/{key}: gave up after {CAS_ATTEMPTS} conflicting writes")

    async def end_rollout(self, endpoint: str, deployment_id: str) -> None:
        """Release the mutex if `deployment_id` holds it."""
        key = f"{endpoint}.{ROLLOUT_KEY}"
        entry = await self.deployments.get(key)
        if entry is None or RolloutRecord.from_json(entry.value).deployment_id != deployment_id:
            return
        try:
            await self.deployments.delete(key, revision=entry.revision)
        except (NotFound, ConflictError):
            pass

    # -- routes -------------------------------------------------------------------------------

    async def get_routes(self, endpoint: str) -> endpoint_pb2.RouteTable | None:
        entry = await self.routes.get(endpoint)
        return _decode(endpoint_pb2.RouteTable, entry.value) if entry else None

    async def change_routes(
        self, endpoint: str, change: Callable[[endpoint_pb2.RouteTable], endpoint_pb2.RouteTable]
    ) -> endpoint_pb2.RouteTable:
        """Compare-and-set change of a route table (created when missing); revision +1."""
        for _ in range(CAS_ATTEMPTS):
            entry = await self.routes.get(endpoint)
            current = (
                _decode(endpoint_pb2.RouteTable, entry.value)
                if entry
                else endpoint_pb2.RouteTable(endpoint=endpoint)
            )
            new = change(current)
            new.endpoint = endpoint
            new.revision = current.revision + 1
            new.update_time.FromDatetime(self.clock())
            try:
                if entry is None:
                    await self.routes.create(endpoint, new.SerializeToString())
                else:
                    await self.routes.update(endpoint, new.SerializeToString(), revision=entry.revision)
            except (ConflictError, AlreadyExists):
                continue
            return new
        raise ConflictError(f"routes/{endpoint}: gave up after {CAS_ATTEMPTS} conflicting writes")

    async def delete_routes(self, endpoint: str) -> None:
        try:
            await self.routes.delete(endpoint)
        except NotFound:
            pass

    # -- request ids ----------------------------------------------------------------------------

    async def claim_request(self, key: str, record: RequestRecord) -> RequestRecord | None:
        """Store `record` under `key` unless a record is there; returns the earlier record, or
        None when this call is the first."""
        try:
            await self.requests.create(key, json.dumps(asdict(record)).encode())
        except AlreadyExists:
            entry = await self.requests.get(key)
            if entry is None:  # expired in between
                return await self.claim_request(key, record)
            return RequestRecord(**json.loads(entry.value))
        return None

    # -- events -------------------------------------------------------------------------------

    async def emit(
        self,
        kind: EventKind,
        endpoint: str,
        payload: EventPayload,
        *,
        severity: common_pb2.Severity | None = None,
        cause_id: str = "",
        endpoint_uid: str | None = None,
    ) -> events_pb2.Event:
        """Publish one event (Nats-Msg-Id = its id). A failed publish is logged, not raised: the
        state change it reports is already stored. The event carries the endpoint's id:
        `endpoint_uid`, else the stored endpoint's (none once it is gone)."""
        if endpoint_uid is None:
            stored = await self.get_endpoint(endpoint) if endpoint else None
            endpoint_uid = stored.uid if stored is not None else ""
        event = new_event(
            kind,
            endpoint=endpoint,
            source=self.source,
            payload_message=payload,
            severity=severity,
            cause_id=cause_id,
            endpoint_uid=endpoint_uid,
        )
        try:
            await publish_event(self.js, event)
        except Exception as err:  # the bus reconnects; the KV change stands
            self.stats.emitted(event, published=False)
            log.warning(
                "event not published", kind=kind.value, endpoint=endpoint, error=str(err) or repr(err)
            )
        else:
            self.stats.emitted(event, published=True)
        return event
