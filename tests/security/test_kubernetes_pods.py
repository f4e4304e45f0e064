"""The vLLM pods the Kubernetes backend renders download nothing and hold no privilege a model's
code could use (hole 4 of the security issue, in part): the hub's offline mode, no privilege
escalation, every capability dropped, the runtime's seccomp profile, no service account token, and
a non-root user when the target names one. Checked against the Kubernetes schemas."""

from __future__ import annotations

from evertune.deployer.kubernetes import KubernetesTarget, validate_manifest

from tests.deployer.helpers import gpu_rendered


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
