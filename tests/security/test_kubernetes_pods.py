"""The vLLM pods the Kubernetes backend renders download nothing and hold no privilege a model's
code could use (hole 4 of the security issue, in part): the hub's offline mode, no privilege
escalation, every capability dropped, the runtime's seccomp profile, no service account token, and
a non-root user when the target names one. Checked against the Kubernetes schemas.

Each deployment's NetworkPolicy fences its pods in (hole 4, the rest): in only from evertune's
gateway, deployer and profiler, out nowhere by default, so one tenant's engine (a model's code)
cannot reach another tenant's, nor anything else.
"""

from __future__ import annotations

from typing import Any

from evertune.deployer.kubernetes import (
    LABEL_TENANT,
    KubernetesTarget,
    Rendered,
    deployment_manifests,
    validate_manifest,
)
from evertune.domain.engines import EngineSpec, get_profile
from tests.deployer.helpers import gpu_rendered
from tests.deployer.netpol import Pod, applies_to, egress_allowed, ingress_allowed


def _pod(target: KubernetesTarget) -> dict:  # type: ignore[type-arg]
    rendered = gpu_rendered(target)
    validate_manifest(rendered.deployment, kubernetes_version=target.kubernetes_version)
    pod: dict = rendered.deployment["spec"]["template"]["spec"]  # type: ignore[type-arg]
    return pod


def test_pods_are_offline_and_unprivileged() -> None:
    pod = _pod(KubernetesTarget(namespace="serving", model_volume_claim="models"))
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["automountServiceAccountToken"] is False


def test_a_named_user_runs_non_root_and_hub_downloads_are_opt_in() -> None:
    pod = _pod(KubernetesTarget(namespace="serving", run_as_user=1000, allow_hub_downloads=True))
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000
    env = {e["name"] for e in pod["containers"][0]["env"]}
    assert "HF_HUB_OFFLINE" not in env


def _engine(target: KubernetesTarget, *, tenant: str, endpoint: str, deployment_id: str) -> Rendered:
    rendered = deployment_manifests(
        endpoint=endpoint,
        deployment_id=deployment_id,
        spec=EngineSpec(model="/models/m"),
        hardware=get_profile("h200"),
        target=target,
        tenant=tenant,
    )
    for manifest in rendered.manifests:
        validate_manifest(manifest, kubernetes_version=target.kubernetes_version)
    return rendered


def _engine_pod(rendered: Rendered, ip: str) -> Pod:
    template: dict[str, Any] = rendered.deployment["spec"]["template"]
    return Pod(
        labels=template["metadata"]["labels"], namespace=rendered.deployment["metadata"]["namespace"], ip=ip
    )


def _connects(source: tuple[Rendered, Pod], destination: tuple[Rendered, Pod], port: int = 8000) -> bool:
    """Both ends' policies must allow it: the source's egress and the destination's ingress."""
    return egress_allowed(source[0].network_policy, destination[1], port=port) and ingress_allowed(
        destination[0].network_policy, source[1], port=port
    )


def test_engines_of_two_tenants_cannot_reach_each_other() -> None:
    # even where an operator opened egress to everything: the ingress side holds
    for target in (
        KubernetesTarget(namespace="serving"),
        KubernetesTarget(namespace="serving", allow_dns=True, egress_cidrs=("0.0.0.0/0",)),
    ):
        a = _engine(target, tenant="team-a", endpoint="voice", deployment_id="dep-aaaaaaaaaaaa")
        b = _engine(target, tenant="team-b", endpoint="chat", deployment_id="dep-bbbbbbbbbbbb")
        ends = {"a": (a, _engine_pod(a, "10.0.0.10")), "b": (b, _engine_pod(b, "10.0.0.11"))}
        assert ends["a"][1].labels[LABEL_TENANT] == "team-a" and ends["b"][1].labels[LABEL_TENANT] == "team-b"
        assert applies_to(a.network_policy, ends["a"][1]) and not applies_to(a.network_policy, ends["b"][1])
        assert not _connects(ends["a"], ends["b"]) and not _connects(ends["b"], ends["a"])
        gateway = Pod(
            labels={"app.kubernetes.io/name": "gateway", "app.kubernetes.io/part-of": "evertune"},
            namespace="serving",
        )
        assert ingress_allowed(a.network_policy, gateway, port=8000)
        assert ingress_allowed(b.network_policy, gateway, port=8000)


def test_engine_pods_open_no_connection_by_default() -> None:
    rendered = _engine(
        KubernetesTarget(namespace="serving"), tenant="team-a", endpoint="v", deployment_id="d1"
    )
    policy = rendered.network_policy
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"] and policy["spec"]["egress"] == []
    for destination in (
        Pod(ip="169.254.169.254"),
        Pod(ip="8.8.8.8"),
        Pod(labels={"k8s-app": "kube-dns"}, namespace="kube-system"),
    ):
        for port, protocol in ((53, "UDP"), (80, "TCP"), (443, "TCP")):
            assert not egress_allowed(policy, destination, port=port, protocol=protocol)
