"""The `kubernetes` serving backend: manifests for a deployment and its traffic split, and applying them.

Pure rendering first: `deployment_manifests` gives an apps/v1 Deployment, a v1 Service and a
networking.k8s.io/v1 NetworkPolicy for one evertune deployment (its vLLM servers; the policy lets
only evertune's callers in and nothing out), `route_manifest` gives the endpoint's traffic split as a
Gateway API `HTTPRoute` whose backend weights are the route table's. `validate_manifest` checks a
manifest against the Kubernetes OpenAPI schemas (kubernetes-validate) or, for the HTTPRoute, against
the schema of the Gateway API v1 fields evertune writes (`infra/kubernetes/schemas/`).
`write_manifests` is the dry run: the manifests as YAML files. `KubernetesApplier` sends them to a
cluster with server-side apply through the Kubernetes client (kubernetes_asyncio).

No cluster runs on the development machines: the tests render and validate, and check the applier's
requests against a small local HTTP server.
"""

from __future__ import annotations

import copy
import hashlib
import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from evertune.domain.engines import EngineSpec, HardwareProfile, server_command
from evertune.domain.engines.vllm import BASE_ENV
from evertune.errors import InvalidArgument, Unavailable
from evertune.infra.package_data import INFRA

Manifest = dict[str, Any]

#: Port the vLLM server listens on inside its pod, and the Service's port.
SERVER_PORT = 8000
#: Field manager named in server-side apply: the owner of the fields evertune sets.
FIELD_MANAGER = "evertune"
#: Label keys on everything evertune renders.
LABEL_ENDPOINT = "evertune.dev/endpoint"
LABEL_DEPLOYMENT = "evertune.dev/deployment"
#: The owning tenant (`tenant_label`), on a deployment's objects and pods, for operators' own policies.
LABEL_TENANT = "evertune.dev/tenant"
#: Labels of the pods that call engines, as in infra/kubernetes/base/services/*.yaml: the gateway
#: (inference), the deployer (warm-up requests) and the profiler (engine `/metrics` for its reports).
DEFAULT_CALLER_LABELS: tuple[dict[str, str], ...] = tuple(
    {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "evertune"}
    for name in ("gateway", "deployer", "profiler")
)
#: Where `allow_dns` lets engine pods send DNS queries: the cluster DNS (kube-dns or CoreDNS).
KUBE_DNS_PEER: dict[str, Any] = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
_SCHEMA_DIR = INFRA / "kubernetes" / "schemas"
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PEER_FIELDS = frozenset({"podSelector", "namespaceSelector", "ipBlock"})


class InvalidManifest(InvalidArgument):
    """A rendered manifest does not satisfy its schema (a bug or an impossible target setting)."""


class KubernetesUnavailable(Unavailable):
    """The Kubernetes API server refused or could not be reached."""


