from __future__ import annotations

from pathlib import Path

import pytest

from evertune.errors import SettingsError
from evertune.infra.bus import connect, declare, load_definitions, publish
from evertune.infra.nats_server import EmbeddedNats


async def test_declaring_twice_changes_nothing(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    try:
        nc = await connect(server.url, name="t")
        js = nc.jetstream()
        definitions = load_definitions()
        first = await declare(js, definitions)
        names = {s.name for s in definitions.streams} | {f"KV_{b.bucket}" for b in definitions.buckets}
        assert set(first.created) == names and not first.updated

        await publish(js, "evertune.events.sla.breach.e1", b"kept", msg_id="m-1")
        before = {s.name: await js.stream_info(s.name) for s in definitions.streams}

        second = await declare(js, definitions)
        assert second.created == () and second.updated == ()
        assert set(second.unchanged) == names
        for name, info in before.items():
            again = await js.stream_info(name)
            assert again.state.messages == info.state.messages
            assert again.created == info.created
            assert again.config.subjects == info.config.subjects
        await nc.close()
    finally:
        await server.stop()


async def test_changed_definition_updates_in_place_and_keeps_messages(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    try:
        nc = await connect(server.url, name="t")
        js = nc.jetstream()
        definitions = load_definitions()
        await declare(js, definitions)
        await publish(js, "evertune.events.sla.breach.e1", b"kept", msg_id="m-1")
        events = next(s for s in definitions.streams if s.name == "EVENTS")
        changed = type(definitions)(
            streams=tuple(
                type(s)(**{**s.__dict__, "max_age_s": s.max_age_s * 2}) if s is events else s
                for s in definitions.streams
            ),
            buckets=definitions.buckets,
        )
        report = await declare(js, changed)
        assert report.updated == ("EVENTS",)
        info = await js.stream_info("EVENTS")
        assert info.config.max_age == events.max_age_s * 2
        assert info.state.messages == 1
        await nc.close()
    finally:
        await server.stop()


def test_malformed_definitions_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "jetstream.toml"
    bad.write_text("[[stream]]\nname = 'X'\n")  # no subjects
    with pytest.raises(SettingsError, match=str(bad)) as caught:
        load_definitions(bad)
    assert "\n" not in str(caught.value)
