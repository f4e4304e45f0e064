"""The kubernetes backend: the dry run through the real API and real NATS (manifests written and
valid after create, promote and rollback), and the backend against a small local HTTP server
standing in for the Kubernetes API server (reached through a kubeconfig file): the NetworkPolicy
is applied before the pods exist and deleted after they are gone."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from nats.aio.client import Client

from evertune.apps.harness.waiting import eventually
from evertune.deployer import backend_kubernetes
from evertune.deployer.backend import Target
from evertune.deployer.backend_kubernetes import KubernetesBackend, api_client_from_config
from evertune.deployer.kubernetes import LABEL_TENANT, KubernetesTarget, object_name, validate_manifest
from evertune.domain.engines import EngineSpec, EngineStartFailed
from evertune.errors import FailedPrecondition, InvalidArgument
from evertune.v1 import endpoint_pb2 as D
from evertune.v1 import endpoint_service_pb2 as pb
from tests.deployer.conftest import start_stack, stop_stack
from tests.deployer.helpers import new_name
from tests.deployer.test_api import deployments, endpoint_in, routes

TARGET = KubernetesTarget(namespace="serving")


def _manifests(folder: Path) -> dict[str, dict[str, Any]]:
    """File name -> manifest, each validated against its schema."""
    out = {}
    for path in sorted(folder.glob("*.yaml")):
        manifest = yaml.safe_load(path.read_text())
        validate_manifest(manifest, kubernetes_version=TARGET.kubernetes_version)
        out[path.name] = manifest
    return out


def _route_weights(manifests: dict[str, dict[str, Any]], endpoint: str) -> dict[str, int]:
    route = manifests[f"httproute-{object_name(endpoint, 'route')}.yaml"]
    refs = route["spec"]["rules"][0]["backendRefs"]
    return {ref["name"]: ref["weight"] for ref in refs}


async def test_dry_run_through_the_api(nc: Client, tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    stack = await start_stack(
        nc,
        tmp_path,
        backend="kubernetes",
        kubernetes={"dry_run_dir": out, "hardware_classes": ["h200"], "namespace": "serving"},
    )
    try:
        name = new_name()
        spec = D.EndpointSpec(
            name=name,
            model="/models/llama-8b",
            slo=D.Slo(ttft_p99_ms=500),
            hardware_pool=D.HardwarePool(hardware_class="h200"),
            initial_engine_config=D.EngineConfig(engine="vllm", max_num_seqs=32),
        )
        created = await stack.stub.CreateEndpoint(
            pb.CreateEndpointRequest(request_id=uuid.uuid4().hex, spec=spec), metadata=stack.a
        )
        first = created.deployment.id
        await endpoint_in(stack, name, D.ENDPOINT_STATE_READY)
        folder = out / name
        manifests = _manifests(folder)
        first_name = object_name(name, first)
        assert set(manifests) == {
            f"networkpolicy-{first_name}.yaml",
            f"deployment-{first_name}.yaml",
            f"service-{first_name}.yaml",
            f"httproute-{object_name(name, 'route')}.yaml",
        }
        policy = manifests[f"networkpolicy-{first_name}.yaml"]
        assert policy["spec"]["podSelector"] == manifests[f"deployment-{first_name}.yaml"]["spec"]["selector"]
        pod = manifests[f"deployment-{first_name}.yaml"]["spec"]["template"]
        assert pod["metadata"]["labels"][LABEL_TENANT] == "tenant-a"  # the endpoint's tenant, on its pods
        command = manifests[f"deployment-{first_name}.yaml"]["spec"]["template"]["spec"]["containers"][0][
            "command"
        ]
        assert command[command.index("--max-num-seqs") + 1] == "32"
        assert _route_weights(manifests, name) == {first_name: 10_000}
        table = await routes(stack, name)  # the gateway's table points at the Service too
        assert table is not None and [(r.upstream_url, r.weight) for r in table.routes] == [
            (f"http://{first_name}.serving.svc.cluster.local:8000", 10_000)
        ]

        promote = pb.PromoteRequest(
            endpoint=name,
            request_id=uuid.uuid4().hex,
            engine_config=D.EngineConfig(max_num_seqs=64),
            skip_canary=True,
        )
        second = (await stack.stub.Promote(promote, metadata=stack.a)).deployment.id
        second_name = object_name(name, second)

        async def promoted() -> bool:
            states = {d.id: d.state for d in await deployments(stack, name)}
            return states == {second: D.DEPLOYMENT_STATE_ACTIVE, first: D.DEPLOYMENT_STATE_RETIRED}

        await eventually(promoted, what="the second deployment active")
        manifests = _manifests(folder)
        for kind in ("deployment", "service", "networkpolicy"):  # the stopped one's files are gone
            assert f"{kind}-{first_name}.yaml" not in manifests
            assert f"{kind}-{second_name}.yaml" in manifests
        assert _route_weights(manifests, name) == {second_name: 10_000}

        rollback = pb.RollbackRequest(endpoint=name, request_id=uuid.uuid4().hex)
        restored = (await stack.stub.Rollback(rollback, metadata=stack.a)).deployment.id

        async def rolled_back() -> bool:
            states = {d.id: d.state for d in await deployments(stack, name)}
            return states.get(restored) == D.DEPLOYMENT_STATE_ACTIVE and states[second] == (
                D.DEPLOYMENT_STATE_ROLLED_BACK
            )

        await eventually(rolled_back, what="the rollback's deployment active")
        manifests = _manifests(folder)
        restored_name = object_name(name, restored)
        assert _route_weights(manifests, name) == {restored_name: 10_000}
        restored_command = manifests[f"deployment-{restored_name}.yaml"]["spec"]["template"]["spec"][
            "containers"
        ][0]["command"]
        assert restored_command[restored_command.index("--max-num-seqs") + 1] == "32"
        assert f"deployment-{second_name}.yaml" not in manifests

        await stack.stub.DeleteEndpoint(pb.DeleteEndpointRequest(name=name), metadata=stack.a)

        async def emptied() -> bool:
            return not list(folder.glob("*.yaml"))

        await eventually(emptied, what="every manifest of the deleted endpoint removed")
    finally:
        await stop_stack(stack)


def test_check_refuses_what_the_cluster_cannot_run(tmp_path: Path) -> None:
    backend = KubernetesBackend(target=TARGET, hardware_classes=["h200"], dry_run_dir=tmp_path)

    def target(engine: EngineSpec, hardware: str = "h200") -> Target:
        return Target(deployment_id="dep-1", endpoint="voice", engine=engine, hardware_class=hardware)

    backend.check(target(EngineSpec(model="/m", max_num_seqs=8)))
    with pytest.raises(FailedPrecondition, match="serves h200, not 'b200'"):
        backend.check(target(EngineSpec(model="/m"), hardware="b200"))
    with pytest.raises(InvalidArgument, match="runs vLLM, not 'sim'"):
        backend.check(target(EngineSpec(kind="sim", model="/m")))


# --- against a local HTTP server standing in for the API server -------------------------------------


class FakeApiServer:
    """Keeps applied objects; answers a Deployment's status with `ready` replicas ready. A Deployment
    deleted in the foreground stays for `terminating_reads` reads of its status (its pods
    terminating), -1: for ever."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}  #: path -> body
        self.requests: list[tuple[str, str]] = []  #: (method, path)
        self.ready = True
        self.terminating_reads = 0
        self._terminating: dict[str, int] = {}  #: path -> reads left

    async def handle(self, request: web.Request) -> web.Response:
        path = request.path.removesuffix("/status")
        self.requests.append((request.method, request.path))
        if request.method == "PATCH":
            self.objects[path] = json.loads(await request.read())
            return web.json_response(self.objects[path])
        if request.method == "DELETE":
            if path not in self.objects:
                return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)
            if request.query.get("propagationPolicy") == "Foreground" and self.terminating_reads:
                self._terminating[path] = self.terminating_reads
            else:
                del self.objects[path]
            return web.json_response({"kind": "Status", "status": "Success"})
        if path in self._terminating:
            if self._terminating[path] == 0:
                del self._terminating[path], self.objects[path]
            else:
                self._terminating[path] -= 1
        body = self.objects.get(path)
        if body is None:
            return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)
        replicas = body["spec"].get("replicas", 1)
        ready = replicas if self.ready else 0
        status = {
            "observedGeneration": 1,
            "replicas": replicas,
            "readyReplicas": ready,
            "updatedReplicas": replicas,
        }
        return web.json_response(
            {**body, "metadata": {**body["metadata"], "generation": 1}, "status": status}
        )


