"""The kubernetes backend: rendered manifests pass the Kubernetes and Gateway API schemas, a broken
one is refused with one line, the dry run writes YAML, and the applier sends server-side applies.
The NetworkPolicy of each deployment is checked for what it lets through (tests/deployer/netpol.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from pydantic import ValidationError

from evertune.deployer.kubernetes import (
    DEFAULT_CALLER_LABELS,
    FIELD_MANAGER,
    LABEL_TENANT,
    Backend,
    InvalidManifest,
    KubernetesApplier,
    KubernetesTarget,
    KubernetesUnavailable,
    deployment_manifests,
    object_name,
    route_manifest,
    tenant_label,
    validate_manifest,
    write_manifests,
)
from evertune.deployer.settings import DeployerSettings
from evertune.domain.engines import EngineSpec, get_profile
from evertune.domain.engines.hardware import cpu_profile
from evertune.errors import InvalidArgument, SettingsError
from evertune.infra.settings import load_settings
from tests.checkout import INFRA
from tests.deployer.helpers import gpu_rendered
from tests.deployer.netpol import Pod, applies_to, egress_allowed, ingress_allowed

TARGET = KubernetesTarget(namespace="serving", model_volume_claim="models", hostname="llm.example.com")
VERSION = TARGET.kubernetes_version


def _gpu_rendered(**knobs: Any) -> Any:
    return gpu_rendered(TARGET, **knobs)


def test_gpu_deployment_and_service_are_valid_and_carry_the_knobs() -> None:
    rendered = _gpu_rendered(max_num_seqs=64, tensor_parallel_size=2, replicas=3, enable_prefix_caching=True)
    validate_manifest(rendered.deployment, kubernetes_version=VERSION)
    validate_manifest(rendered.service, kubernetes_version=VERSION)
    spec = rendered.deployment["spec"]
    assert spec["replicas"] == 3
    container = spec["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[command.index("--max-num-seqs") + 1] == "64"
    assert command[command.index("--tensor-parallel-size") + 1] == "2"
    assert "--enable-prefix-caching" in command
    assert command[command.index("--served-model-name") + 1] == "voice"
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    # the Service selects exactly the pods of this deployment
    assert rendered.service["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert rendered.upstream_url == "http://voice-dep-0a1b2c3d4e5f.serving.svc.cluster.local:8000"


def test_cpu_deployment_requests_cores_and_sets_the_kv_variable() -> None:
    spec = EngineSpec(model="/models/tiny", kv_cache_space_gib=2)
    rendered = deployment_manifests(
        endpoint="voice",
        deployment_id="dep-1",
        spec=spec,
        hardware=cpu_profile(cores=16, memory_gib=64),
        target=TARGET,
    )
    validate_manifest(rendered.deployment, kubernetes_version=VERSION)
    container = rendered.deployment["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "2"} in container["env"]
    assert container["resources"]["requests"] == {"cpu": "8", "memory": "32Gi"}


def test_route_weights_follow_the_route_table_and_validate() -> None:
    route = route_manifest(
        endpoint="voice", backends=[Backend("dep-a", 9000), Backend("dep-b", 1000)], target=TARGET
    )
    validate_manifest(route, kubernetes_version=VERSION)
    refs = route["spec"]["rules"][0]["backendRefs"]
    assert [(r["name"], r["weight"]) for r in refs] == [("voice-dep-a", 9000), ("voice-dep-b", 1000)]
    assert route["spec"]["hostnames"] == ["llm.example.com"]


@pytest.mark.parametrize(
    ("break_it", "expected"),
    [
        (lambda m: m["spec"].__setitem__("replicas", "two"), "spec/replicas"),
        (
            lambda m: m["spec"]["template"]["spec"]["containers"][0].__setitem__("imagePullPolcy", "x"),
            "imagePullPolcy",
        ),
        (
            lambda m: m["spec"]["template"]["spec"]["containers"][0]["ports"][0].__setitem__(
                "containerPort", "http"
            ),
            "containerPort",
        ),
    ],
)
def test_a_broken_deployment_is_refused_with_the_path(break_it: Any, expected: str) -> None:
    manifest = copy.deepcopy(_gpu_rendered().deployment)
    break_it(manifest)
    with pytest.raises(InvalidManifest) as caught:
        validate_manifest(manifest, kubernetes_version=VERSION)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("Deployment voice-dep-0a1b2c3d4e5f")
    assert expected in message


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("weight",), -1, "weight"),
        (("weight",), 1_000_001, "weight"),
        (("port",), 0, "port"),
        (("wieght",), 5, "wieght"),
    ],
)
def test_a_broken_route_is_refused(path: tuple[str, ...], value: Any, expected: str) -> None:
    route = route_manifest(endpoint="voice", backends=[Backend("dep-a", 10000)], target=TARGET)
    route["spec"]["rules"][0]["backendRefs"][0][path[0]] = value
    with pytest.raises(InvalidManifest, match=expected):
        validate_manifest(route, kubernetes_version=VERSION)


def test_route_needs_one_to_sixteen_backends() -> None:
    with pytest.raises(InvalidArgument, match="1 to 16"):
        route_manifest(endpoint="voice", backends=[], target=TARGET)
    with pytest.raises(InvalidArgument, match="1 to 16"):
        route_manifest(endpoint="voice", backends=[Backend(f"d{i}", 1) for i in range(17)], target=TARGET)


def test_object_names_are_dns_labels() -> None:
    assert object_name("voice", "dep-AB") == "voice-dep-ab"
    assert object_name("9lives", "d") == "e-9lives-d"
    long = object_name("a" * 60, "dep-0123456789ab")
    assert len(long) <= 63 and not long.endswith("-")


def test_dry_run_writes_yaml_that_reads_back(tmp_path: Path) -> None:
    rendered = _gpu_rendered()
    route = route_manifest(endpoint="voice", backends=[Backend("dep-0a1b2c3d4e5f", 10000)], target=TARGET)
    paths = write_manifests([rendered.deployment, rendered.service, route], tmp_path / "out")
    assert [p.name for p in paths] == [
        "deployment-voice-dep-0a1b2c3d4e5f.yaml",
        "service-voice-dep-0a1b2c3d4e5f.yaml",
        "httproute-voice-route.yaml",
    ]
    for path, manifest in zip(paths, [rendered.deployment, rendered.service, route], strict=True):
        assert yaml.safe_load(path.read_text()) == manifest


# --- the applier, against a local HTTP server standing in for the API server ----------------------


@pytest.fixture
async def api_server() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """Records each request; answers 200 with the body, or 403 for names starting with 'denied'."""
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "content_type": request.headers.get("Content-Type", ""),
                "auth": request.headers.get("Authorization", ""),
                "body": json.loads(body) if body else None,
            }
        )
        if "/denied" in request.path:
            return web.json_response({"kind": "Status", "code": 403, "reason": "Forbidden"}, status=403)
        return web.json_response(json.loads(body) if body else {"kind": "Status", "status": "Success"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def test_applier_sends_server_side_applies(api_server: tuple[str, list[dict[str, Any]]]) -> None:
    from kubernetes_asyncio import client

    url, seen = api_server
    config = client.Configuration(
        host=url, api_key={"BearerToken": "t0ken"}, api_key_prefix={"BearerToken": "Bearer"}
    )
    rendered = _gpu_rendered()
    route = route_manifest(endpoint="voice", backends=[Backend("dep-0a1b2c3d4e5f", 10000)], target=TARGET)
    applied = [*rendered.manifests, route]
    async with client.ApiClient(config) as api:
        applier = KubernetesApplier(api)
        for manifest in applied:
            await applier.apply(manifest)
        for kind in ("Deployment", "Service", "NetworkPolicy"):
            await applier.delete(kind=kind, name="voice-dep-0a1b2c3d4e5f", namespace="serving")
    policy_path = "/apis/networking.k8s.io/v1/namespaces/serving/networkpolicies/voice-dep-0a1b2c3d4e5f"
    assert [(r["method"], r["path"]) for r in seen] == [
        ("PATCH", policy_path),
        ("PATCH", "/apis/apps/v1/namespaces/serving/deployments/voice-dep-0a1b2c3d4e5f"),
        ("PATCH", "/api/v1/namespaces/serving/services/voice-dep-0a1b2c3d4e5f"),
        ("PATCH", "/apis/gateway.networking.k8s.io/v1/namespaces/serving/httproutes/voice-route"),
        ("DELETE", "/apis/apps/v1/namespaces/serving/deployments/voice-dep-0a1b2c3d4e5f"),
        ("DELETE", "/api/v1/namespaces/serving/services/voice-dep-0a1b2c3d4e5f"),
        ("DELETE", policy_path),
    ]
    # the Deployment stays until its pods are gone (the backend waits for that before the policy goes)
    assert seen[4]["query"] == {"propagationPolicy": "Foreground"}
    for request, manifest in zip(seen[:4], applied, strict=True):
        assert request["content_type"] == "application/apply-patch+yaml"
        # kubernetes_asyncio writes the bool as "True"; the API server parses it with Go's ParseBool.
        assert request["query"] == {"fieldManager": FIELD_MANAGER, "force": "True"}
        assert request["auth"] == "Bearer t0ken"
        assert request["body"] == manifest


async def test_applier_reports_a_refusal_in_one_line(api_server: tuple[str, list[dict[str, Any]]]) -> None:
    from kubernetes_asyncio import client

    url, _ = api_server
    rendered = deployment_manifests(
        endpoint="denied",
        deployment_id="d1",
        spec=EngineSpec(model="/m"),
        hardware=get_profile("h200"),
        target=TARGET,
    )
    async with client.ApiClient(client.Configuration(host=url)) as api:
        with pytest.raises(KubernetesUnavailable, match="HTTP 403") as caught:
            await KubernetesApplier(api).apply(rendered.deployment)
    assert "\n" not in str(caught.value)


# --- the NetworkPolicy ------------------------------------------------------------------------------


def _service_pod(name: str, namespace: str = "serving") -> Pod:
    """A pod of evertune's service `name`, labelled as in infra/kubernetes/base/services/."""
    path = INFRA / "kubernetes" / "base" / "services" / f"{name}.yaml"
    deployment = next(d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "Deployment")
    return Pod(labels=deployment["spec"]["template"]["metadata"]["labels"], namespace=namespace)


