"""The deployer's shell: endpoints and deployments through their lifecycle, over State and a backend.

The API calls in here after validation; each call changes KV with compare-and-set, emits its
events, and leaves the slow part (starting engines, draining, deleting) to a background task that
records its progress in KV, so a restarted deployer picks it up (`resume`).

The rollout is interim: a new deployment starts, waits until ready, then takes 100% of the weight
at once; the replaced deployment drains and stops. The progressive rollout (canary steps with
analysis) replaces `_switch_traffic` and is the only piece that changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any, Final

from evertune.deployer import plan
from evertune.deployer.auth import Principal
from evertune.deployer.backend import EngineReport, ServingBackend, Target
from evertune.deployer.plan import FULL_WEIGHT
from evertune.deployer.state import RequestRecord, State, request_key
from evertune.deployer.trials import find_trial
from evertune.deployer.validation import (
    CreateCommand,
    EndpointDef,
    Page,
    PromoteCommand,
    RollbackCommand,
    UpdateCommand,
    endpoint_spec_proto,
    page_token,
    update_command,
)

from evertune.engines import EngineSpec
from evertune.errors import (
    AlreadyExists,
    EvertuneError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from evertune.events import EventKind
from evertune.logging import bound_ids, get_logger
from evertune.v1 import common_pb2, endpoint_pb2, events_pb2

log = get_logger("evertune.deployer")

D = endpoint_pb2
#: Seconds between in-flight checks while a deployment drains.
DRAIN_POLL_S: Final = 0.5


def new_deployment_id() -> str:
    return f"dep-{uuid.uuid4().hex[:12]}"


class Deployer:
    """Endpoints and deployments. One instance per deployer process."""

    def __init__(
        self,
        *,
        state: State,
        backend: ServingBackend,
        ready_timeout_s: float,
        drain_timeout_s: float,
    ) -> None:
        self.state = state
        self.backend = backend
        self.ready_timeout_s = ready_timeout_s
        self.drain_timeout_s = drain_timeout_s
        self._tasks: dict[str, set[asyncio.Task[None]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._draining: dict[str, asyncio.Task[Any]] = {}  #: deployment id -> its drain task
        self._closing = False

    # -- background work ----------------------------------------------------------------------

    def _spawn(self, endpoint: str, coro: Coroutine[Any, Any, None], *, name: str) -> None:
        if self._closing:
            coro.close()
            return
        task = asyncio.create_task(self._guard(endpoint, coro, name), name=f"deployer:{name}:{endpoint}")
        tasks = self._tasks.setdefault(endpoint, set())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _guard(self, endpoint: str, coro: Coroutine[Any, Any, None], name: str) -> None:
        with bound_ids(endpoint=endpoint):
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.error("background step failed", step=name, error=str(err) or repr(err), exc_info=True)

    def _lock(self, endpoint: str) -> asyncio.Lock:
        return self._locks.setdefault(endpoint, asyncio.Lock())

    async def _cancel_work(self, endpoint: str) -> None:
        current = asyncio.current_task()
        tasks = [t for t in self._tasks.get(endpoint, set()) if t is not current]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def idle(self) -> None:
        """Wait until no background work is left (tests)."""
        while True:
            tasks = [t for ts in self._tasks.values() for t in ts]
            if not tasks:
                return
            await asyncio.wait(tasks)

    async def close(self) -> None:
        """Stop background work (its progress is in KV) and every engine this process runs."""
        self._closing = True
        tasks = [t for ts in self._tasks.values() for t in ts]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.backend.close()

    # -- reads ----------------------------------------------------------------------------------

    async def visible_endpoint(self, name: str, caller: Principal) -> endpoint_pb2.Endpoint:
        """The endpoint, if the caller may see it; NOT_FOUND otherwise (others' look missing)."""
        endpoint = await self.state.get_endpoint(name)
        if endpoint is None or not caller.sees(endpoint.spec.tenant):
            raise NotFound(f"endpoint {name} not found")
        return endpoint

    async def list_endpoints(
        self, caller: Principal, *, tenant: str, page: Page
    ) -> tuple[list[endpoint_pb2.Endpoint], str]:
        """A page of the endpoints the caller sees (of `tenant` when given), by name."""
        out: list[endpoint_pb2.Endpoint] = []
        for endpoint in await self.state.list_endpoints():
            name = endpoint.spec.name
            if name <= page.after or not caller.sees(endpoint.spec.tenant):
                continue
            if tenant and endpoint.spec.tenant != tenant:
                continue
            if len(out) == page.size:
                return out, page_token(out[-1].spec.name)
            out.append(endpoint)
        return out, ""

    async def list_deployments(
        self, name: str, caller: Principal, *, include_stopped: bool, page: Page
    ) -> tuple[list[endpoint_pb2.Deployment], str]:
        """A page of an endpoint's deployments, newest first."""
        await self.visible_endpoint(name, caller)
        deployments = [
            d
            for d in await self.state.list_deployments(name)
            if include_stopped or d.state not in plan.STOPPED_STATES
        ]
        start = 0
        if page.after:
            ids = [d.id for d in deployments]
            start = ids.index(page.after) + 1 if page.after in ids else len(ids)
        chunk = deployments[start : start + page.size]
        more = start + page.size < len(deployments)
        return chunk, page_token(chunk[-1].id) if more and chunk else ""

    # -- create ---------------------------------------------------------------------------------

    async def create_endpoint(
        self, command: CreateCommand, caller: Principal
    ) -> tuple[endpoint_pb2.Endpoint, endpoint_pb2.Deployment]:
        spec = command.spec
        if not caller.sees(spec.tenant):
            raise PermissionDenied(
                f"spec.tenant: this token may only create endpoints of tenant {caller.tenant}"
            )
        key = request_key(tenant=spec.tenant, rpc="create", request_id=command.request_id)
        record = RequestRecord(
            rpc="create",
            fingerprint=command.fingerprint,
            endpoint=spec.name,
            deployment_id=new_deployment_id(),
        )
        target = Target(
            deployment_id=record.deployment_id,
            endpoint=spec.name,
            engine=spec.initial_engine,
            hardware_class=spec.hardware_pool.hardware_class,
        )
        self.backend.check(target)
        earlier = await self.state.claim_request(key, record)
        if earlier is not None:
            if earlier.fingerprint != command.fingerprint or earlier.rpc != "create":
                raise InvalidArgument(
                    "request_id: already used with a different spec; choose a new request_id"
                )
            record = earlier
            endpoint = await self.state.get_endpoint(spec.name)
            deployment = await self.state.get_deployment(spec.name, record.deployment_id)
            if endpoint is not None and deployment is not None:
                return endpoint, deployment
        now = self.state.clock()
        endpoint = endpoint_pb2.Endpoint(
            spec=endpoint_spec_proto(spec), state=D.ENDPOINT_STATE_PROVISIONING, revision=1
        )
        endpoint.create_time.FromDatetime(now)
        endpoint.update_time.FromDatetime(now)
        deployment = self._new_deployment(
            spec.name, record.deployment_id, spec.initial_engine, origin=D.DEPLOYMENT_ORIGIN_INITIAL, now=now
        )
        try:
            await self.state.create_endpoint(endpoint)
        except AlreadyExists:
            if earlier is None or not await self._is_our_half_create(spec, record):
                raise
            stored = await self.state.get_endpoint(spec.name)
            if stored is not None:
                endpoint = stored
        with contextlib.suppress(AlreadyExists):
            await self.state.create_deployment(deployment)
        await self.state.begin_rollout(spec.name, deployment.id)
        await self.state.emit(
            EventKind.ENDPOINT_CREATED, spec.name, events_pb2.EndpointCreated(endpoint=endpoint)
        )
        await self._emit_started(deployment, trigger=events_pb2.DEPLOY_TRIGGER_INITIAL)
        self._spawn(spec.name, self._roll_out(spec.name, deployment.id), name="provision")
        return endpoint, deployment

    async def _is_our_half_create(self, spec: EndpointDef, record: RequestRecord) -> bool:
        """An earlier try of the same request stored the endpoint but not all the rest."""
        stored = await self.state.get_endpoint(spec.name)
        if stored is None or stored.spec != endpoint_spec_proto(spec):
            return False
        initial = [
            d for d in await self.state.list_deployments(spec.name) if d.origin == D.DEPLOYMENT_ORIGIN_INITIAL
        ]
        return all(d.id == record.deployment_id for d in initial)

    def _new_deployment(
        self,
        endpoint: str,
        deployment_id: str,
        engine: EngineSpec,
        *,
        origin: int,
        now: datetime,
        previous: str = "",
        trial_id: str = "",
        search_id: str = "",
        message: str = "",
    ) -> endpoint_pb2.Deployment:
        deployment = endpoint_pb2.Deployment(
            id=deployment_id,
            endpoint=endpoint,
            engine_config=engine.to_proto(),
            state=D.DEPLOYMENT_STATE_PENDING,
            origin=origin,  # type: ignore[arg-type]
            previous_deployment_id=previous,
            origin_trial_id=trial_id,
            origin_search_id=search_id,
            state_message=message,
        )
        deployment.create_time.FromDatetime(now)
        deployment.update_time.FromDatetime(now)
        return deployment

    async def _emit_started(self, deployment: endpoint_pb2.Deployment, *, trigger: int) -> None:
        await self.state.emit(
            EventKind.DEPLOY_STARTED,
            deployment.endpoint,
            events_pb2.DeployStarted(
                deployment_id=deployment.id,
                previous_deployment_id=deployment.previous_deployment_id,
                engine_config=deployment.engine_config,
                trigger=trigger,  # type: ignore[arg-type]
                search_id=deployment.origin_search_id,
                trial_id=deployment.origin_trial_id,
            ),
        )

    # -- update ---------------------------------------------------------------------------------

    async def update_endpoint(self, command: UpdateCommand, caller: Principal) -> endpoint_pb2.Endpoint:
        """Apply the masked fields to the endpoint as stored, with compare-and-set: each attempt
        re-applies them to the spec it read, so a concurrent change of other fields is kept."""
        await self.visible_endpoint(command.name, caller)

        def change(endpoint: endpoint_pb2.Endpoint) -> endpoint_pb2.Endpoint:
            if endpoint.state == D.ENDPOINT_STATE_DELETING:
                raise FailedPrecondition(f"endpoint {command.name} is being deleted")
            merged = update_command(command.request, current=endpoint.spec)
            endpoint.spec.CopyFrom(endpoint_spec_proto(merged.spec))
            return endpoint

        before, after = await self.state.change_endpoint(
            command.name, change, expected_revision=command.expected_revision
        )
        if after.revision != before.revision:
            await self.state.emit(
                EventKind.ENDPOINT_UPDATED,
                command.name,
                events_pb2.EndpointUpdated(
                    endpoint=after,
                    changed_fields=list(command.changed_fields),
                    previous_revision=before.revision,
                ),
            )
        return after

    async def _set_endpoint_state(
        self, name: str, state: int, message: str, *, stable: str | None = None
    ) -> None:
        """Change an endpoint's state (and stable deployment); emits endpoint.updated on a change."""

        def change(endpoint: endpoint_pb2.Endpoint) -> endpoint_pb2.Endpoint | None:
            if endpoint.state == D.ENDPOINT_STATE_DELETING and state != D.ENDPOINT_STATE_DELETING:
                return None
            endpoint.state = state  # type: ignore[assignment]
            endpoint.state_message = message
            if stable is not None:
                endpoint.stable_deployment_id = stable
            return endpoint

        try:
            before, after = await self.state.change_endpoint(name, change)
        except NotFound:
            return
        if after.revision != before.revision:
            await self.state.emit(
                EventKind.ENDPOINT_UPDATED,
                name,
                events_pb2.EndpointUpdated(endpoint=after, previous_revision=before.revision),
                severity=common_pb2.SEVERITY_WARNING
                if state in (D.ENDPOINT_STATE_DEGRADED, D.ENDPOINT_STATE_FAILED)
                else None,
            )

    # -- delete ---------------------------------------------------------------------------------

    async def delete_endpoint(
        self, name: str, caller: Principal, *, expected_revision: int
    ) -> endpoint_pb2.Endpoint:
        await self.visible_endpoint(name, caller)

        def change(endpoint: endpoint_pb2.Endpoint) -> endpoint_pb2.Endpoint | None:
            if endpoint.state == D.ENDPOINT_STATE_DELETING:
                return None
            endpoint.state = D.ENDPOINT_STATE_DELETING
            endpoint.state_message = "draining and stopping deployments"
            return endpoint

        before, after = await self.state.change_endpoint(name, change, expected_revision=expected_revision)
        if after.revision != before.revision:
            await self.state.emit(
                EventKind.ENDPOINT_UPDATED,
                name,
                events_pb2.EndpointUpdated(endpoint=after, previous_revision=before.revision),
            )
        self._spawn(name, self._delete(name), name="delete")
        return after

    async def _delete(self, name: str) -> None:
        """Weights to 0, wait for in-flight requests (drain timeout), stop everything, forget it."""
        await self._cancel_work(name)
        async with self._lock(name):
            deployments = await self.state.list_deployments(name)
            await self._write_routes(name, lambda weights: dict.fromkeys(weights, 0))
            live = [d for d in deployments if d.state in plan.LIVE_STATES]
            await asyncio.gather(*(self._drain(name, d.id, final=D.DEPLOYMENT_STATE_RETIRED) for d in live))
            for deployment in live:
                await self.backend.stop(deployment.id)
            await self.state.delete_routes(name)
            await self.backend.apply_routes(endpoint_pb2.RouteTable(endpoint=name))
            for deployment in deployments:
                await self.state.delete_deployment(name, deployment.id)
            holder = await self.state.rollout_holder(name)
            if holder:
                await self.state.end_rollout(name, holder)
            endpoint = await self.state.get_endpoint(name)
            await self.state.delete_endpoint(name)
            if endpoint is not None:
                await self.state.emit(
                    EventKind.ENDPOINT_DELETED,
                    name,
                    events_pb2.EndpointDeleted(
                        name=name, tenant=endpoint.spec.tenant, revision=endpoint.revision
                    ),
                )
            log.info("endpoint deleted", endpoint=name)
        self._locks.pop(name, None)

    # -- promote ------------------------------------------------------------------------------

    async def promote(self, command: PromoteCommand, caller: Principal) -> endpoint_pb2.Deployment:
        endpoint = await self.visible_endpoint(command.endpoint, caller)
        name = command.endpoint
        key = request_key(tenant=endpoint.spec.tenant, rpc="promote", request_id=command.request_id)
        existing = await self.state.requests.get(key)
        if existing is not None:
            return await self._repeat(key, command.fingerprint, name, rpc="promote")
        self._check_can_roll_out(endpoint)
        search_id = ""
        engine = command.engine
        if engine is None:
            trial = await find_trial(self.state.js, endpoint=name, trial_id=command.trial_id)
            engine = EngineSpec.from_proto(trial.engine_config, default_model=endpoint.spec.model)
            search_id = trial.search_id
        record = RequestRecord(
            rpc="promote", fingerprint=command.fingerprint, endpoint=name, deployment_id=new_deployment_id()
        )
        self.backend.check(
            Target(
                deployment_id=record.deployment_id,
                endpoint=name,
                engine=engine,
                hardware_class=endpoint.spec.hardware_pool.hardware_class,
            )
        )
        if await self.state.claim_request(key, record) is not None:
            return await self._repeat(key, command.fingerprint, name, rpc="promote")
        deployment = self._new_deployment(
            name,
            record.deployment_id,
            engine,
            origin=D.DEPLOYMENT_ORIGIN_PROMOTE,
            now=self.state.clock(),
            previous=endpoint.stable_deployment_id,
            trial_id=command.trial_id,
            search_id=search_id,
            message=command.reason,
        )
        await self.state.begin_rollout(name, deployment.id)
        try:
            await self.state.create_deployment(deployment)
        except BaseException:
            await self.state.end_rollout(name, deployment.id)
            raise
        await self._emit_started(deployment, trigger=events_pb2.DEPLOY_TRIGGER_API)
        self._spawn(name, self._roll_out(name, deployment.id), name="promote")
        return deployment

    def _check_can_roll_out(self, endpoint: endpoint_pb2.Endpoint) -> None:
        name = endpoint.spec.name
        if endpoint.state == D.ENDPOINT_STATE_DELETING:
            raise FailedPrecondition(f"endpoint {name} is being deleted")
        if endpoint.state == D.ENDPOINT_STATE_PROVISIONING:
            raise FailedPrecondition(f"endpoint {name} is still provisioning its first deployment")

    async def _repeat(self, key: str, fingerprint: str, name: str, *, rpc: str) -> endpoint_pb2.Deployment:
        """The answer to a retried Promote/Rollback: the deployment the first call made."""
        entry = await self.state.requests.get(key)
        if entry is None:
            raise FailedPrecondition("request_id: the earlier request expired; retry with a new request_id")
        record = RequestRecord(**json.loads(entry.value))
        if record.fingerprint != fingerprint or record.rpc != rpc:
            raise InvalidArgument(
                "request_id: already used with a different request; choose a new request_id"
            )
        deployment = await self.state.get_deployment(name, record.deployment_id)
        if deployment is None:
            raise NotFound(f"deployment {record.deployment_id} of the earlier request is gone")
        return deployment

    # -- the (interim) rollout -------------------------------------------------------------------

    async def _roll_out(
        self, name: str, deployment_id: str, *, replaced_final: int = D.DEPLOYMENT_STATE_RETIRED
    ) -> None:
        """Start the deployment, wait until ready, move all traffic to it, drain the one it replaces.

        On a failed start the deployment is FAILED and traffic stays where it was.
        """
        with bound_ids(deployment=deployment_id):
            async with self._lock(name):
                endpoint = await self.state.get_endpoint(name)
                deployment = await self.state.get_deployment(name, deployment_id)
                if endpoint is None or deployment is None or deployment.state not in plan.ROLLOUT_STATES:
                    await self.state.end_rollout(name, deployment_id)
                    return
                target = Target(
                    deployment_id=deployment_id,
                    endpoint=name,
                    engine=EngineSpec.from_proto(deployment.engine_config, default_model=endpoint.spec.model),
                    hardware_class=endpoint.spec.hardware_pool.hardware_class,
                )
                await self._set_deployment(name, deployment_id, state=D.DEPLOYMENT_STATE_STARTING)
                try:
                    urls = await self.backend.start(target)
                    await self._set_deployment(name, deployment_id, upstream_url=",".join(urls))
                    await self.backend.wait_ready(deployment_id, self.ready_timeout_s)
                except EvertuneError as err:
                    await self._start_failed(endpoint, deployment, str(err))
                    return
                previous = endpoint.stable_deployment_id
                await self._switch_traffic(name, new=deployment_id, old=previous, urls=urls)
                await self._set_deployment(
                    name, deployment_id, state=D.DEPLOYMENT_STATE_ACTIVE, weight=FULL_WEIGHT
                )
                await self._set_endpoint_state(name, D.ENDPOINT_STATE_READY, "", stable=deployment_id)
                await self.state.end_rollout(name, deployment_id)
                started = deployment.create_time.ToDatetime()
                promoted = events_pb2.DeployPromoted(
                    deployment_id=deployment_id,
                    previous_deployment_id=previous,
                    engine_config=deployment.engine_config,
                )
                promoted.rollout_duration.FromTimedelta(self.state.clock().replace(tzinfo=None) - started)
                await self.state.emit(EventKind.DEPLOY_PROMOTED, name, promoted)
                log.info("deployment serving", endpoint=name, urls=urls)
            if previous:
                self._spawn(name, self._drain(name, previous, final=replaced_final), name="drain")

    async def _switch_traffic(self, name: str, *, new: str, old: str, urls: list[str]) -> None:
        """Interim: all weight to `new` at once; `old` stays listed at weight 0 while it drains."""

        def weights(current: dict[str, int]) -> dict[str, int]:
            return {**dict.fromkeys(current, 0), new: FULL_WEIGHT}

        await self._write_routes(name, weights, new_urls={new: urls})
        if old:
            await self._set_deployment(name, old, state=D.DEPLOYMENT_STATE_DRAINING, weight=0)

    async def _start_failed(
        self, endpoint: endpoint_pb2.Endpoint, deployment: endpoint_pb2.Deployment, why: str
    ) -> None:
        name = endpoint.spec.name
        log.warning("deployment failed to start", endpoint=name, deployment=deployment.id, error=why)
        await self.backend.stop(deployment.id)
        await self._set_deployment(
            name, deployment.id, state=D.DEPLOYMENT_STATE_FAILED, weight=0, message=why
        )
        await self.state.end_rollout(name, deployment.id)
        if not endpoint.stable_deployment_id:
            await self._set_endpoint_state(name, D.ENDPOINT_STATE_FAILED, f"first deployment failed: {why}")
            return
        await self.state.emit(
            EventKind.DEPLOY_ROLLED_BACK,
            name,
            events_pb2.DeployRolledBack(
                deployment_id=deployment.id,
                restored_deployment_id=endpoint.stable_deployment_id,
                trigger=events_pb2.DEPLOY_TRIGGER_FAILURE,
                reason=why[:500],
            ),
        )

    async def _drain(self, name: str, deployment_id: str, *, final: int) -> None:
        """Weight 0, wait until nothing is in flight (or the drain timeout), stop, set `final`."""
        deployment = await self.state.get_deployment(name, deployment_id)
        if deployment is None or deployment.state in plan.STOPPED_STATES:
            return
        task = asyncio.current_task()
        if task is not None:
            self._draining[deployment_id] = task
            task.add_done_callback(lambda _: self._draining.pop(deployment_id, None))
        await self._set_deployment(name, deployment_id, state=D.DEPLOYMENT_STATE_DRAINING, weight=0)
        await self._write_routes(name, lambda w: {**w, deployment_id: 0} if deployment_id in w else w)
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            in_flight = await self.backend.in_flight(deployment_id)
            if plan.drained(in_flight, waited_s=loop.time() - started, timeout_s=self.drain_timeout_s):
                break
            await asyncio.sleep(DRAIN_POLL_S)
        await self.backend.stop(deployment_id)
        await self._write_routes(name, _without(deployment_id))
        await self._set_deployment(name, deployment_id, state=final, weight=0, upstream_url="")
        log.info("deployment drained and stopped", endpoint=name, deployment=deployment_id)

    # -- rollback -----------------------------------------------------------------------------

    async def rollback(self, command: RollbackCommand, caller: Principal) -> endpoint_pb2.Deployment:
        endpoint = await self.visible_endpoint(command.endpoint, caller)
        name = command.endpoint
        if endpoint.state == D.ENDPOINT_STATE_DELETING:
            raise FailedPrecondition(f"endpoint {name} is being deleted")
        key = request_key(tenant=endpoint.spec.tenant, rpc="rollback", request_id=command.request_id)
        if await self.state.requests.get(key) is not None:
            return await self._repeat(key, command.fingerprint, name, rpc="rollback")
        deployments = await self.state.list_deployments(name)
        decision = plan.plan_rollback(
            stable_id=endpoint.stable_deployment_id,
            deployments=deployments,
            to_deployment_id=command.to_deployment_id,
        )
        restore = decision.restore
        restart = decision.restart
        if not restart:  # a draining target: stop its drain, and restart it if it got stopped
            drain = self._draining.get(restore.id)
            if drain is not None:
                drain.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await drain
            restart = restore.id not in self.backend.running()
        result_id = new_deployment_id() if restart else restore.id
        record = RequestRecord(
            rpc="rollback", fingerprint=command.fingerprint, endpoint=name, deployment_id=result_id
        )
        if await self.state.claim_request(key, record) is not None:
            return await self._repeat(key, command.fingerprint, name, rpc="rollback")
        # Abort a rollout in progress: its deployment leaves service at once.
        in_progress = plan.rollout_in_progress(deployments)
        if in_progress is not None:
            await self._cancel_work(name)
            await self.backend.stop(in_progress.id)
            await self._write_routes(name, _without(in_progress.id))
            await self._set_deployment(
                name, in_progress.id, state=D.DEPLOYMENT_STATE_ROLLED_BACK, weight=0, message=command.reason
            )
            await self.state.end_rollout(name, in_progress.id)
            if restore.id == endpoint.stable_deployment_id:
                await self._emit_rolled_back(name, in_progress.id, restore.id, command.reason)
                return restore
        stable = endpoint.stable_deployment_id
        if restart:
            engine = EngineSpec.from_proto(restore.engine_config, default_model=endpoint.spec.model)
            deployment = self._new_deployment(
                name,
                result_id,
                engine,
                origin=D.DEPLOYMENT_ORIGIN_ROLLBACK,
                now=self.state.clock(),
                previous=stable,
                message=command.reason or f"rollback to the configuration of {restore.id}",
            )
            await self.state.begin_rollout(name, deployment.id)
            await self.state.create_deployment(deployment)
            if restore.state == D.DEPLOYMENT_STATE_DRAINING:  # its drain was cancelled above: finish it
                self._spawn(
                    name, self._drain(name, restore.id, final=D.DEPLOYMENT_STATE_RETIRED), name="drain"
                )
            await self._emit_started(deployment, trigger=events_pb2.DEPLOY_TRIGGER_API)
            await self._emit_rolled_back(name, stable, deployment.id, command.reason)
            self._spawn(
                name,
                self._roll_out(name, deployment.id, replaced_final=D.DEPLOYMENT_STATE_ROLLED_BACK),
                name="rollback",
            )
            return deployment
        # The target still runs (it is draining): traffic back to it at once.
        async with self._lock(name):
            urls = [u for u in restore.upstream_url.split(",") if u]
            await self._switch_traffic(name, new=restore.id, old="", urls=urls)
            restored = await self._set_deployment(
                name, restore.id, state=D.DEPLOYMENT_STATE_ACTIVE, weight=FULL_WEIGHT, message=""
            )
            await self._set_endpoint_state(name, D.ENDPOINT_STATE_READY, "", stable=restore.id)
        await self._emit_rolled_back(name, stable, restore.id, command.reason)
        for leaving in decision.take_out:
            if in_progress is None or leaving != in_progress.id:
                self._spawn(
                    name, self._drain(name, leaving, final=D.DEPLOYMENT_STATE_ROLLED_BACK), name="drain"
                )
        return restored

    async def _emit_rolled_back(self, name: str, taken_out: str, restored: str, reason: str) -> None:
        await self.state.emit(
            EventKind.DEPLOY_ROLLED_BACK,
            name,
            events_pb2.DeployRolledBack(
                deployment_id=taken_out,
                restored_deployment_id=restored,
                trigger=events_pb2.DEPLOY_TRIGGER_API,
                reason=reason,
            ),
        )

    # -- engine reports -------------------------------------------------------------------------

    async def on_engine_report(self, report: EngineReport) -> None:
        """Record what the backend saw: an exit degrades the endpoint, a restart restores it, a
        give-up fails the deployment (and takes it out of the route table)."""
        deployment_id = report.deployment_id
        name = report.endpoint
        endpoint = await self.state.get_endpoint(name)
        if endpoint is None:
            return
        is_stable = endpoint.stable_deployment_id == deployment_id
        if report.what == "exited":
            await self._set_deployment(name, deployment_id, message=report.detail)
            if is_stable:
                await self._set_endpoint_state(
                    name, D.ENDPOINT_STATE_DEGRADED, f"{deployment_id}: {report.detail}"
                )
        elif report.what == "restarted":
            await self._set_deployment(name, deployment_id, message="")
            if is_stable:
                await self._set_endpoint_state(name, D.ENDPOINT_STATE_READY, "")
        else:
            await self._write_routes(name, lambda w: {**w, deployment_id: 0} if deployment_id in w else w)
            await self._set_deployment(
                name, deployment_id, state=D.DEPLOYMENT_STATE_FAILED, weight=0, message=report.detail
            )
            await self.backend.stop(deployment_id)
            if is_stable:
                await self._set_endpoint_state(
                    name,
                    D.ENDPOINT_STATE_DEGRADED,
                    f"stable deployment {deployment_id} failed: {report.detail}; Promote or Rollback",
                )

    # -- resume after a restart -----------------------------------------------------------------

    async def resume(self) -> None:
        """Pick up what a previous deployer process left: deletions, rollouts, running deployments."""
        for endpoint in await self.state.list_endpoints():
            name = endpoint.spec.name
            if endpoint.state == D.ENDPOINT_STATE_DELETING:
                self._spawn(name, self._delete(name), name="delete")
                continue
            for deployment in await self.state.list_deployments(name):
                action = plan.resume_action(deployment, endpoint_state=endpoint.state)
                if action == "restart":
                    self._spawn(name, self._restart(endpoint, deployment), name="restart")
                elif action == "finish_start":
                    await self.state.begin_rollout(name, deployment.id)
                    self._spawn(name, self._roll_out(name, deployment.id), name="resume-rollout")
                elif action == "abort_rollout":
                    await self._write_routes(name, _without(deployment.id))
                    await self._set_deployment(
                        name,
                        deployment.id,
                        state=D.DEPLOYMENT_STATE_ROLLED_BACK,
                        weight=0,
                        message="the deployer restarted during the canary",
                    )
                    await self.state.end_rollout(name, deployment.id)
                elif action == "finish_drain":
                    self._spawn(
                        name, self._drain(name, deployment.id, final=D.DEPLOYMENT_STATE_RETIRED), name="drain"
                    )

    async def _restart(self, endpoint: endpoint_pb2.Endpoint, deployment: endpoint_pb2.Deployment) -> None:
        """Start an ACTIVE deployment's engines again and point its routes at them."""
        name = endpoint.spec.name
        target = Target(
            deployment_id=deployment.id,
            endpoint=name,
            engine=EngineSpec.from_proto(deployment.engine_config, default_model=endpoint.spec.model),
            hardware_class=endpoint.spec.hardware_pool.hardware_class,
        )
        async with self._lock(name):
            try:
                urls = await self.backend.start(target)
                await self.backend.wait_ready(deployment.id, self.ready_timeout_s)
            except EvertuneError as err:
                await self._set_deployment(name, deployment.id, message=f"restart failed: {err}")
                await self._set_endpoint_state(
                    name, D.ENDPOINT_STATE_DEGRADED, f"{deployment.id}: restart failed: {err}"
                )
                return
            await self._write_routes(
                name,
                lambda w: {**w, deployment.id: w.get(deployment.id, deployment.weight)},
                new_urls={deployment.id: urls},
            )
            await self._set_deployment(name, deployment.id, upstream_url=",".join(urls), message="")
            if endpoint.stable_deployment_id == deployment.id:
                await self._set_endpoint_state(name, D.ENDPOINT_STATE_READY, "")

    # -- small writers --------------------------------------------------------------------------

    async def _set_deployment(
        self,
        name: str,
        deployment_id: str,
        *,
        state: int | None = None,
        weight: int | None = None,
        upstream_url: str | None = None,
        message: str | None = None,
    ) -> endpoint_pb2.Deployment:
        def change(deployment: endpoint_pb2.Deployment) -> endpoint_pb2.Deployment:
            if state is not None:
                deployment.state = state  # type: ignore[assignment]
            if weight is not None:
                deployment.weight = weight
            if upstream_url is not None:
                deployment.upstream_url = upstream_url
            if message is not None:
                deployment.state_message = message[:500]
            return deployment

        return await self.state.change_deployment(name, deployment_id, change)

    async def _write_routes(
        self,
        name: str,
        weights: Callable[[dict[str, int]], dict[str, int]],
        *,
        new_urls: dict[str, list[str]] | None = None,
    ) -> endpoint_pb2.RouteTable:
        """Rewrite the route table: `weights` maps the current deployment->weight to the new one."""

        def change(table: endpoint_pb2.RouteTable) -> endpoint_pb2.RouteTable:
            urls = {**plan.urls_of(table), **(new_urls or {})}
            return plan.route_table(
                name, weights(plan.weights_of(table)), urls, revision=table.revision, now=self.state.clock()
            )

        table = await self.state.change_routes(name, change)
        await self.backend.apply_routes(table)
        return table


def _without(deployment_id: str) -> Callable[[dict[str, int]], dict[str, int]]:
    """A route-weights change that drops one deployment."""

    def change(weights: dict[str, int]) -> dict[str, int]:
        return {k: v for k, v in weights.items() if k != deployment_id}

    return change
