"""The `kubernetes` serving backend: each deployment a Deployment, a Service and a NetworkPolicy on a
cluster, each endpoint's traffic split a Gateway API HTTPRoute (the deployer writes the gateway's
route table in KV as well, so evertune's own gateway can front the cluster too).

- `check`: the hardware class is one the cluster serves, the engine is vLLM, the knobs run on that
  hardware, and the rendered manifests pass the Kubernetes and Gateway API schemas;
- `start`: server-side apply of the NetworkPolicy (first: no pod runs without it), the Deployment and
  the Service; returns the Service's in-cluster URL;
- `wait_ready`: polls the Deployment's status until every replica is ready (or the timeout: the
  objects are deleted and the start fails);
- `apply_routes`: the HTTPRoute with the route table's weights (deleted when the table is empty);
- `stop`: deletes the Deployment (in the foreground; its pods get `termination_grace_s` to finish
  streams) and the Service, waits until the pods are gone (the Deployment with them; at most
  `termination_grace_s` + `POLICY_GRACE_S`), then deletes the NetworkPolicy: a terminating pod
  still runs the model's code, and stays fenced in;
- `close`: closes the API client and leaves everything running: the cluster keeps serving while
  the deployer is away, and a restarted deployer re-applies the same objects (idempotent).

Dry run (`dry_run_dir`): nothing is sent; the manifests that would be applied are written as YAML
under `<dry_run_dir>/<endpoint>/` (a stopped deployment's files are removed, so the folder always
holds the desired state), and deployments count as ready at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from evertune.deployer.backend import Target
from evertune.deployer.kubernetes import (
    Backend,
    KubernetesApplier,
    KubernetesTarget,
    KubernetesUnavailable,
    Manifest,
    Rendered,
    deployment_manifests,
    object_name,
    route_manifest,
    validate_manifest,
    write_manifests,
)
from evertune.deployer.plan import weights_of
from evertune.domain.engines import EngineSpec, EngineStartFailed, HardwareProfile, get_profile, validate
from evertune.domain.engines.hardware import cpu_profile
from evertune.errors import EvertuneError, FailedPrecondition, InvalidArgument
from evertune.infra.logging import get_logger
from evertune.v1 import endpoint_pb2

log = get_logger("evertune.deployer.kubernetes")

#: Seconds between status reads while a Deployment rolls out or goes.
READY_POLL_S: Final = 2.0
#: Seconds beyond the pods' grace period that `stop` waits for them to go before it deletes their
#: NetworkPolicy anyway.
POLICY_GRACE_S: Final = 30.0

#: Makes the API client (kubeconfig or in-cluster) the first time the backend needs one.
ApiClientFactory = Callable[[], Awaitable[Any]]


async def api_client_from_config(kubeconfig: Path | None, context: str | None) -> Any:
    """A kubernetes_asyncio ApiClient: from `kubeconfig` when given, else the in-cluster service
    account, else ~/.kube/config."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    try:
        if kubeconfig is not None:
            await config.load_kube_config(
                config_file=str(kubeconfig), context=context, client_configuration=configuration
            )
        else:
            try:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except config.ConfigException:
                await config.load_kube_config(context=context, client_configuration=configuration)
    except (config.ConfigException, OSError) as err:
        raise KubernetesUnavailable(f"no usable Kubernetes configuration: {err}") from None
    return client.ApiClient(configuration)