def _engine_pod(rendered: Any) -> Pod:
    deployment = rendered.deployment
    return Pod(
        labels=deployment["spec"]["template"]["metadata"]["labels"],
        namespace=deployment["metadata"]["namespace"],
    )


def _policy(target: KubernetesTarget, **kwargs: Any) -> dict[str, Any]:
    rendered = deployment_manifests(
        endpoint=kwargs.pop("endpoint", "voice"),
        deployment_id=kwargs.pop("deployment_id", "dep-0a1b2c3d4e5f"),
        spec=EngineSpec(model="/models/llama-8b"),
        hardware=get_profile("h200"),
        target=target,
        **kwargs,
    )
    validate_manifest(rendered.network_policy, kubernetes_version=target.kubernetes_version)
    return rendered.network_policy


def test_the_policy_selects_exactly_the_pods_of_its_deployment() -> None:
    rendered = _gpu_rendered()
    policy = rendered.network_policy
    validate_manifest(policy, kubernetes_version=VERSION)
    assert policy["metadata"]["name"] == rendered.deployment["metadata"]["name"]
    assert policy["metadata"]["namespace"] == "serving"
    assert policy["spec"]["podSelector"] == rendered.deployment["spec"]["selector"]
    assert applies_to(policy, _engine_pod(rendered))
    for endpoint, deployment_id in [("voice", "dep-ffffffffffff"), ("chat", "dep-111111111111")]:
        other = deployment_manifests(
            endpoint=endpoint,
            deployment_id=deployment_id,
            spec=EngineSpec(model="/m"),
            hardware=get_profile("h200"),
            target=TARGET,
        )
        assert not applies_to(policy, _engine_pod(other))
    assert not applies_to(policy, _service_pod("gateway"))
    # applied first, so that no pod of the deployment ever runs without it
    assert rendered.manifests[:3] == [policy, rendered.deployment, rendered.service]


