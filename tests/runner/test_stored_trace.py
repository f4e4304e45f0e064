"""Traces held in the store: the profiler's stored trace (`clickhouse://`), read by the runner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from evertune.infra.store import Store, migrate
from evertune.profiler.builder import CreateRequest, create_profile
from evertune.profiler.catalog import StoredProfile
from evertune.profiler.profile import ProfileConfig
from evertune.runner.records import TrialRecords
from evertune.runner.trace import (
    StoredTrace,
    StoredTraceRef,
    TraceUnavailable,
    open_trace,
    stored_trace_ref,
)
from evertune.runner.trial_runner import Reference, TrialRunner

from ..profiler.synthetic import voice
from ..profiler.test_profiler_service import insert
from .helpers import fake_factory, job, settings
from .test_trial_runner import Phases


def test_a_clickhouse_uri_names_a_database_and_a_profile() -> None:
    ref = stored_trace_ref("clickhouse://evertune/profiles?profile_id=prof-1a")
    assert ref == StoredTraceRef(database="evertune", profile_id="prof-1a")
    assert stored_trace_ref("clickhouse:///profiles?profile_id=p") == StoredTraceRef(
        database="", profile_id="p"
    )
    assert stored_trace_ref("file:///x.jsonl") is None and stored_trace_ref("voice:") is None
    for bad in (
        "clickhouse://evertune/traces?profile_id=p",  # not the profiler's table
        "clickhouse://evertune/profiles",  # no profile
        "clickhouse://evertune/profiles?profile_id=a&profile_id=b",
        "clickhouse://ever-tune/profiles?profile_id=p",  # not an identifier: never put in SQL
    ):
        with pytest.raises(TraceUnavailable):
            stored_trace_ref(bad)


@pytest.fixture
async def profiled(store: Store) -> StoredProfile:
    """A profile the profiler built from real `requests` rows (voice calls), stored with its trace."""
    await migrate(store)
    samples = [g.sample for g in voice(seed=5, duration_s=240.0, calls_per_s=0.3)]
    await insert(store, "voice", samples)
    start = datetime.fromtimestamp(samples[0].start_s, UTC) - timedelta(minutes=1)
    request = CreateRequest(
        endpoint="voice",
        since=start,
        until=start + timedelta(hours=1),
        trigger="api",
        created=datetime.now(UTC),
    )
    return await create_profile(store, request, config=ProfileConfig(block_tokens=16), max_samples=5000)


async def test_a_stored_trace_replays_as_the_same_lines_in_a_file(
    store: Store, profiled: StoredProfile, tiny_model: Path, tmp_path: Path
) -> None:
    uri = profiled.ready.trace_uri
    assert uri.startswith(f"clickhouse://{store.database}/profiles?")
    ref = stored_trace_ref(uri)
    assert ref is not None
    stored = await TrialRecords(store).stored_trace(ref)
    assert stored is not None and stored.sha256 == profiled.trace_sha256
    source = open_trace(uri, sha256=profiled.ready.trace_sha256, model_dir=tiny_model, stored=stored)
    assert source.kind == "store"
    path = tmp_path / "trace.jsonl"
    path.write_text(stored.jsonl, encoding="utf-8")
    from_file = open_trace(path.as_uri(), sha256=profiled.trace_sha256, model_dir=tiny_model)
    for run in ("2/0", "2/1"):
        a = source.run(rate_rps=2.0, duration_s=60.0, seed=7, run=run)
        b = from_file.run(rate_rps=2.0, duration_s=60.0, seed=7, run=run)
        assert a == b and len(a.plan) >= 2
    assert any(r.conversation_id for r in a.plan) and any(r.messages for r in a.plan)
    # another database named in the URI is read there; an unknown profile is None
    elsewhere = StoredTraceRef(database=store.database, profile_id="prof-missing")
    assert await TrialRecords(store).stored_trace(elsewhere) is None


async def test_a_stored_trace_that_is_not_the_one_meant_is_refused(
    profiled: StoredProfile, tiny_model: Path
) -> None:
    uri = profiled.ready.trace_uri
    text = profiled.trace_jsonl
    with pytest.raises(TraceUnavailable, match="SHA-256 the job names"):
        open_trace(
            uri, sha256="0" * 64, model_dir=tiny_model, stored=StoredTrace(text, profiled.trace_sha256)
        )
    with pytest.raises(TraceUnavailable, match="does not match its stored SHA-256"):
        open_trace(uri, sha256="", model_dir=tiny_model, stored=StoredTrace(text[:-2], profiled.trace_sha256))
    with pytest.raises(TraceUnavailable, match="1 requests"):
        one = text.splitlines()[0] + "\n"
        open_trace(uri, sha256="", model_dir=tiny_model, stored=StoredTrace(one, ""))


def _runner(tmp_path: Path, tiny_model: Path, store: Store | None) -> TrialRunner:
    async def no_reference(trial_id: str) -> Reference | None:
        return None

    return TrialRunner(
        settings(warmup_turns=1),
        engine_factory=fake_factory(),
        model_dir=tiny_model,
        log_dir=tmp_path / "logs",
        references=no_reference,
        traces=TrialRecords(store).stored_trace if store is not None else None,
    )


async def test_a_trial_replays_the_profiles_stored_trace(
    store: Store, profiled: StoredProfile, tiny_model: Path, tmp_path: Path
) -> None:
    trial = _runner(tmp_path, tiny_model, store)
    stored_job = job(
        hardware=trial.settings.hardware,
        trace_uri=profiled.ready.trace_uri,
        rates=(4.0,),
        target=4.0,
        duration_s=5.0,
        gates=("slo",),
        repeats=1,
    )
    stored_job.trace_sha256 = profiled.trace_sha256
    outcome = await trial.run(stored_job, progress=Phases())
    assert outcome.status == "ok", outcome.error
    assert [r.rate_rps for r in outcome.rates] == [4.0, 5.0]
    assert all(r.pooled.requests >= 2 and r.pooled.errors == 0 for r in outcome.rates)

    missing = job(
        hardware=trial.settings.hardware,
        trace_uri=f"clickhouse://{store.database}/profiles?profile_id=prof-none",
    )
    failed = await trial.run(missing, progress=Phases())
    assert failed.status == "error" and "no profile prof-none" in failed.error and not failed.rates
    storeless = await _runner(tmp_path, tiny_model, None).run(stored_job, progress=Phases())
    assert storeless.status == "error" and "no store" in storeless.error
