"""The deployer's rollout and kubernetes settings, and the `requests` bucket's TTL from the
JetStream definitions."""

from __future__ import annotations

import json

import pytest
from nats.js import JetStreamContext
from structlog.testing import capture_logs

from evertune.deployer.rollout_policy import RolloutPolicy
from evertune.deployer.settings import RENAMED_ROLLOUT, DeployerSettings, renamed_variable
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


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED_ROLLOUT.items()))
def test_each_renamed_variable_still_works_with_a_warning_naming_the_new_one(
    monkeypatch: pytest.MonkeyPatch, old: str, new: str
) -> None:
    value = RolloutPolicy.model_fields[new].default
    raw = json.dumps(list(value) if isinstance(value, tuple) else value)
    alternative = {"steps": "[2000, 10000]", "step_duration_s": "7.5", "p_value": "0.02"}.get(new, "")
    monkeypatch.setenv(f"EVERTUNE_DEPLOYER_{old.upper()}", alternative or raw)
    with capture_logs() as logs:
        policy = load_settings(DeployerSettings).rollout
    expected = json.loads(alternative or raw)
    assert getattr(policy, new) == (tuple(expected) if isinstance(expected, list) else expected)
    (warning,) = [e for e in logs if e["log_level"] == "warning"]
    assert warning["old"] == f"EVERTUNE_DEPLOYER_{old.upper()}"
    assert warning["new"] == f"EVERTUNE_DEPLOYER_ROLLOUT__{new.upper()}" == renamed_variable(old)


def test_a_new_variable_wins_over_its_old_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVERTUNE_DEPLOYER_CANARY_P_VALUE", "0.02")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_ROLLOUT__P_VALUE", "0.03")
    monkeypatch.setenv("EVERTUNE_DEPLOYER_ROLLOUT_MAX_HOLDS", "9")  # old alone: taken
    policy = load_settings(DeployerSettings).rollout
    assert policy.p_value == 0.03 and policy.max_holds == 9


def test_old_keywords_go_to_the_nested_policy_with_a_warning() -> None:
    with capture_logs() as logs:
        settings = DeployerSettings(rollout_step_duration_s=0.5, canary_min_requests=7)  # type: ignore[call-arg]
    assert settings.rollout.step_duration_s == 0.5 and settings.rollout.min_requests == 7
    assert {e["old"] for e in logs if e["log_level"] == "warning"} == {
        "rollout_step_duration_s",
        "canary_min_requests",
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