def test_ingress_only_from_the_gateway_deployer_and_profiler_on_the_server_port() -> None:
    policy = _policy(TARGET)
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8000}]
    for caller in ("gateway", "deployer", "profiler"):
        pod = _service_pod(caller)
        assert ingress_allowed(policy, pod, port=8000), caller
        assert not ingress_allowed(policy, pod, port=9000), caller
        assert not ingress_allowed(policy, replace(pod, namespace="elsewhere"), port=8000), caller
    for other in ("sla-monitor", "searcher", "runner"):
        assert not ingress_allowed(policy, _service_pod(other), port=8000), other
    assert not ingress_allowed(policy, _engine_pod(_gpu_rendered()), port=8000)  # not even its own kind
    assert not ingress_allowed(policy, Pod(labels={"app": "anything"}, namespace="serving"), port=8000)
    assert not ingress_allowed(policy, Pod(ip="10.1.2.3"), port=8000)


def test_callers_in_another_namespace_and_further_peers() -> None:
    prometheus = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    target = KubernetesTarget(namespace="serving", caller_namespace="evertune", ingress_peers=(prometheus,))
    policy = _policy(target)
    assert ingress_allowed(policy, _service_pod("gateway", namespace="evertune"), port=8000)
    assert not ingress_allowed(policy, _service_pod("gateway", namespace="serving"), port=8000)
    scraper = Pod(labels={"app.kubernetes.io/name": "prometheus"}, namespace="monitoring")
    assert ingress_allowed(policy, scraper, port=8000)
    assert not ingress_allowed(policy, replace(scraper, namespace="serving"), port=8000)
    # custom caller labels replace the defaults
    custom = KubernetesTarget(namespace="serving", caller_labels=({"role": "proxy"},))
    policy = _policy(custom)
    assert ingress_allowed(policy, Pod(labels={"role": "proxy"}, namespace="serving"), port=8000)
    assert not ingress_allowed(policy, _service_pod("gateway"), port=8000)


