"""The day scenario format: the shipped days read, every bad setting is one line naming file and
setting, the load curve and the compression."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from evertune.apps.day.scenario import (
    HOUR_S,
    ColdCallers,
    Load,
    NatsRestart,
    ScenarioError,
    load_scenario,
    parse_scenario,
    shipped,
    shipped_names,
)

DAY: dict[str, Any] = {
    "name": "test-day",
    "wall_minutes": 60,
    "quick_wall_minutes": 30,
    "load": {"curve": [[0, 0.3], [12, 1.3], [24, 0.3]]},
    "endpoints": [
        {
            "name": "voice",
            "tenant": "acme",
            "model": "tiny",
            "engine": "sim",
            "hardware": "sim-cpu",
            "peak_calls_per_s": 1.0,
            "workload": {"agents": 2},
        },
    ],
    "changes": [
        {"at": "15:00", "endpoint": "voice", "kind": "cold_callers", "share": 0.25},
        {"at": "09:00", "endpoint": "voice", "kind": "persona_joins", "share": 0.3, "factor": 4},
    ],
    "faults": [{"at": "09:00", "kind": "nats_restart", "down_s": 60}],
}


def test_the_shipped_days_read() -> None:
    assert list(shipped_names()) == ["fleet-day", "voice-day"]
    voice, fleet = shipped("voice-day"), shipped("fleet-day")
    assert [e.engine for e in voice.endpoints] == ["vllm"] and voice.endpoints[0].model == "smollm2-135m"
    assert voice.compression(quick=True) * 60 <= 24 * 60  # the quick day fits 60 wall-minutes
    assert len(fleet.endpoints) >= 20 and len({e.tenant for e in fleet.endpoints}) == 5
    assert {e.engine for e in fleet.endpoints} == {"sim"} and fleet.day_hours == 24
    assert fleet.compression() == 24.0  # 24 h of day in 60 wall-minutes
    for day in (voice, fleet):
        kinds = {event.kind for _, event in day.timeline()}
        assert {"nats_restart", "runner_killed", "deployer_restarted", "store_unavailable"} <= kinds


def test_timeline_load_and_compression() -> None:
    day = parse_scenario(DAY, source="test")
    assert not isinstance(day.timeline()[0][1], NatsRestart)  # at one time, the change first
    assert [at / HOUR_S for at, _ in day.timeline()] == [9, 9, 15]
    assert isinstance(day.timeline()[-1][1], ColdCallers)
    assert day.compression() == 24.0 and day.compression(quick=True) == 48.0
    load = Load(curve=[(0, 0.3), (12, 1.3), (24, 0.3)])
    assert load.multiple(0) == 0.3 and load.multiple(12) == 1.3 and load.multiple(6) == pytest.approx(0.8)
    assert load.multiple(30) == 0.3


def _changed(path: list[Any], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(DAY)
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["changes", 0, "kind"], "colder_callers", "changes.0: Input tag 'colder_callers'"),
        (["changes", 0, "at"], "25:00", "changes.0: at '25:00': a day-time HH:MM"),
        (["changes", 0, "endpoint"], "text", "changes.0: no endpoint 'text' (known: voice)"),
        (["changes", 0, "share"], 1.5, "changes.0.share: Input should be less than or equal to 1"),
        (["faults", 0, "down_s"], -1, "faults.0.down_s: Input should be greater than 0"),
        (["faults", 0, "at"], "24:00", "faults.0: at 24:00 is past the day's 24 h"),
        (["endpoints", 0, "name"], "Voice", "endpoints.0: name 'Voice': lower-case letters"),
        (["endpoints", 0, "model"], "gpt-9", "endpoints.0.model: Input should be 'tiny', 'small'"),
        (["endpoints", 0, "hardware"], "cpu", "endpoints.0: engine sim cannot run on cpu"),
        (["endpoints", 0, "workload"], {"agents": 0}, "invalid voice workload: agents"),
        (["endpoints", 0, "workload"], {"seed": 3}, "workload.seed is the day's to set"),
        (["endpoints", 0, "workload"], {"agentz": 3}, "invalid voice workload: agentz"),
        (["load", "curve"], [[1, 0.3], [24, 1]], "load: hours must start at 0 and rise"),
        (["load", "curve"], [[0, 0.3], [12, 1]], "load.curve ends at hour 12"),
        (["wall_minutes"], 0, "wall_minutes: Input should be greater than 0"),
        (["endpoints"], [DAY["endpoints"][0]] * 2, "endpoint names repeat: ['voice']"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(path: list[Any], value: Any, message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(_changed(path, value), source="day.toml")
    text = str(caught.value)
    assert text.startswith("scenario day.toml: ") and message in text and "\n" not in text, text


def test_a_file_that_is_not_there_or_not_toml(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"scenario .*missing.toml: cannot read it"):
        load_scenario(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("name = \n")
    with pytest.raises(ScenarioError, match=r"scenario .*broken.toml: not TOML"):
        load_scenario(broken)
    with pytest.raises(
        ScenarioError, match=r"no shipped scenario 'noon-day' \(shipped: fleet-day, voice-day\)"
    ):
        shipped("noon-day")
