from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from evertune.errors import SettingsError
from evertune.infra.logging import bound_ids, get_logger
from evertune.infra.settings import SharedSettings, load_settings
from evertune.runner import RunnerSettings


def test_defaults_point_the_store_under_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVERTUNE_DATA_DIR", str(tmp_path))
    shared = load_settings(SharedSettings)
    assert shared.store_url == f"chdb://{tmp_path.resolve()}/clickhouse"
    assert shared.nats_url == ""


@pytest.mark.parametrize(
    ("variable", "value", "fragment"),
    [
        ("EVERTUNE_NATS_URL", "localhost:4222", "not a NATS URL"),
        ("EVERTUNE_CLICKHOUSE_URL", "mysql://db", "chdb://"),
        ("EVERTUNE_SHUTDOWN_TIMEOUT_S", "0", "greater than 0"),
        ("EVERTUNE_LOG_FORMAT", "xml", "json"),
    ],
)
def test_invalid_shared_setting_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, fragment: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as caught:
        load_settings(SharedSettings)
    message = str(caught.value)
    assert message.startswith(f"invalid setting {variable}:") and fragment in message
    assert "\n" not in message


def test_service_settings_use_their_own_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVERTUNE_RUNNER_HARDWARE", "h200")
    assert load_settings(RunnerSettings).hardware == "h200"
    monkeypatch.setenv("EVERTUNE_RUNNER_HARDWARE", "H 200")
    with pytest.raises(SettingsError, match="EVERTUNE_RUNNER_HARDWARE"):
        load_settings(RunnerSettings)


def test_bound_ids_reach_every_log_line_in_the_block() -> None:
    log = get_logger("evertune.test")
    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        with bound_ids(endpoint="voice-eu", deployment="d-1", request=""):
            log.info("inside")
        log.info("outside")
    assert logs[0]["endpoint"] == "voice-eu" and logs[0]["deployment"] == "d-1"
    assert "request" not in logs[0]
    assert "endpoint" not in logs[1]