def test_no_callers_and_no_peers_let_nothing_in() -> None:
    policy = _policy(KubernetesTarget(namespace="serving", caller_labels=()))
    assert policy["spec"]["ingress"] == []  # an ingress rule without peers would let everything in
    assert not ingress_allowed(policy, _service_pod("gateway"), port=8000)


def test_egress_is_closed_unless_dns_or_networks_are_allowed() -> None:
    kube_dns = Pod(labels={"k8s-app": "kube-dns"}, namespace="kube-system")
    policy = _policy(TARGET)
    assert "Egress" in policy["spec"]["policyTypes"] and policy["spec"]["egress"] == []
    for destination, port, protocol in [
        (kube_dns, 53, "UDP"),
        (Pod(ip="1.1.1.1"), 443, "TCP"),
        (Pod(ip="10.0.0.5"), 8000, "TCP"),
        (_service_pod("gateway"), 8080, "TCP"),
    ]:
        assert not egress_allowed(policy, destination, port=port, protocol=protocol)

    policy = _policy(KubernetesTarget(namespace="serving", allow_dns=True))
    assert egress_allowed(policy, kube_dns, port=53, protocol="UDP")
    assert egress_allowed(policy, kube_dns, port=53, protocol="TCP")
    assert not egress_allowed(policy, kube_dns, port=443)
    assert not egress_allowed(policy, Pod(labels={"k8s-app": "kube-dns"}, namespace="serving"), port=53)
    assert not egress_allowed(policy, Pod(ip="8.8.8.8"), port=53, protocol="UDP")

    target = KubernetesTarget(namespace="serving", egress_cidrs=("10.20.0.0/16", "192.168.1.7/24"))
    policy = _policy(target)
    assert policy["spec"]["egress"] == [
        {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}, {"ipBlock": {"cidr": "192.168.1.0/24"}}]}
    ]
    assert egress_allowed(policy, Pod(ip="10.20.3.4"), port=443)
    assert egress_allowed(policy, Pod(ip="192.168.1.200"), port=9000)
    assert not egress_allowed(policy, Pod(ip="10.21.0.1"), port=443)
    assert not egress_allowed(policy, kube_dns, port=53, protocol="UDP")