class KubernetesTarget(BaseModel):
    """Where and how deployments run on a cluster (the deployer's `kubernetes` backend settings)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Namespace of every rendered object.
    namespace: str = Field(default="evertune", pattern=_DNS_LABEL.pattern, max_length=63)
    #: Container image of the vLLM OpenAI-compatible server.
    image: str = Field(default="vllm/vllm-openai:v0.32.0", min_length=1)
    #: Gateway (Gateway API) the HTTPRoutes attach to.
    gateway_name: str = Field(default="evertune", min_length=1)
    #: Namespace of that Gateway (None = the target namespace).
    gateway_namespace: str | None = None
    #: Host name the route answers for (None = every host of the Gateway's listener).
    hostname: str | None = None
    #: Kubernetes version whose schemas manifests are checked against.
    kubernetes_version: str = "1.33"
    #: Extended resource of one accelerator device ("nvidia.com/gpu", "amd.com/gpu").
    accelerator_resource: str = "nvidia.com/gpu"
    #: PersistentVolumeClaim holding the model weights, mounted read-only at `model_mount_path`
    #: (None = the image or the node provides the model path; nothing is downloaded by evertune).
    model_volume_claim: str | None = None
    #: Where the model volume is mounted in the container.
    model_mount_path: str = "/models"
    #: Seconds a pod may take to finish its streams after it is told to stop.
    termination_grace_s: int = Field(default=120, ge=1)
    #: Seconds a new pod may take to load the model before Kubernetes restarts it.
    startup_timeout_s: int = Field(default=1800, ge=10)
    #: User id the vLLM pods run as (with runAsNonRoot); None: the image's own user. The image
    #: must then work as that user (a writable HOME or cache folder).
    run_as_user: int | None = Field(default=None, ge=1)
    #: Let pods download a model named by a hub id (evertune sets the hub's offline mode otherwise).
    allow_hub_downloads: bool = False
    #: CPU cores and memory (GiB) requested per replica on a CPU hardware class.
    cpu_cores: int = Field(default=8, ge=1)
    cpu_memory_gib: int = Field(default=32, ge=1)
    #: Pods that may connect to the engines (TCP `SERVER_PORT` only): each entry the labels one
    #: caller's pods carry (a NetworkPolicy peer each); by default evertune's gateway, deployer and
    #: profiler. Nothing else reaches an engine, other tenants' engines included.
    caller_labels: tuple[dict[str, str], ...] = DEFAULT_CALLER_LABELS
    #: Namespace those callers run in (None: the engines' namespace).
    caller_namespace: str | None = Field(default=None, pattern=_DNS_LABEL.pattern, max_length=63)
    #: Further peers allowed in, in the NetworkPolicy's own form (`podSelector`, `namespaceSelector`,
    #: `ipBlock`): a Gateway API implementation's proxies, the cluster's Prometheus.
    ingress_peers: tuple[dict[str, Any], ...] = ()
    #: Let engine pods send DNS queries (UDP and TCP 53) to the cluster DNS (`KUBE_DNS_PEER`).
    #: Off: an offline engine resolves nothing, and DNS is a way out for a model's code.
    allow_dns: bool = False
    #: Networks engine pods may connect to (CIDRs, any port); none by default.
    egress_cidrs: tuple[str, ...] = ()

    @field_validator("caller_labels")
    @classmethod
    def _caller_labels(cls, callers: tuple[dict[str, str], ...]) -> tuple[dict[str, str], ...]:
        for labels in callers:
            if not labels:  # an empty selector would be every pod of the namespace
                raise ValueError("each caller needs at least one label")
            for key, value in labels.items():
                if not _label_key_ok(key):
                    raise ValueError(f"{key!r} is not a Kubernetes label key")
                if len(value) > 63 or not _LABEL_VALUE.match(value):
                    raise ValueError(f"{key}={value!r}: not a Kubernetes label value")
        return callers

    @field_validator("egress_cidrs")
    @classmethod
    def _cidrs(cls, cidrs: tuple[str, ...]) -> tuple[str, ...]:
        try:
            return tuple(str(ipaddress.ip_network(cidr, strict=False)) for cidr in cidrs)
        except ValueError as err:
            raise ValueError(f"not a CIDR: {err}") from None

    @field_validator("ingress_peers")
    @classmethod
    def _peers(cls, peers: tuple[dict[str, Any], ...], info: ValidationInfo) -> tuple[dict[str, Any], ...]:
        """A field's own check (not the model's), so a bad value is named by its setting."""
        for i, peer in enumerate(peers):
            if not peer or not set(peer) <= _PEER_FIELDS:
                raise ValueError(f"ingress_peers[{i}]: one or more of {', '.join(sorted(_PEER_FIELDS))}")
        if not peers:
            return peers
        namespace = info.data.get("namespace", cls.model_fields["namespace"].default)
        probe: Manifest = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "ingress-peers", "namespace": namespace},
            "spec": {"podSelector": {}, "ingress": [{"from": list(peers)}]},
        }
        version = info.data.get("kubernetes_version", cls.model_fields["kubernetes_version"].default)
        try:
            validate_manifest(probe, kubernetes_version=version)
        except InvalidManifest as err:
            message = str(err).removeprefix("NetworkPolicy ingress-peers: ")
            raise ValueError(message.replace("spec/ingress/0/from/", "ingress_peers/")) from None
        return peers


def _label_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return len(name) <= 63 and bool(_LABEL_NAME.match(name))


def tenant_label(tenant: str) -> str:
    """`tenant` as a label value: itself when it is one (a tenant name may end in '-' or '_', a
    label value may not); else its letters, digits, '-' and '_' (up to 46), '.', and 16 hex digits of
    its SHA-256. Tenant names hold no '.', so the two forms never meet."""
    if len(tenant) <= 63 and _LABEL_VALUE.match(tenant):
        return tenant
    readable = re.sub(r"[^-A-Za-z0-9_]", "", tenant)[:46].strip("-_") or "x"
    return f"{readable}.{hashlib.sha256(tenant.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class Backend:
    """One weighted backend of an endpoint's HTTPRoute."""

    deployment_id: str  #: evertune deployment id
    weight: int  #: relative weight, as in the route table (basis points summing to 10000)


