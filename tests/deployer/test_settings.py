"""The deployer's rollout and kubernetes settings (and their previous flat names), and the
`requests` bucket's TTL from the JetStream definitions."""

from __future__ import annotations

import json

import pytest
from nats.js import JetStreamContext
from structlog.testing import capture_logs

from evertune.deployer.kubernetes import KubernetesTarget
from evertune.deployer.rollout_policy import RolloutPolicy
from evertune.deployer.settings import RENAMED, DeployerSettings, KubernetesSettings, renamed_variable
from evertune.errors import SettingsError
from evertune.infra.settings import load_settings


def test_the_rollout_policy_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVERTUNE_DEPLOYER_ROLLOUT__STEPS", "[500, 2500, 10000]")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_ROLLOUT__STEP_DURATION_S", "30")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_ROLLOUT__MIN_REQUESTS", "50")
    with capture_logs() as logs:
        policy = load_settings(DeployerSettings).rollout
    assert policy.steps == (500, 2500, 10000) and policy.step_duration_s == 30
    assert policy.min_requests == 50 and policy.max_ttft_regression == 0.10
    assert not [e for e in logs if e["log_level"] == "warning"]


#: A value other than the default for each renamed setting, as its variable holds it (the rest
#: of the rollout's: the default, as JSON).
CHANGED = {
    ("rollout", "steps"): "[2000, 10000]",
    ("rollout", "step_duration_s"): "7.5",
    ("rollout", "p_value"): "0.02",
    ("kubernetes", "kubeconfig"): "/etc/kube/config",
    ("kubernetes", "context"): "production",
    ("kubernetes", "dry_run_dir"): "/tmp/manifests",
    ("kubernetes", "hardware_classes"): '["h100", "h200"]',
    ("kubernetes", "namespace"): "serving",
    ("kubernetes", "image"): "vllm/vllm-openai:v0.33.0",
    ("kubernetes", "gateway_name"): "edge",
    ("kubernetes", "gateway_namespace"): "gateways",
    ("kubernetes", "hostname"): "llm.example.com",
    ("kubernetes", "kubernetes_version"): "1.32",
    ("kubernetes", "accelerator_resource"): "amd.com/gpu",
    ("kubernetes", "model_volume_claim"): "models",
    ("kubernetes", "model_mount_path"): "/weights",
    ("kubernetes", "termination_grace_s"): "60",
    ("kubernetes", "startup_timeout_s"): "900",
    ("kubernetes", "cpu_cores"): "4",
    ("kubernetes", "cpu_memory_gib"): "16",
    ("kubernetes", "run_as_user"): "1000",
    ("kubernetes", "allow_hub_downloads"): "true",
    ("kubernetes", "caller_labels"): '[{"app.kubernetes.io/name": "router"}]',
    ("kubernetes", "caller_namespace"): "callers",
    ("kubernetes", "ingress_peers"): '[{"ipBlock": {"cidr": "10.1.0.0/16"}}]',
    ("kubernetes", "allow_dns"): "true",
    ("kubernetes", "egress_cidrs"): '["10.0.0.0/8"]',
}


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED.items()))
def test_each_renamed_variable_still_works_with_a_warning_naming_the_new_one(
    monkeypatch: pytest.MonkeyPatch, old: str, new: tuple[str, str]
) -> None:
    group, field = new
    raw = CHANGED.get(new)
    if raw is None:
        assert group == "rollout", f"no changed value for {old}"
        value = RolloutPolicy.model_fields[field].default
        raw = json.dumps(list(value) if isinstance(value, tuple) else value)
    variable = f"EVERTUNE_DEPLOYER_{group.upper()}__{field.upper()}"
    monkeypatch.setenv(variable, raw)
    expected = getattr(getattr(load_settings(DeployerSettings), group), field)
    assert group == "rollout" or expected != KubernetesSettings.model_fields[field].get_default(
        call_default_factory=True
    )
    monkeypatch.delenv(variable)
    monkeypatch.setenv(f"EVERTUNE_DEPLOYER_{old.upper()}", raw)
    with capture_logs() as logs:
        settings = load_settings(DeployerSettings)
    assert getattr(getattr(settings, group), field) == expected
    (warning,) = [e for e in logs if e["log_level"] == "warning"]
    assert warning["old"] == f"EVERTUNE_DEPLOYER_{old.upper()}"
    assert warning["new"] == variable == renamed_variable(old)


