"""The searcher's /metrics, scraped for real after a real search (profile.ready, trials on a sim
runner, search.completed) on the session's NATS and chDB."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.infra.bus import publish_event
from evertune.infra.events import EventKind, new_event
from evertune.infra.store import Store, migrate
from evertune.searcher.service import SearcherService
from evertune.v1 import endpoint_pb2
from evertune.v1 import search_service_pb2 as pb
from evertune.v1 import search_service_pb2_grpc as pb_grpc
from tests.metrics import samples_of, scrape, scrape_text, types_of, value

from .stack import make_endpoint, make_searcher, running, sim_runner, store_profile
from .test_service import _wait_for_search


async def test_a_search_is_counted_timed_and_its_trials_too(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path, searcher_model_dir: Path
) -> None:
    await migrate(store)
    endpoint = await make_endpoint(
        js, policy=endpoint_pb2.SEARCH_POLICY_ADVISORY, objective=endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT
    )
    ready = await store_profile(store, endpoint, searcher_model_dir)
    runner = sim_runner(searcher_model_dir)
    searcher: SearcherService = make_searcher(tmp_path, rate_ladder=(1.0,))
    async with running(runner, nc, store), running(searcher, nc, store):
        url = searcher.metrics_url()
        assert url and not url.endswith(":9403/metrics")  # tests take free ports
        empty = await scrape(url)
        assert value(empty, "evertune_searcher_searches_running") == 0
        ready_event = new_event(
            EventKind.PROFILE_READY, endpoint=endpoint, source="profiler", payload_message=ready
        )
        await publish_event(js, ready_event)
        # a profile of an endpoint nobody created starts nothing
        stray = new_event(
            EventKind.PROFILE_READY, endpoint="ep-nobody", source="profiler", payload_message=ready
        )
        await publish_event(js, stray)
        async with grpc.aio.insecure_channel(searcher.grpc.address) as channel:
            stub = pb_grpc.SearchServiceStub(channel)  # type: ignore[no-untyped-call]
            search_id = await _wait_for_search(stub, endpoint)
            during = await scrape(url)
            async with asyncio.timeout(120):
                async for _ in stub.WatchSearch(pb.WatchSearchRequest(search_id=search_id, replay=True)):
                    pass
            got = (await stub.GetSearch(pb.GetSearchRequest(search_id=search_id))).search
        text = await scrape_text(url)
        runner_samples = await scrape(runner.metrics_url())
    assert value(during, "evertune_searcher_searches_running") == 1
    samples = samples_of(text)
    types = types_of(text)
    assert types["evertune_searcher_search_duration_seconds"] == "histogram"
    assert types["evertune_searcher_searches"] == "counter"
    assert value(samples, "evertune_searcher_searches_total", outcome="winner") == 1
    assert value(samples, "evertune_searcher_searches_running") == 0
    count = value(samples, "evertune_searcher_search_duration_seconds_count", outcome="winner")
    seconds = value(samples, "evertune_searcher_search_duration_seconds_sum", outcome="winner")
    assert count == 1 and 1.0 < seconds < 120.0
    trials = got.trials_completed
    assert trials == 3
    assert value(samples, "evertune_searcher_search_trials_sum") == trials
    assert value(samples, "evertune_searcher_search_trials_bucket", le="2.0") == 0
    assert value(samples, "evertune_searcher_search_trials_bucket", le="5.0") == 1
    assert value(samples, "evertune_searcher_jobs_published_total") == trials
    assert value(samples, "evertune_searcher_trial_reports_total") == trials
    assert value(samples, "evertune_searcher_trials_waiting") == 0
    assert value(samples, "evertune_searcher_events_published_total", kind="search.started") == 1
    assert value(samples, "evertune_searcher_events_published_total", kind="search.completed") == 1
    assert value(samples, "evertune_searcher_profiles_total", result="started") == 1
    assert value(samples, "evertune_searcher_profiles_total", result="skipped") >= 1
    durable = next(iter(searcher.consumers)).removesuffix("-trials")  # the test's own prefix
    assert value(samples, "evertune_searcher_messages_acked_total", consumer=f"{durable}-trials") >= trials
    assert value(samples, "evertune_searcher_messages_acked_total", consumer=f"{durable}-profiles") >= 2
    assert not any(v for (name, _), v in samples.items() if name == "evertune_searcher_failures_total")
    # the runner took the same trials, each through its phases on the sim engine
    ran = sum(v for (name, _), v in runner_samples.items() if name == "evertune_runner_trials_total")
    assert ran == trials
    assert value(runner_samples, "evertune_runner_trial_phase_seconds_count", phase="replay") == trials
