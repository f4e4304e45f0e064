"""A config with several replicas: every replica is started, warmed and measured through."""

from __future__ import annotations

import os
from pathlib import Path

from evertune.domain.engines import EngineGroup, EngineSpec, VllmEngine, split_cores
from evertune.domain.replay.priming import PRIMER_SUFFIX
from evertune.runner.trial_runner import (
    Reference,
    TrialEngine,
    TrialRunner,
    default_engine_factory,
    engine_cores,
    engine_urls,
)
from evertune.v1 import endpoint_pb2

from .helpers import FakeEngine, job, settings
from .test_trial_runner import Phases


def _served(engine: TrialEngine) -> list[str]:
    """Request ids a stand-in engine streamed (its log says so)."""
    return [line.split()[1] for line in engine.log_tail(100_000) if line.startswith("streamed ")]


async def test_a_two_replica_config_spreads_each_rate_over_both_replicas(tmp_path: Path) -> None:
    made: list[list[FakeEngine]] = []

    def factory(spec: EngineSpec, log_dir: Path) -> TrialEngine:
        one = spec.model_copy(update={"replicas": None})
        made.append([FakeEngine(one, log_dir=log_dir, args=[]) for _ in range(spec.replica_count)])
        return EngineGroup(made[-1])

    async def no_reference(trial_id: str) -> Reference | None:
        return None

    trial = TrialRunner(
        settings(warmup_turns=1),
        engine_factory=factory,
        model_dir=tmp_path,
        log_dir=tmp_path / "logs",
        references=no_reference,
    )
    config = endpoint_pb2.EngineConfig(engine="vllm", model="/models/fake", replicas=2)
    outcome = await trial.run(
        job(hardware=trial.settings.hardware, config=config, rates=(8.0,), target=8.0, duration_s=3.0),
        progress=Phases(),
    )
    assert outcome.status == "ok", outcome.error
    assert outcome.passed and [r.rate_rps for r in outcome.rates] == [8.0, 10.0]
    (replicas,) = made
    first, second = (_served(replica) for replica in replicas)
    measured = sum(r.pooled.requests for r in outcome.rates)
    # Each replica got its own warm-up turn, then a share of the runs, each run primed (a primer per
    # conversation under way, on the replica its turns went to); no request was sent twice.
    # (Which conversation goes where is tested with the replay client: tests/domain/replay/test_spread.py.)
    assert first[0] == second[0] and first[0].startswith("v99-")
    primers = [(i, served) for served in (first, second) for i in served if i.endswith(PRIMER_SUFFIX)]
    assert primers
    assert all(i.removesuffix(PRIMER_SUFFIX) in served for i, served in primers)
    assert len(first) + len(second) == measured + 2 + len(primers)
    assert min(len(first), len(second)) >= measured // 4, (len(first), len(second))
    assert not any(replica.running for replica in replicas)


def test_replica_urls_and_the_engine_cores_split() -> None:
    assert split_cores([0, 1, 2, 3, 4], 2) == [[0, 1], [2, 3]]
    assert split_cores([0], 2) == [[0], [0]]  # too few: they share the engine's cores


def test_the_default_factory_makes_a_group_of_the_backends_replicas(tmp_path: Path, tiny_model: Path) -> None:
    config = settings(hardware="cpu", split_cores=True)
    make = default_engine_factory(config)
    engine = make(EngineSpec(model=str(tiny_model), replicas=2, kv_cache_space_gib=1.0), tmp_path)
    assert isinstance(engine, EngineGroup) and len(engine.replicas) == 2
    urls = engine_urls(engine)
    assert len(set(urls)) == 2 and engine.base_url == urls[0]
    cores = engine_cores(config)
    if cores is not None:  # a machine of one core has no split
        replicas = [r for r in engine.replicas if isinstance(r, VllmEngine)]
        assert len(replicas) == 2
        shares = [r.cpu_cores for r in replicas]
        assert shares == split_cores(sorted(cores), 2)
        assert max(os.sched_getaffinity(0)) not in [c for share in shares for c in share]  # the client's
        # The whole server keeps to its share (process affinity), and vLLM binds its threads there.
        binds = [r.command()[1]["VLLM_CPU_OMP_THREADS_BIND"] for r in replicas]
        assert binds == [",".join(map(str, share)) for share in shares]
    one = make(EngineSpec(model=str(tiny_model), kv_cache_space_gib=1.0), tmp_path)
    assert not isinstance(one, EngineGroup) and engine_urls(one) == [one.base_url]
