"""The searcher service on the session's NATS and chDB, with a real runner on the `sim-cpu` class:
a profile.ready starts a search, trials run on the runner (the performance model served as an
engine, replayed in real time), the search ends with search.completed, and everything can be read
back over gRPC, also by a searcher started afterwards."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import grpc
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.apps.cli import main
from evertune.apps.harness.waiting import eventually
from evertune.deployer.winner_check import StoredWinners
from evertune.infra.bus import publish_event
from evertune.infra.events import EventKind, new_event
from evertune.infra.store import Store, migrate
from evertune.searcher.searches import SearchSupervisor
from evertune.searcher.service import SearcherService
from evertune.v1 import endpoint_pb2, events_pb2
from evertune.v1 import search_service_pb2 as pb
from evertune.v1 import search_service_pb2_grpc as pb_grpc

from .stack import make_endpoint, make_searcher, running, sim_runner, store_profile, uid_of


async def test_profile_ready_runs_a_search_on_a_sim_runner_to_a_verified_record(
    nc: Client, js: JetStreamContext, store: Store, tmp_path: Path, data_dir: Path, searcher_model_dir: Path
) -> None:
    await migrate(store)
    endpoint = await make_endpoint(
        js, policy=endpoint_pb2.SEARCH_POLICY_ADVISORY, objective=endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT
    )
    ready = await store_profile(store, endpoint, searcher_model_dir)
    runner = sim_runner(searcher_model_dir)
    # Lowest p50 TTFT at the peak (the SLO still has to hold at peak x 1.25): a search with two
    # rates a trial, short enough for the fast suite. The objective is the endpoint's; the searcher's
    # own default stays goodput.
    searcher = make_searcher(tmp_path, rate_ladder=(1.0,))
    async with running(runner, nc, store), running(searcher, nc, store):
        event = new_event(
            EventKind.PROFILE_READY, endpoint=endpoint, source="profiler", payload_message=ready
        )
        await publish_event(js, event)
        async with grpc.aio.insecure_channel(searcher.grpc.address) as channel:
            stub = pb_grpc.SearchServiceStub(channel)  # type: ignore[no-untyped-call]
            search_id = await _wait_for_search(stub, endpoint)
            events = []
            async with asyncio.timeout(120):
                async for e in stub.WatchSearch(pb.WatchSearchRequest(search_id=search_id, replay=True)):
                    events.append(e)
            got = (await stub.GetSearch(pb.GetSearchRequest(search_id=search_id))).search
            listed = (await stub.ListSearches(pb.ListSearchesRequest(endpoint=endpoint))).searches
    kinds = [e.kind for e in events]
    assert kinds[0] == "search.started" and kinds[-1] == "search.completed"
    # round 0: the live configuration, the model's best and vLLM's defaults (a fifth configuration
    # beside the space's 4, since the live one sets its knobs by hand; the third trial fits them)
    assert kinds.count("trial.completed") == 3 and "trial.progress" in kinds
    started, done = events[0].search_started, events[-1].search_completed
    assert started.trigger == "profile.ready" and events[0].cause_id == event.id
    assert started.trial_budget == 3 and started.candidates >= 1
    # The voice agents resend their prompts: prefix caching cuts the median TTFT by far more than 5%.
    assert done.outcome == events_pb2.SEARCH_OUTCOME_WINNER, got.error
    assert done.winner.enable_prefix_caching and not done.verified  # sim figures verify nothing
    assert done.winner_hardware_class == "sim-cpu" and done.trials == 3
    assert done.defaults_trial_id.startswith(f"{search_id}-r0-")
    assert "vLLM's defaults, measured in the same round: p50 TTFT " in done.summary
    assert done.winner_metrics.ttft_p50_ms < done.baseline_metrics.ttft_p50_ms * 0.95
    assert done.objective == endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT == got.objective
    assert done.summary.startswith("Winner on sim-cpu: ") and got.summary == done.summary
    assert [g.name for g in done.winner_gates] == ["slo"] and all(g.passed for g in done.winner_gates)
    assert [g.name for g in done.baseline_gates] == ["slo"]
    assert got.state == pb.SEARCH_STATE_DONE and got.trials_completed == 3 and got.modeled_candidates == 5
    assert got.best_trial_id == done.winner_trial_id and got.trigger == "profile.ready"
    # The search and every event of it (the runner's trial events too) belong to the endpoint's id.
    assert got.endpoint_uid == uid_of(endpoint) != ""
    assert {e.endpoint_uid for e in events} == {got.endpoint_uid}
    assert [s.id for s in listed] == [search_id]
    rows = await store.query("SELECT count() FROM trials WHERE search_id = {s:String}", {"s": search_id})
    assert rows.scalar() == 3
    # A searcher started afterwards reads the same record, summary and evidence included.
    assert searcher.trials is not None
    again = SearchSupervisor(
        searcher.settings, js=js, store=store, data_dir=data_dir, execute=searcher.trials.execute
    )
    stored = await again.get(search_id)
    assert stored.done and stored.outcome == "winner" and stored.search == got
    assert stored.summary.startswith("Winner on sim-cpu: enable_prefix_caching off -> on")
    assert "not verified on real hardware" in stored.summary
    assert stored.evidence["winner"]["trial_id"] == done.winner_trial_id
    assert stored.evidence["baseline"]["fidelity"] == stored.evidence["winner"]["fidelity"]
    # A second profile.ready of the same event starts nothing new (request id = the event's).
    assert (await again.records.by_request(f"profile:{event.id}")).search_id == search_id  # type: ignore[union-attr]
    # The rows the searcher and the runner stored confirm the event: a deployer would roll it out.
    winners = StoredWinners(store)
    refusal = await winners.refusal(
        endpoint=endpoint, endpoint_uid=uid_of(endpoint), model="/models/ep", pool="sim-cpu", done=done
    )
    assert refusal == ""


async def _started(stub: pb_grpc.SearchServiceStub, search_id: str) -> bool:
    search = (await stub.GetSearch(pb.GetSearchRequest(search_id=search_id))).search
    return bool(search.trials_started > 0)


async def _skipped(searcher: SearcherService, at_least: int) -> bool:
    return searcher.profiles_skipped >= at_least


async def _wait_for_search(stub: pb_grpc.SearchServiceStub, endpoint: str) -> str:
    found: list[str] = []

    async def listed() -> bool:
        page = await stub.ListSearches(pb.ListSearchesRequest(endpoint=endpoint))
        found.extend(s.id for s in page.searches)
        return bool(found)

    await eventually(listed, timeout_s=30)
    return found[0]


async def test_api_errors_name_the_field_and_cancel_withdraws_queued_jobs(
    nc: Client,
    js: JetStreamContext,
    store: Store,
    tmp_path: Path,
    data_dir: Path,
    searcher_model_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await migrate(store)
    off = await make_endpoint(js, policy=endpoint_pb2.SEARCH_POLICY_OFF)
    lonely = await make_endpoint(js, policy=endpoint_pb2.SEARCH_POLICY_AUTO, hardware="sim-h200")
    lonely_profile = await store_profile(store, lonely, searcher_model_dir)
    off_profile = await store_profile(store, off, searcher_model_dir)
    searcher = make_searcher(tmp_path, model_dir=searcher_model_dir)
    async with (
        running(searcher, nc, store),
        grpc.aio.insecure_channel(searcher.grpc.address) as channel,
    ):
        stub = pb_grpc.SearchServiceStub(channel)  # type: ignore[no-untyped-call]
        # A profile of an endpoint whose policy is off starts nothing.
        await publish_event(
            js,
            new_event(EventKind.PROFILE_READY, endpoint=off, source="profiler", payload_message=off_profile),
        )
        # Nor does a profile of a few requests (a drift alarm's short window); had it started a
        # search, the StartSearch on `lonely` below would find one running.
        tiny = events_pb2.ProfileReady()
        tiny.CopyFrom(lonely_profile)
        tiny.request_count = 5
        await publish_event(
            js, new_event(EventKind.PROFILE_READY, endpoint=lonely, source="profiler", payload_message=tiny)
        )

        async def status(call: object) -> tuple[grpc.StatusCode, str]:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call  # type: ignore[misc]
            return info.value.code(), info.value.details() or ""

        code, text = await status(stub.StartSearch(pb.StartSearchRequest(endpoint=lonely)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and text.startswith("request_id: required")
        code, text = await status(stub.StartSearch(pb.StartSearchRequest(request_id="r", endpoint="nope")))
        assert code == grpc.StatusCode.NOT_FOUND and "'nope' not found" in text
        code, text = await status(stub.StartSearch(pb.StartSearchRequest(request_id="r", endpoint=off)))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "search_policy is OFF" in text
        code, text = await status(
            stub.StartSearch(pb.StartSearchRequest(request_id="r", endpoint=lonely, trial_budget=1))
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and text.startswith("trial_budget: ")
        code, text = await status(
            stub.StartSearch(pb.StartSearchRequest(request_id="r", endpoint=lonely, hardware_classes=["tpu"]))
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and text.startswith("hardware_classes[0]: ")
        code, text = await status(
            stub.StartSearch(pb.StartSearchRequest(request_id="r", endpoint=lonely, objective=9))  # type: ignore[arg-type]
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and text.startswith("objective: unknown value 9")
        code, text = await status(stub.GetSearch(pb.GetSearchRequest(search_id="search-missing")))
        assert code == grpc.StatusCode.NOT_FOUND and text.startswith("search_id: ")
        code, text = await status(stub.ListSearches(pb.ListSearchesRequest(page_token="bogus")))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and text.startswith("page_token: ")

        # No runner serves sim-h200: the baseline's job waits in the queue until cancelled.
        request = pb.StartSearchRequest(request_id=uuid.uuid4().hex, endpoint=lonely)
        first = (await stub.StartSearch(request)).search
        assert (await stub.StartSearch(request)).search.id == first.id  # idempotent on request_id
        code, text = await status(
            stub.StartSearch(pb.StartSearchRequest(request_id=uuid.uuid4().hex, endpoint=lonely))
        )
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "already has a search running" in text
        await eventually(lambda: _started(stub, first.id), timeout_s=30)
        queued = await js.get_last_msg("JOBS", "evertune.jobs.sim-h200")
        assert queued.headers and queued.headers["Nats-Msg-Id"].startswith(f"job-{first.id}-r0-")
        cancelled = (
            await stub.CancelSearch(pb.CancelSearchRequest(search_id=first.id, reason="test"))
        ).search
        assert cancelled.state == pb.SEARCH_STATE_DONE
        assert (
            cancelled.outcome == events_pb2.SEARCH_OUTCOME_CANCELLED and cancelled.error == "cancelled: test"
        )
        with pytest.raises(Exception, match="no message found"):
            await js.get_last_msg("JOBS", "evertune.jobs.sim-h200")
        again = (await stub.CancelSearch(pb.CancelSearchRequest(search_id=first.id))).search
        assert again == cancelled  # cancelling a finished search returns it
        watched = [e async for e in stub.WatchSearch(pb.WatchSearchRequest(search_id=first.id))]
        assert [e.kind for e in watched] == ["search.completed"]
        await eventually(lambda: _skipped(searcher, 2), timeout_s=30)
        assert not (await stub.ListSearches(pb.ListSearchesRequest(endpoint=off))).searches
        # The command line speaks the same API.
        address = ["--address", searcher.grpc.address]
        assert await asyncio.to_thread(main, ["search", "list", "--endpoint", lonely, *address]) == 0
        assert await asyncio.to_thread(main, ["search", "show", first.id, *address]) == 0
        assert await asyncio.to_thread(main, ["search", "show", "search-nope", *address]) == 1
        start = ["search", "start", lonely, "--objective", "p50_ttft", "--no-wait", *address]
        assert await asyncio.to_thread(main, start) == 0
        listed = (await stub.ListSearches(pb.ListSearchesRequest(endpoint=lonely))).searches
        started = [s for s in listed if s.state != pb.SEARCH_STATE_DONE]
        assert len(started) == 1 and started[0].objective == endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT
        await stub.CancelSearch(pb.CancelSearchRequest(search_id=started[0].id, reason="test"))

        # profile.ready while the endpoint's search runs: the newest is queued and starts after it.
        third = (
            await stub.StartSearch(pb.StartSearchRequest(request_id=uuid.uuid4().hex, endpoint=lonely))
        ).search
        readies = [
            new_event(
                EventKind.PROFILE_READY, endpoint=lonely, source="profiler", payload_message=lonely_profile
            )
            for _ in range(2)
        ]
        for e in readies:
            await publish_event(js, e)

        async def queued_twice() -> bool:
            return searcher.profiles_queued == 2

        await eventually(queued_twice, timeout_s=30)
        assert searcher.searches is not None
        assert searcher.searches.queued(lonely).request_id == f"profile:{readies[1].id}"  # type: ignore[union-attr]
        await stub.CancelSearch(pb.CancelSearchRequest(search_id=third.id, reason="test"))
        records = searcher.searches.records

        async def dequeued() -> bool:
            return await records.by_request(f"profile:{readies[1].id}") is not None

        await eventually(dequeued, timeout_s=30)
        next_search = await records.by_request(f"profile:{readies[1].id}")
        assert next_search is not None and next_search.search.trigger == "profile.ready"
        assert await records.by_request(f"profile:{readies[0].id}") is None  # replaced, never started
        assert searcher.searches.queued(lonely) is None
        await stub.CancelSearch(pb.CancelSearchRequest(search_id=next_search.search_id, reason="test"))
    out, err = capsys.readouterr()
    assert f"{first.id}  {lonely}  done  cancelled" in out and "cancelled: test" in out
    assert "evertune: NOT_FOUND: search_id: search 'search-nope' not found" in err