class KubernetesBackend:
    """Deployments on a Kubernetes cluster (see the module docstring)."""

    name = "kubernetes"

    def __init__(
        self,
        *,
        target: KubernetesTarget,
        hardware_classes: list[str],
        api_client: ApiClientFactory | None = None,
        dry_run_dir: Path | None = None,
        ready_poll_s: float = READY_POLL_S,
    ) -> None:
        if dry_run_dir is None and api_client is None:
            raise InvalidArgument("the kubernetes backend needs an API client or a dry-run folder")
        self.target = target
        self.hardware_classes = list(hardware_classes)
        self.dry_run_dir = dry_run_dir
        self.reachable = dry_run_dir is None
        self.ready_poll_s = ready_poll_s
        self._factory = api_client
        self._client: Any = None
        self._applier: KubernetesApplier | None = None
        self._running: dict[str, Target] = {}

    # -- the protocol -----------------------------------------------------------------------

    def check(self, target: Target) -> None:
        self._render(target)

    async def start(self, target: Target) -> list[str]:
        rendered = self._render(target)
        for manifest in rendered.manifests:
            await self._apply(target.endpoint, manifest)
        self._running[target.deployment_id] = target
        log.info("deployment applied", deployment=target.deployment_id, url=rendered.upstream_url)
        return [rendered.upstream_url]

    async def wait_ready(self, deployment_id: str, timeout_s: float) -> None:
        target = self._running.get(deployment_id)
        if target is None:
            raise FailedPrecondition(f"deployment {deployment_id} is not started on this backend")
        if self.dry_run_dir is not None:
            return
        applier = await self._api()
        name = object_name(target.endpoint, deployment_id)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                status = await applier.deployment_status(name=name, namespace=self.target.namespace)
            except KubernetesUnavailable as err:
                status = None
                log.warning("deployment status unreadable", deployment=deployment_id, error=str(err))
            if status is not None and status.ready:
                return
            if time.monotonic() > deadline:
                await self.stop(deployment_id)
                shown = f"{status.ready_replicas}/{status.replicas}" if status is not None else "unknown"
                raise EngineStartFailed(
                    f"Deployment {name} not ready after {timeout_s:g} s (ready replicas {shown})"
                )
            await asyncio.sleep(self.ready_poll_s)

    async def in_flight(self, deployment_id: str) -> int | None:
        """Unknown on a cluster (the pods' metrics are not scraped here): a drain waits its whole
        timeout, and a deleted pod still gets `termination_grace_s` for its streams. 0 in a dry run."""
        return 0 if self.dry_run_dir is not None else None

    async def apply_routes(self, table: endpoint_pb2.RouteTable) -> None:
        weights = weights_of(table)
        name = object_name(table.endpoint, "route")
        if not weights:
            await self._delete(table.endpoint, kind="HTTPRoute", name=name)
            return
        backends = [Backend(deployment_id, weight) for deployment_id, weight in sorted(weights.items())]
        manifest = route_manifest(endpoint=table.endpoint, backends=backends, target=self.target)
        validate_manifest(manifest, kubernetes_version=self.target.kubernetes_version)
        await self._apply(table.endpoint, manifest)

    async def stop(self, deployment_id: str) -> None:
        target = self._running.pop(deployment_id, None)
        if target is None:
            return
        name = object_name(target.endpoint, deployment_id)
        await self._delete(target.endpoint, kind="Deployment", name=name)
        await self._delete(target.endpoint, kind="Service", name=name)
        await self._pods_gone(name, timeout_s=self.target.termination_grace_s + POLICY_GRACE_S)
        await self._delete(target.endpoint, kind="NetworkPolicy", name=name)
        log.info("deployment deleted", deployment=deployment_id)

    def running(self) -> set[str]:
        return set(self._running)

    async def close(self) -> None:
        """Close the API client; the cluster keeps running what it runs."""
        self._running.clear()
        if self._client is not None:
            await self._client.close()
            self._client = None
            self._applier = None

    # -- internals ------------------------------------------------------------------------------

    def _hardware(self, hardware_class: str) -> HardwareProfile:
        if hardware_class not in self.hardware_classes:
            served = ", ".join(self.hardware_classes)
            raise FailedPrecondition(
                f"spec.hardware_pool.hardware_class: the kubernetes backend serves {served}, "
                f"not {hardware_class!r}"
            )
        if hardware_class == "cpu":
            return cpu_profile(cores=self.target.cpu_cores, memory_gib=self.target.cpu_memory_gib)
        try:
            return get_profile(hardware_class)
        except EvertuneError as err:
            raise InvalidArgument(f"spec.hardware_pool.hardware_class: {err}") from None

    def _render(self, target: Target) -> Rendered:
        """The deployment's manifests, validated (knobs against the hardware, schemas)."""
        spec: EngineSpec = target.engine
        if spec.kind != "vllm":
            raise InvalidArgument(
                f"engine_config.engine: the kubernetes backend runs vLLM, not {spec.kind!r}"
            )
        hardware = self._hardware(target.hardware_class)
        validate(spec, hardware, path_exists=lambda _: True)  # model paths are the cluster's
        rendered = deployment_manifests(
            endpoint=target.endpoint,
            deployment_id=target.deployment_id,
            spec=spec,
            hardware=hardware,
            target=self.target,
            # The endpoint's owner, once Target carries it (backend.py); until then no tenant label.
            tenant=target.tenant,
        )
        for manifest in rendered.manifests:
            validate_manifest(manifest, kubernetes_version=self.target.kubernetes_version)
        return rendered

    async def _pods_gone(self, name: str, *, timeout_s: float) -> None:
        """Wait until the Deployment `name`, deleted in the foreground, is gone: its pods are then
        gone too. Gives up after `timeout_s` (a warning; the caller goes on)."""
        if self.dry_run_dir is not None:
            return
        applier = await self._api()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if await applier.deployment_status(name=name, namespace=self.target.namespace) is None:
                    return
            except KubernetesUnavailable as err:
                log.warning("deployment status unreadable", name=name, error=str(err))
            if time.monotonic() > deadline:
                log.warning("pods still terminating; deleting their NetworkPolicy anyway", name=name)
                return
            await asyncio.sleep(self.ready_poll_s)

    async def _api(self) -> KubernetesApplier:
        if self._applier is None:
            assert self._factory is not None
            self._client = await self._factory()
            self._applier = KubernetesApplier(self._client)
        return self._applier

    async def _apply(self, endpoint: str, manifest: Manifest) -> None:
        if self.dry_run_dir is not None:
            write_manifests([manifest], self.dry_run_dir / endpoint)
            return
        await (await self._api()).apply(manifest)

    async def _delete(self, endpoint: str, *, kind: str, name: str) -> None:
        if self.dry_run_dir is not None:
            (self.dry_run_dir / endpoint / f"{kind.lower()}-{name}.yaml").unlink(missing_ok=True)
            return
        await (await self._api()).delete(kind=kind, name=name, namespace=self.target.namespace)
