"""The deployer's rollout and kubernetes settings, and the `requests` bucket's TTL from the
JetStream definitions."""

from __future__ import annotations

import pytest
from evertune.deployer.settings import DeployerSettings
from nats.js import JetStreamContext

from evertune.errors import SettingsError
from evertune.infra.settings import load_settings


def test_the_rollout_policy_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVERTUNE_DEPLOYER_ROLLOUT_STEPS", "[500, 2500, 10000]")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_ROLLOUT_STEP_DURATION_S", "30")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_CANARY_MIN_REQUESTS", "50")
    policy = load_settings(DeployerSettings).rollout_policy()
    assert policy.steps == (500, 2500, 10000) and policy.step_duration_s == 30
    assert policy.canary.min_requests == 50 and policy.canary.max_ttft_regression == 0.10


def test_bad_rollout_steps_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVERTUNE_DEPLOYER_ROLLOUT_STEPS", "[1000, 5000]")
    with pytest.raises(SettingsError) as caught:
        load_settings(DeployerSettings)
    message = str(caught.value)
    assert message.startswith("invalid setting EVERTUNE_DEPLOYER_ROLLOUT_STEPS:")
    assert "the last step must be 10000" in message and "\n" not in message


def test_kubernetes_settings_make_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVERTUNE_DEPLOYER_BACKEND", "kubernetes")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES_NAMESPACE", "serving")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES_MODEL_VOLUME_CLAIM", "models")
    settings = load_settings(DeployerSettings)
    target = settings.kubernetes_target()
    assert settings.backend == "kubernetes"
    assert target.namespace == "serving" and target.model_volume_claim == "models"
    monkeypatch.setenv("EVERTUNE_DEPLOYER_KUBERNETES_NAMESPACE", "Not_A_Label")
    with pytest.raises(SettingsError, match="EVERTUNE_DEPLOYER_KUBERNETES_NAMESPACE"):
        load_settings(DeployerSettings)


async def test_request_ids_expire_after_48_hours(js: JetStreamContext) -> None:
    status = await (await js.key_value("requests")).status()
    assert status.ttl == 48 * 3600