@pytest.fixture
async def api_server(tmp_path: Path) -> AsyncIterator[tuple[FakeApiServer, Path]]:
    """The fake API server and a kubeconfig file pointing at it."""
    fake = FakeApiServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    try:
        yield fake, kubeconfig
    finally:
        await runner.cleanup()


async def test_the_backend_applies_waits_routes_and_deletes(api_server: tuple[FakeApiServer, Path]) -> None:
    fake, kubeconfig = api_server

    async def factory() -> Any:
        return await api_client_from_config(kubeconfig, None)

    backend = KubernetesBackend(
        target=TARGET, hardware_classes=["h200"], api_client=factory, ready_poll_s=0.05
    )
    target = Target(
        deployment_id="dep-0a1b2c3d4e5f",
        endpoint="voice",
        engine=EngineSpec(model="/models/llama-8b", replicas=2),
        hardware_class="h200",
    )
    name = object_name("voice", target.deployment_id)
    try:
        assert await backend.start(target) == [f"http://{name}.serving.svc.cluster.local:8000"]
        await backend.wait_ready(target.deployment_id, timeout_s=5.0)
        table = D.RouteTable(
            endpoint="voice",
            routes=[D.Route(deployment_id=target.deployment_id, upstream_url="u", weight=10_000)],
        )
        await backend.apply_routes(table)
        route_path = "/apis/gateway.networking.k8s.io/v1/namespaces/serving/httproutes/voice-route"
        assert fake.objects[route_path]["spec"]["rules"][0]["backendRefs"][0]["weight"] == 10_000
        assert backend.running() == {target.deployment_id}
        policy_path = f"/apis/networking.k8s.io/v1/namespaces/serving/networkpolicies/{name}"
        deployment_path = f"/apis/apps/v1/namespaces/serving/deployments/{name}"
        assert (
            fake.objects[policy_path]["spec"]["podSelector"]
            == fake.objects[deployment_path]["spec"]["selector"]
        )
        fake.terminating_reads = 2  # the pods take two status reads to go
        fake.requests.clear()
        await backend.stop(target.deployment_id)
        await backend.apply_routes(D.RouteTable(endpoint="voice"))
        assert fake.objects == {}  # NetworkPolicy, Deployment, Service and HTTPRoute deleted
        status = ("GET", f"{deployment_path}/status")
        assert fake.requests == [
            ("DELETE", deployment_path),
            ("DELETE", f"/api/v1/namespaces/serving/services/{name}"),
            status,  # still there: pods terminating
            status,
            status,  # gone
            ("DELETE", policy_path),  # only now
            ("DELETE", "/apis/gateway.networking.k8s.io/v1/namespaces/serving/httproutes/voice-route"),
        ]

        fake.terminating_reads = 0
        fake.ready = False  # pods that never get ready: the start fails and the objects go
        fake.requests.clear()
        await backend.start(target)
        assert fake.requests == [  # the policy first: no pod runs without it
            ("PATCH", policy_path),
            ("PATCH", deployment_path),
            ("PATCH", f"/api/v1/namespaces/serving/services/{name}"),
        ]
        with pytest.raises(EngineStartFailed, match=r"not ready after 0\.3 s") as caught:
            await backend.wait_ready(target.deployment_id, timeout_s=0.3)
        assert "ready replicas 0/2" in str(caught.value)
        assert fake.objects == {} and backend.running() == set()
    finally:
        await backend.close()


