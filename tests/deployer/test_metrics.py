"""The deployer's /metrics, scraped for real after a real rollout (a slow canary rolled back by its
analysis) on the session's NATS and chDB, with its stand-in engines' own metrics labelled."""

from __future__ import annotations

from evertune.apps.harness.waiting import eventually
from evertune.infra.store import Store
from evertune.v1 import endpoint_pb2 as D
from tests.deployer.conftest import Stack
from tests.deployer.test_progressive import _promote, _ready_endpoint, _states, traffic
from tests.metrics import Samples, samples_of, scrape, scrape_text, types_of, value


async def test_rollout_steps_analyses_rollbacks_states_and_engine_metrics_are_scraped(
    canary_stack: Stack, store: Store
) -> None:
    stack = canary_stack
    url = stack.service.metrics_url()
    assert url.startswith("http://127.0.0.1:") and not url.endswith(":9405/metrics")  # a free port
    name, first = await _ready_endpoint(stack)
    ready = await scrape(url)
    # the stand-in engine's own series, labelled with where it came from
    engine = {"endpoint": name, "deployment": first, "replica": "0"}
    assert value(ready, "vllm:num_requests_running", engine="0", model_name=name, **engine) == 0
    assert value(ready, "evertune_deployer_engine_up", **engine) == 1
    assert value(ready, "evertune_deployer_endpoints", state="ready") >= 1
    assert value(ready, "evertune_deployer_deployments", state="active") >= 1
    canary_id: list[str] = []
    async with traffic(stack, store, name, lambda d: 150.0 if d in canary_id else 50.0):
        canary_id.append(await _promote(stack, name, max_num_seqs=2))
        canary = canary_id[0]
        during: Samples = {}

        async def canary_scraped() -> bool:  # once its engine answers (it starts, then gets ready)
            during.update(await scrape(url))
            up = ("evertune_deployer_engine_up", tuple(sorted({**engine, "deployment": canary}.items())))
            return during.get(up) == 1

        await eventually(canary_scraped, timeout_s=15, what="the canary's engine scraped")
        expected = {canary: D.DEPLOYMENT_STATE_ROLLED_BACK, first: D.DEPLOYMENT_STATE_ACTIVE}
        await eventually(lambda: _states(stack, name, expected), timeout_s=30, what="the canary rolled back")
    # both engines ran side by side: one family, a series each
    running = [k for k in during if k[0] == "vllm:num_requests_running" and ("endpoint", name) in k[1]]
    assert {dict(labels)["deployment"] for _, labels in running} == {first, canary}
    await eventually(lambda: _engines(stack, 1), timeout_s=15, what="the canary's engine stopped")
    text = await scrape_text(url)
    samples = samples_of(text)
    types = types_of(text)
    assert types["evertune_deployer_canary_analysis_seconds"] == "histogram"
    assert types["vllm:num_requests_running"] == "gauge"
    assert value(samples, "evertune_deployer_rollout_steps_total") >= 1
    assert value(samples, "evertune_deployer_canary_analyses_total", verdict="roll_back") == 1
    analyses = sum(v for (n, _), v in samples.items() if n == "evertune_deployer_canary_analyses_total")
    assert value(samples, "evertune_deployer_canary_analysis_seconds_count") == analyses
    assert 0 < value(samples, "evertune_deployer_canary_analysis_seconds_sum") < 10 * analyses
    assert value(samples, "evertune_deployer_rollbacks_total", reason="canary_analysis") == 1
    assert value(samples, "evertune_deployer_events_published_total", kind="deploy.rolled_back") == 1
    assert value(samples, "evertune_deployer_events_published_total", kind="deploy.started") == 2
    assert value(samples, "evertune_deployer_events_published_total", kind="endpoint.created") == 1
    assert value(samples, "evertune_deployer_deployments", state="rolled_back") >= 1
    assert value(samples, "evertune_deployer_engines_running") == 1
    assert (
        "evertune_deployer_engine_up",
        tuple(sorted({**engine, "deployment": canary}.items())),
    ) not in samples
    failures = {
        dict(labels)["kind"]
        for (n, labels), v in samples.items()
        if n == "evertune_deployer_failures_total" and v
    }
    assert failures <= {"engine_scrape"}  # (the canary's engine was scraped while it started)
    assert ("evertune_deployer_messages_acked_total", (("consumer", "deployer-sla-breach"),)) in samples


async def _engines(stack: Stack, count: int) -> bool:
    return len(stack.service.engine_replicas()) == count