def test_tenants_label_their_objects_with_valid_label_values() -> None:
    rendered = deployment_manifests(
        endpoint="voice",
        deployment_id="dep-1",
        spec=EngineSpec(model="/m"),
        hardware=get_profile("h200"),
        target=TARGET,
        tenant="team-a",
    )
    for manifest in rendered.manifests:
        validate_manifest(manifest, kubernetes_version=VERSION)
        assert manifest["metadata"]["labels"][LABEL_TENANT] == "team-a"
    assert _engine_pod(rendered).labels[LABEL_TENANT] == "team-a"
    assert LABEL_TENANT not in _gpu_rendered().deployment["metadata"]["labels"]  # no tenant, no label

    # Tenant names (1-63 of letters, digits, '-', '_') that are no label values are hashed.
    assert tenant_label("a" * 63) == "a" * 63
    odd = ["team-", "team_", "team--", "x" * 62 + "_", "_"]
    labels = [tenant_label(t) for t in odd]
    assert len(set(labels)) == len(odd)
    for tenant, label in zip(odd, labels, strict=True):
        assert len(label) <= 63 and "." in label, tenant
        assert label.startswith(tenant.strip("-_")[:46] or "x"), tenant
        policy = _policy(TARGET, tenant=tenant)
        assert policy["metadata"]["labels"][LABEL_TENANT] == label


@pytest.mark.parametrize(
    ("setting", "value", "expected"),
    [
        ("caller_labels", ({},), "at least one label"),
        ("caller_labels", ({"app": "a b"},), "label value"),
        ("caller_labels", ({"bad key!": "x"},), "label key"),
        ("caller_namespace", "Not_A_Label", "pattern"),
        ("ingress_peers", ({},), "podSelector"),
        ("ingress_peers", ({"pods": {}},), "podSelector"),
        ("ingress_peers", ({"podSelector": {"matchLabel": {}}},), "matchLabel"),
        ("ingress_peers", ({"ipBlock": {"cidr": 10}},), "cidr"),
        ("egress_cidrs", ("10.0.0.0/33",), "not a CIDR"),
        ("egress_cidrs", ("example.com",), "not a CIDR"),
    ],
)
def test_network_settings_are_checked(setting: str, value: Any, expected: str) -> None:
    with pytest.raises(ValidationError, match=expected):
        KubernetesTarget(**{setting: value})


def test_deployer_settings_make_the_network_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES__CALLER_NAMESPACE", "evertune")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES__ALLOW_DNS", "true")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES__EGRESS_CIDRS", '["10.0.0.0/8"]')
    monkeypatch.setenv(
        "EVERTUNE_DEPLOYER_KUBERNETES__INGRESS_PEERS",
        '[{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}}}]',
    )
    target = load_settings(DeployerSettings).kubernetes_target()
    assert target.caller_labels == DEFAULT_CALLER_LABELS
    assert target.caller_namespace == "evertune" and target.allow_dns
    assert target.egress_cidrs == ("10.0.0.0/8",) and len(target.ingress_peers) == 1
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES__CALLER_LABELS", "[{}]")
    with pytest.raises(
        SettingsError,
        match=r"^invalid setting EVERTUNE_DEPLOYER_KUBERNETES__CALLER_LABELS: .*each caller needs",
    ):
        load_settings(DeployerSettings)
    monkeypatch.delenv("EVERTUNE_DEPLOYER_KUBERNETES__CALLER_LABELS")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES__EGRESS_CIDRS", '["nowhere"]')
    with pytest.raises(
        SettingsError, match=r"^invalid setting EVERTUNE_DEPLOYER_KUBERNETES__EGRESS_CIDRS: .*not a CIDR"
    ):
        load_settings(DeployerSettings)


def test_the_deployers_role_may_apply_and_delete_every_kind_it_renders() -> None:
    """infra/kubernetes/base/services/rbac.yaml: server-side apply needs get, create and patch;
    `stop` deletes."""
    path = INFRA / "kubernetes" / "base" / "services" / "rbac.yaml"
    role = next(d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "Role")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    route = route_manifest(endpoint="voice", backends=[Backend("dep-a", 10000)], target=TARGET)
    plurals = {"Deployment": "deployments", "Service": "services", "NetworkPolicy": "networkpolicies"}
    for manifest in [*_gpu_rendered().manifests, route]:
        group = manifest["apiVersion"].rpartition("/")[0]
        resource = plurals.get(manifest["kind"], "httproutes")
        for verb in ("get", "create", "patch", "delete"):
            assert (group, resource, verb) in granted, (manifest["kind"], verb)