async def test_a_policy_outlives_its_pods_for_the_grace_period_at_most(
    api_server: tuple[FakeApiServer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pods that never go (a lost node): the policy is deleted after the grace period and a margin."""
    fake, kubeconfig = api_server
    monkeypatch.setattr(backend_kubernetes, "POLICY_GRACE_S", 0.2)

    async def factory() -> Any:
        return await api_client_from_config(kubeconfig, None)

    backend = KubernetesBackend(
        target=KubernetesTarget(namespace="serving", termination_grace_s=1),
        hardware_classes=["h200"],
        api_client=factory,
        ready_poll_s=0.05,
    )
    target = Target(
        deployment_id="dep-0a1b2c3d4e5f",
        endpoint="voice",
        engine=EngineSpec(model="/models/llama-8b"),
        hardware_class="h200",
    )
    name = object_name("voice", target.deployment_id)
    policy_path = f"/apis/networking.k8s.io/v1/namespaces/serving/networkpolicies/{name}"
    try:
        await backend.start(target)
        fake.terminating_reads = -1
        started = time.monotonic()
        await backend.stop(target.deployment_id)
        assert 1.2 <= time.monotonic() - started < 3.0
        assert policy_path not in fake.objects and ("DELETE", policy_path) == fake.requests[-1]
    finally:
        await backend.close()