@dataclass(frozen=True)
class Rendered:
    """The manifests of one deployment: what `apply` sends, in order."""

    deployment: Manifest  #: apps/v1 Deployment running the vLLM replicas
    service: Manifest  #: v1 Service in front of them
    upstream_url: str  #: in-cluster base URL of the Service (for the gateway's route table)
    network_policy: Manifest  #: networking.k8s.io/v1 NetworkPolicy of the Deployment's pods
    extra: list[Manifest] = field(default_factory=list)  #: reserved for per-deployment extras

    @property
    def manifests(self) -> list[Manifest]:
        """Everything to apply, in order: the NetworkPolicy first, so that no pod runs without it."""
        return [self.network_policy, self.deployment, self.service, *self.extra]


def object_name(endpoint: str, deployment_id: str) -> str:
    """The DNS-1035 name of a deployment's Deployment and Service: `<endpoint>-<deployment id>`."""
    name = f"{endpoint}-{deployment_id}".lower()
    name = re.sub(r"[^-a-z0-9]", "-", name)
    if not name[:1].isalpha():
        name = f"e-{name}"
    if len(name) > 63:
        name = name[:63]
    name = name.rstrip("-")
    if not _DNS_LABEL.match(name):
        raise InvalidArgument(f"cannot make a Kubernetes name of {endpoint!r} and {deployment_id!r}")
    return name


def _labels(endpoint: str, deployment_id: str, tenant: str) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/managed-by": "evertune",
        LABEL_ENDPOINT: endpoint,
        LABEL_DEPLOYMENT: deployment_id,
    }
    if tenant:
        labels[LABEL_TENANT] = tenant_label(tenant)
    return labels


def _selector(deployment_id: str) -> dict[str, str]:
    """The labels that pick exactly one deployment's pods (Deployment, Service, NetworkPolicy)."""
    return {LABEL_DEPLOYMENT: deployment_id}


def _resources(spec: EngineSpec, hardware: HardwareProfile, target: KubernetesTarget) -> dict[str, Any]:
    if hardware.is_cpu:
        amount = {"cpu": str(target.cpu_cores), "memory": f"{target.cpu_memory_gib}Gi"}
        return {"requests": dict(amount), "limits": dict(amount)}
    devices = str(spec.tensor_parallel_size or 1)
    return {
        "requests": {target.accelerator_resource: devices},
        "limits": {target.accelerator_resource: devices},
    }


