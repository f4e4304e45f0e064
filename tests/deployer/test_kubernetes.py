"""The kubernetes backend: rendered manifests pass the Kubernetes and Gateway API schemas, a broken
one is refused with one line, the dry run writes YAML, and the applier sends server-side applies."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from evertune.deployer.kubernetes import (
    FIELD_MANAGER,
    Backend,
    InvalidManifest,
    KubernetesApplier,
    KubernetesTarget,
    KubernetesUnavailable,
    deployment_manifests,
    object_name,
    route_manifest,
    validate_manifest,
    write_manifests,
)

from evertune.domain.engines import EngineSpec, get_profile
from evertune.domain.engines.hardware import cpu_profile
from evertune.errors import InvalidArgument
from tests.deployer.helpers import gpu_rendered

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
    async with client.ApiClient(config) as api:
        applier = KubernetesApplier(api)
        for manifest in (rendered.deployment, rendered.service, route):
            await applier.apply(manifest)
        await applier.delete(kind="Service", name="voice-dep-0a1b2c3d4e5f", namespace="serving")
    assert [(r["method"], r["path"]) for r in seen] == [
        ("PATCH", "/apis/apps/v1/namespaces/serving/deployments/voice-dep-0a1b2c3d4e5f"),
        ("PATCH", "/api/v1/namespaces/serving/services/voice-dep-0a1b2c3d4e5f"),
        ("PATCH", "/apis/gateway.networking.k8s.io/v1/namespaces/serving/httproutes/voice-route"),
        ("DELETE", "/api/v1/namespaces/serving/services/voice-dep-0a1b2c3d4e5f"),
    ]
    for request, manifest in zip(seen[:3], [rendered.deployment, rendered.service, route], strict=True):
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
