"""The shared metrics helper: a per-service registry served over HTTP, scraped for real."""

from __future__ import annotations

import aiohttp
import pytest
from prometheus_client import Counter
from prometheus_client.parser import text_string_to_metric_families

from evertune.errors import Unavailable
from evertune.infra.runtime.metrics import MetricsServer, by_label, exposition, new_registry


async def test_server_serves_its_registry_and_only_its_own() -> None:
    mine, other = new_registry(), new_registry()
    Counter("evertune_test_things", "Things", ["kind"], registry=mine).labels("a").inc(3)
    Counter("evertune_test_other", "Other", registry=other).inc()
    server = MetricsServer(mine, port=0)
    port = await server.start()
    try:
        assert port > 0 and server.url == f"http://127.0.0.1:{port}/metrics"
        async with aiohttp.ClientSession() as http, http.get(server.url) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain; version=")
            text = await resp.text()
        samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
        assert samples["evertune_test_things_total"].value == 3
        assert samples["evertune_test_things_total"].labels == {"kind": "a"}
        assert "evertune_test_other_total" not in samples  # one registry per service
        assert "python_gc_objects_collected_total" not in samples  # not the process-global one
        assert exposition(mine).decode() == text
        # a second server on the same port is refused with a one-line error
        clash = MetricsServer(mine, port=port)
        with pytest.raises(Unavailable, match=f"cannot listen on 127.0.0.1:{port}"):
            await clash.start()
    finally:
        await server.stop()
        await server.stop()  # idempotent


def test_by_label_shows_known_values_at_zero_then_the_others_counted() -> None:
    counted = {"error": 2, "novel": 1}
    assert by_label(counted, ("ok", "error"), 0) == {("ok",): 0, ("error",): 2, ("novel",): 1}
    assert list(by_label(counted, ("ok", "error"), 0)) == [("ok",), ("error",), ("novel",)]
    assert by_label({}, (), 0) == {}