def _container(
    spec: EngineSpec, *, endpoint: str, hardware: HardwareProfile, target: KubernetesTarget
) -> dict[str, Any]:
    argv, env = server_command(
        spec,
        hardware=hardware,
        python="python3",
        host="0.0.0.0",
        port=SERVER_PORT,
        served_model_name=endpoint,
    )
    if not target.allow_hub_downloads:  # nothing is downloaded: the model is a mounted path
        env = {**BASE_ENV, **env}
    probe = {"httpGet": {"path": "/health", "port": SERVER_PORT}}
    mounts: list[dict[str, Any]] = [{"name": "shm", "mountPath": "/dev/shm"}]
    if target.model_volume_claim:
        mounts.append({"name": "model", "mountPath": target.model_mount_path, "readOnly": True})
    return {
        "name": "vllm",
        "image": target.image,
        "command": argv,
        "env": [{"name": key, "value": value} for key, value in sorted(env.items())],
        "ports": [{"name": "http", "containerPort": SERVER_PORT, "protocol": "TCP"}],
        "resources": _resources(spec, hardware, target),
        "startupProbe": {
            **probe,
            "periodSeconds": 10,
            "failureThreshold": -(-target.startup_timeout_s // 10),
        },
        "readinessProbe": {**probe, "periodSeconds": 5, "failureThreshold": 2},
        "livenessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 6},
        "volumeMounts": mounts,
        # No privilege a model's code could use: no new privileges, no capabilities.
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }


def _pod_security(target: KubernetesTarget) -> dict[str, Any]:
    """The pods' securityContext: the runtime's default seccomp profile, and a non-root user when
    the target names one."""
    security: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if target.run_as_user is not None:
        security |= {"runAsNonRoot": True, "runAsUser": target.run_as_user, "runAsGroup": target.run_as_user}
    return security


def deployment_manifests(
    *,
    endpoint: str,
    deployment_id: str,
    spec: EngineSpec,
    hardware: HardwareProfile,
    target: KubernetesTarget,
    tenant: str = "",
) -> Rendered:
    """The Deployment, Service and NetworkPolicy of one evertune deployment (`spec.replica_count`
    vLLM pods); `tenant` (the endpoint's owner) labels them all (`LABEL_TENANT`)."""
    name = object_name(endpoint, deployment_id)
    labels = _labels(endpoint, deployment_id, tenant)
    volumes: list[dict[str, Any]] = [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
    if target.model_volume_claim:
        volumes.append(
            {
                "name": "model",
                "persistentVolumeClaim": {"claimName": target.model_volume_claim, "readOnly": True},
            }
        )
    deployment: Manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": target.namespace, "labels": labels},
        "spec": {
            "replicas": spec.replica_count,
            "selector": {"matchLabels": _selector(deployment_id)},
            # A new pod must be ready before an old one goes: streams in flight are never cut.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": target.termination_grace_s,
                    "securityContext": _pod_security(target),
                    "automountServiceAccountToken": False,
                    "containers": [_container(spec, endpoint=endpoint, hardware=hardware, target=target)],
                    "volumes": volumes,
                },
            },
        },
    }
    service: Manifest = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": target.namespace, "labels": labels},
        "spec": {
            "type": "ClusterIP",
            "selector": _selector(deployment_id),
            "ports": [{"name": "http", "port": SERVER_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    url = f"http://{name}.{target.namespace}.svc.cluster.local:{SERVER_PORT}"
    policy = _network_policy(name, labels, deployment_id, target)
    return Rendered(deployment=deployment, service=service, upstream_url=url, network_policy=policy)


def _network_policy(
    name: str, labels: dict[str, str], deployment_id: str, target: KubernetesTarget
) -> Manifest:
    """The pods of one deployment take connections on `SERVER_PORT` from the callers only and open
    none (DNS and `egress_cidrs` aside, when set). Without any caller or peer nothing gets in: an
    ingress rule without peers would let everything in, so none is written."""
    peers: list[dict[str, Any]] = []
    for caller in target.caller_labels:
        peer: dict[str, Any] = {"podSelector": {"matchLabels": dict(caller)}}
        if target.caller_namespace:
            peer["namespaceSelector"] = {
                "matchLabels": {"kubernetes.io/metadata.name": target.caller_namespace}
            }
        peers.append(peer)
    peers += copy.deepcopy(list(target.ingress_peers))
    ingress = [{"from": peers, "ports": [{"protocol": "TCP", "port": SERVER_PORT}]}] if peers else []
    egress: list[dict[str, Any]] = []
    if target.allow_dns:
        egress.append(
            {
                "to": [copy.deepcopy(KUBE_DNS_PEER)],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
            }
        )
    if target.egress_cidrs:
        egress.append({"to": [{"ipBlock": {"cidr": cidr}} for cidr in target.egress_cidrs]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": target.namespace, "labels": dict(labels)},
        "spec": {
            "podSelector": {"matchLabels": _selector(deployment_id)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": egress,
        },
    }


def route_manifest(*, endpoint: str, backends: Sequence[Backend], target: KubernetesTarget) -> Manifest:
    """The endpoint's HTTPRoute: OpenAI paths to the deployments' Services by their route weights.

    Backends of weight 0 stay listed (no new requests; streams in flight finish on their pods).
    """
    if not 1 <= len(backends) <= 16:
        raise InvalidArgument(f"an HTTPRoute rule takes 1 to 16 backends, got {len(backends)}")
    parent: dict[str, Any] = {
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "name": target.gateway_name,
    }
    if target.gateway_namespace:
        parent["namespace"] = target.gateway_namespace
    spec: dict[str, Any] = {
        "parentRefs": [parent],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                "backendRefs": [
                    {
                        "group": "",
                        "kind": "Service",
                        "name": object_name(endpoint, b.deployment_id),
                        "port": SERVER_PORT,
                        "weight": b.weight,
                    }
                    for b in backends
                ],
            }
        ],
    }
    if target.hostname:
        spec["hostnames"] = [target.hostname]
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": object_name(endpoint, "route"),
            "namespace": target.namespace,
            "labels": {"app.kubernetes.io/managed-by": "evertune", LABEL_ENDPOINT: endpoint},
        },
        "spec": spec,
    }


@cache
def _local_schema(api_version: str, kind: str) -> dict[str, Any] | None:
    path = _SCHEMA_DIR / f"{kind.lower()}-{api_version.replace('/', '-').replace('.', '-')}.json"
    if not path.is_file():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def validate_manifest(manifest: Manifest, *, kubernetes_version: str) -> None:
    """Raise `InvalidManifest` (one line: kind, name, the failing path and why) unless it is valid."""
    kind, name = manifest.get("kind", "?"), manifest.get("metadata", {}).get("name", "?")
    local = _local_schema(str(manifest.get("apiVersion", "")), str(kind))
    try:
        if local is not None:
            jsonschema.Draft202012Validator(local).validate(manifest)
        else:
            kubernetes_validate.validate(manifest, kubernetes_version, strict=True)
    except jsonschema.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        raise InvalidManifest(f"{kind} {name}: {where}: {err.message}") from None
    except kubernetes_validate.SchemaNotFoundError as err:
        raise InvalidManifest(f"{kind} {name}: no schema: {err.message}") from None


def write_manifests(manifests: Sequence[Manifest], folder: Path) -> list[Path]:
    """The dry run: each manifest as `<kind>-<name>.yaml` in `folder` (created); returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for manifest in manifests:
        path = folder / f"{manifest['kind'].lower()}-{manifest['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(manifest, sort_keys=False))
        paths.append(path)
    return paths


class KubernetesApplier:
    """Server-side apply of rendered manifests (NetworkPolicy, Deployment, Service, HTTPRoute) to one
    cluster.

    `api_client` is a `kubernetes_asyncio.client.ApiClient` configured for the cluster (kubeconfig
    or in-cluster); the applier does not own it.
    """

    def __init__(self, api_client: Any) -> None:
        from kubernetes_asyncio import client

        self._apps = client.AppsV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._networking = client.NetworkingV1Api(api_client)

    async def apply(self, manifest: Mapping[str, Any]) -> None:
        """Create or update `manifest` (server-side apply, evertune's field manager, forced)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        kind, meta = manifest["kind"], manifest["metadata"]
        options: dict[str, Any] = {
            "field_manager": FIELD_MANAGER,
            "force": True,
            "_content_type": "application/apply-patch+yaml",
        }
        try:
            if kind == "Deployment":
                await self._apps.patch_namespaced_deployment(
                    meta["name"], meta["namespace"], manifest, **options
                )
            elif kind == "Service":
                await self._core.patch_namespaced_service(
                    meta["name"], meta["namespace"], manifest, **options
                )
            elif kind == "NetworkPolicy":
                await self._networking.patch_namespaced_network_policy(
                    meta["name"], meta["namespace"], manifest, **options
                )
            elif kind == "HTTPRoute":
                group, version = manifest["apiVersion"].split("/")
                await self._custom.patch_namespaced_custom_object(
                    group, version, meta["namespace"], "httproutes", meta["name"], manifest, **options
                )
            else:
                raise InvalidArgument(f"the kubernetes backend does not apply kind {kind!r}")
        except ApiException as err:
            raise KubernetesUnavailable(
                f"applying {kind} {meta['name']} failed: HTTP {err.status} {err.reason}"
            ) from None

    async def delete(self, *, kind: str, name: str, namespace: str) -> None:
        """Delete one object; an object already gone is not an error. A Deployment is deleted in the
        foreground: it stays (being deleted) until its pods are gone, so `deployment_status` tells
        when they are."""
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            if kind == "Deployment":
                await self._apps.delete_namespaced_deployment(
                    name, namespace, propagation_policy="Foreground"
                )
            elif kind == "Service":
                await self._core.delete_namespaced_service(name, namespace)
            elif kind == "NetworkPolicy":
                await self._networking.delete_namespaced_network_policy(name, namespace)
            elif kind == "HTTPRoute":
                await self._custom.delete_namespaced_custom_object(
                    "gateway.networking.k8s.io", "v1", namespace, "httproutes", name
                )
            else:
                raise InvalidArgument(f"the kubernetes backend does not delete kind {kind!r}")
        except ApiException as err:
            if err.status != 404:
                raise KubernetesUnavailable(
                    f"deleting {kind} {name} failed: HTTP {err.status} {err.reason}"
                ) from None

    async def deployment_status(self, *, name: str, namespace: str) -> RolloutStatus | None:
        """The rollout status of a Deployment; None when it does not exist."""
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            deployment = await self._apps.read_namespaced_deployment_status(name, namespace)
        except ApiException as err:
            if err.status == 404:
                return None
            raise KubernetesUnavailable(
                f"reading Deployment {name} failed: HTTP {err.status} {err.reason}"
            ) from None
        status = deployment.status
        wanted = deployment.spec.replicas if deployment.spec and deployment.spec.replicas is not None else 1
        generation = (deployment.metadata.generation if deployment.metadata else None) or 0
        return RolloutStatus(
            replicas=wanted,
            ready_replicas=(status.ready_replicas if status else None) or 0,
            updated_replicas=(status.updated_replicas if status else None) or 0,
            current=((status.observed_generation if status else None) or 0) >= generation,
        )


@dataclass(frozen=True)
class RolloutStatus:
    """Where a Deployment's rollout is (from its status)."""

    replicas: int  #: replicas wanted (spec)
    ready_replicas: int  #: replicas passing their readiness probe
    updated_replicas: int  #: replicas of the current pod template
    current: bool  #: the controller has seen the latest spec (observedGeneration >= generation)

    @property
    def ready(self) -> bool:
        """Every wanted replica is updated and ready."""
        return (
            self.current and self.ready_replicas >= self.replicas and self.updated_replicas >= self.replicas
        )