def test_a_new_variable_wins_over_its_old_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVERTUNE_DEPLOYER_CANARY_P_VALUE", "0.02")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_ROLLOUT__P_VALUE", "0.03")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_ROLLOUT_MAX_HOLDS", "9")  # old alone: taken
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES_NAMESPACE", "old")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES__NAMESPACE", "new")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES_CPU_CORES", "4")  # old alone: taken
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES_CALLER_NAMESPACE", "")  # empty: unset, as before
    settings = load_settings(DeployerSettings)
    assert settings.rollout.p_value == 0.03 and settings.rollout.max_holds == 9
    assert settings.kubernetes.namespace == "new" and settings.kubernetes.cpu_cores == 4
    assert settings.kubernetes.caller_namespace is None


def test_old_keywords_go_to_the_nested_groups_with_a_warning() -> None:
    with capture_logs() as logs:
        settings = DeployerSettings(  # type: ignore[call-arg]
            rollout_step_duration_s=0.5,
            canary_min_requests=7,
            kubernetes_namespace="serving",
            kubernetes_hardware_classes=["h100"],
            kubernetes=KubernetesSettings(image="vllm/vllm-openai:v0.33.0"),
        )
    assert settings.rollout.step_duration_s == 0.5 and settings.rollout.min_requests == 7
    assert settings.kubernetes.namespace == "serving" and settings.kubernetes.hardware_classes == ("h100",)
    assert settings.kubernetes.image == "vllm/vllm-openai:v0.33.0"
    assert {(e["old"], e["new"]) for e in logs if e["log_level"] == "warning"} == {
        ("rollout_step_duration_s", "rollout={'step_duration_s': ...}"),
        ("canary_min_requests", "rollout={'min_requests': ...}"),
        ("kubernetes_namespace", "kubernetes={'namespace': ...}"),
        ("kubernetes_hardware_classes", "kubernetes={'hardware_classes': ...}"),
    }


def test_bad_rollout_steps_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVERTUNE_DEPLOYER_ROLLOUT__STEPS", "[1000, 5000]")
    with pytest.raises(SettingsError) as caught:
        load_settings(DeployerSettings)
    message = str(caught.value)
    assert message.startswith("invalid setting EVERTUNE_DEPLOYER_ROLLOUT__STEPS:")
    assert "must strictly increase and end at 10000" in message and "\n" not in message


def test_a_rollout_bound_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVERTUNE_DEPLOYER_ROLLOUT__P_VALUE", "1.5")
    with pytest.raises(SettingsError, match=r"^invalid setting EVERTUNE_DEPLOYER_ROLLOUT__P_VALUE: "):
        load_settings(DeployerSettings)


def test_kubernetes_settings_make_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVERTUNE_DEPLOYER_BACKEND", "kubernetes")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES__NAMESPACE", "serving")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES__MODEL_VOLUME_CLAIM", "models")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES__CONTEXT", "production")
    with capture_logs() as logs:
        settings = load_settings(DeployerSettings)
    target = settings.kubernetes_target()
    assert settings.backend == "kubernetes" and settings.kubernetes.context == "production"
    assert type(target) is KubernetesTarget
    assert target.namespace == "serving" and target.model_volume_claim == "models"
    assert not [e for e in logs if e["log_level"] == "warning"]
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES__NAMESPACE", "Not_A_Label")
    with pytest.raises(SettingsError) as caught:
        load_settings(DeployerSettings)
    message = str(caught.value)
    assert message.startswith("invalid setting EVERTUNE_DEPLOYER_KUBERNETES__NAMESPACE:")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("CPU_CORES", "0", "greater than or equal to 1"),
        ("INGRESS_PEERS", '[{"ipBlock": {"cidr": 10}}]', "cidr"),
        ("CONTEXTS", "production", "Extra inputs"),  # a misspelt name is refused, not ignored
    ],
)
def test_a_bad_kubernetes_setting_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(f"EVERTUNE_DEPLOYER_KUBERNETES__{variable}", value)
    with pytest.raises(SettingsError) as caught:
        load_settings(DeployerSettings)
    message = str(caught.value)
    assert message.startswith(f"invalid setting EVERTUNE_DEPLOYER_KUBERNETES__{variable}: ")
    assert expected in message and "\n" not in message


async def test_request_ids_expire_after_48_hours(js: JetStreamContext) -> None:
    status = await (await js.key_value("requests")).status()
    assert status.ttl == 48 * 3600
