"""`evertune bench azure-profile`: the shared Azure trace served through the gateway, profiled.

A contiguous cut of the shared trace (`shared/traces/azure_llm_code_2023.csv` beside the checkout, or
`$EVERTUNE_AZURE_TRACE`; 8,819 requests over 57 minutes) is replayed open-loop by evertune's replay
client through a real gateway (in-process, routes in the NATS KV) to a `sim` engine on the H200
profile (the tiny model's shape: tokens come within milliseconds, so the engine never holds the
replay back); the gateway's records cross JetStream and the profiler's sink into chDB; then
`evertune profile show --endpoint E --json --build` (the command itself, in a subprocess, asking the
in-process profiler over NATS) reports the endpoint's profile. Its figures are compared with the
cut's own, computed directly from the CSV:

- `mean_rps` (requests / span), `peak_p95_rps` (p95 of the rates of consecutive windows from the
  first request; a last partial window counts when it covers half a window, rated over what it
  covers), `gap_cv` (coefficient of variation of gaps between arrivals);
- prompt and completion tokens: mean, p50, p90, p99, max.

The cut and the time compression: `--quick` the first 900 s (2,598 requests) 5 times faster (3
minutes), else the first 1,800 s (5,740 requests) 4 times faster (7.5 minutes). The whole trace 60
times faster swamped this 2-core machine (the client fell 60 s behind, a quarter of the requests
failed). Rates are compared scaled back (the profile's rate / time_scale), and the profile's 60 s
windows are `60 * time_scale` s of the trace, so the CSV's peak is computed over windows of that
length. Prompts have exactly the trace's lengths in the tiny model's tokens (random one-token
words); outputs exactly its generated tokens (`ignore_eos`).

Figures: each statistic's profile value, CSV value and relative error, and `worst_rel_err` (goal
<= 0.05). Also client lag and errors (a replay that fell behind would shift arrivals).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from evertune.apps.benchmarks import Figures
from evertune.domain.engines import EngineSpec, make_engine
from evertune.domain.engines.hardware import get_profile
from evertune.domain.engines.sim import SimEngine
from evertune.domain.model import ensure_model, load_tokenizer
from evertune.domain.model.corpus import sentences
from evertune.domain.perfmodel.calibration import default_data_dir
from evertune.domain.replay import replay, summarize_run
from evertune.domain.workloads import parse_azure_csv
from evertune.domain.workloads.plan import PlannedRequest
from evertune.domain.workloads.shared_traces import AZURE_CODE_2023, shared_trace
from evertune.domain.workloads.trace import TraceRow
from evertune.errors import InvalidArgument
from evertune.infra.bus import Bucket, connect, declare, load_definitions
from evertune.infra.nats_server import EmbeddedNats
from evertune.infra.runtime.host import host_services
from evertune.infra.settings import SharedSettings, load_settings
from evertune.infra.store import open_store
from evertune.v1 import endpoint_pb2

TRACE = shared_trace(AZURE_CODE_2023)
TRACE_ENV = "EVERTUNE_AZURE_TRACE"
ENDPOINT = "azure-code"
GOAL = 0.05


def _trace_path() -> Path:
    path = Path(os.environ.get(TRACE_ENV) or TRACE)
    if not path.is_file():
        raise InvalidArgument(f"no Azure trace at {path} (set {TRACE_ENV})")
    return path


def one_token_words(tokenizer: Any) -> tuple[list[str], list[str]]:
    """Words that encode to one token alone (first of a prompt) and with a leading space (the rest)."""
    rng = random.Random(0)
    words = sorted(
        {word for _ in range(50) for s in sentences(rng, 8) for word in s.split() if word.isalpha()}
    )
    alone = tokenizer.encode_batch(words, add_special_tokens=False)
    spaced = tokenizer.encode_batch([" " + word for word in words], add_special_tokens=False)
    first = [word for word, enc in zip(words, alone, strict=True) if len(enc.ids) == 1]
    rest = [" " + word for word, enc in zip(words, spaced, strict=True) if len(enc.ids) == 1]
    if not first or not rest:
        raise InvalidArgument("the tokenizer has no one-token words")
    return first, rest


def window_rates(times: np.ndarray, window_s: float) -> np.ndarray:
    """Rates of consecutive `window_s` windows from the first arrival; a last partial window counts
    when it covers at least half a window, rated over the part it covers."""
    t = times - times.min()
    span = float(t.max())
    full = int(span // window_s)
    counts = np.bincount((t // window_s).astype(int), minlength=full + 1)
    rates = list(counts[:full] / window_s)
    covered = span - full * window_s
    if covered >= window_s / 2:
        rates.append(counts[full] / covered)
    return np.array(rates)


def trace_stats(
    times: np.ndarray, prompt: np.ndarray, output: np.ndarray, window_s: float
) -> dict[str, float]:
    """The statistics the profile reports, straight from the trace's columns."""
    gaps = np.diff(np.sort(times))
    stats = {
        "mean_rps": len(times) / float(times.max() - times.min()),
        "gap_cv": float(np.std(gaps) / np.mean(gaps)),
    }
    windows = window_rates(times, window_s)
    if len(windows):  # none when the cut is shorter than half a window: the peak is not compared
        stats["peak_p95_rps"] = float(np.percentile(windows, 95))
    for name, values in (("prompt_tokens", prompt), ("completion_tokens", output)):
        stats[f"{name}_mean"] = float(values.mean())
        for q in (50, 90, 99):
            stats[f"{name}_p{q}"] = float(np.percentile(values, q))
        stats[f"{name}_max"] = float(values.max())
    return stats


def profile_stats(profile: dict[str, Any], time_scale: float) -> dict[str, float]:
    """The same statistics from `evertune profile show --json`'s profile, rates scaled back."""
    rate = profile["rate"]
    stats = {
        "mean_rps": rate["mean_rps"] / time_scale,
        "peak_p95_rps": rate["peak_p95_rps"] / time_scale,
        "gap_cv": rate["gap_cv"],
    }
    for name in ("prompt_tokens", "completion_tokens"):
        dist = profile[name]
        for key in ("mean", "p50", "p90", "p99", "max"):
            stats[f"{name}_{key}"] = float(dist[key])
    return stats


async def _put_routes(js: Any, gateway: Any, upstream: str) -> None:
    table = endpoint_pb2.RouteTable(
        endpoint=ENDPOINT,
        routes=[endpoint_pb2.Route(deployment_id="sim", upstream_url=upstream, weight=10000)],
    )
    bucket = await Bucket.open(js, "routes")
    await bucket.mutate(ENDPOINT, lambda _: table.SerializeToString())
    for _ in range(500):
        if gateway.book.tables.get(ENDPOINT) == table:
            return
        await asyncio.sleep(0.01)
    raise RuntimeError("the gateway never saw the route table")


async def run(quick: bool) -> Figures:
    # (seconds of the trace replayed from its start, time scale): 60x the whole trace swamped this
    # 2-core machine (client 60 s late, a quarter of the requests failed), so a contiguous cut.
    cut_s, time_scale = (900.0, 5.0) if quick else (1800.0, 4.0)
    model_dir = await asyncio.to_thread(ensure_model, default_data_dir())
    path = _trace_path()
    text = await asyncio.to_thread(path.read_text, encoding="utf-8")
    every, report = parse_azure_csv(text.splitlines(keepends=True), source=path.name)
    rows = [row for row in every if row.t_s < cut_s]
    figures = await measure_trace(rows, time_scale=time_scale, model_dir=model_dir)
    return {
        "benchmark": "azure-profile",
        "quick": quick,
        "trace": f"{path.name}: its first {cut_s:g} s, {len(rows)} of {len(every)} requests"
        + (f" ({report.skipped} bad lines left out)" if report.skipped else ""),
        **figures,
    }


async def measure_trace(
    rows: list[TraceRow], *, time_scale: float, model_dir: Path, store_url: str | None = None
) -> Figures:
    """Replay `rows` (from the first one's time) `time_scale` times faster through gateway, profiler
    and a sim engine; `profile show`'s statistics against the rows' own (see the module doc).
    `store_url`: the store to use (a fresh database in it); None = a chDB folder of its own (a
    process that already has a chDB folder open must pass that one's URL: one folder per process)."""
    if len(rows) < 2:
        raise InvalidArgument("a trace cut needs at least two requests")
    start = min(row.t_s for row in rows)
    first, rest = one_token_words(load_tokenizer(model_dir))
    rng = random.Random(1)
    plan = [
        PlannedRequest(
            at_s=row.t_s - start,
            request_id=f"az-{row.line}",
            api="completions",
            max_tokens=row.generated_tokens,
            prompt=rng.choice(first) + "".join(rng.choices(rest, k=row.context_tokens - 1)),
            prompt_tokens=row.context_tokens,
        )
        for row in rows
    ]
    times = np.array([row.t_s for row in rows])
    expected = trace_stats(
        times,
        np.array([row.context_tokens for row in rows]),
        np.array([row.generated_tokens for row in rows]),
        window_s=60.0 * time_scale,
    )
    longest = max(row.context_tokens + row.generated_tokens for row in rows)
    with tempfile.TemporaryDirectory(prefix="evertune-bench-azure-") as tmp:
        folder = Path(tmp)
        nats = EmbeddedNats(folder / "nats")
        await nats.start()
        try:
            return await _serve_and_profile(
                folder=folder,
                nats_url=nats.url,
                model_dir=model_dir,
                plan=plan,
                time_scale=time_scale,
                longest=longest,
                expected=expected,
                header={"time_scale": time_scale, "profile_window_s_in_trace_time": 60.0 * time_scale},
                store_url=store_url or f"chdb://{folder}/clickhouse",
            )
        finally:
            await nats.stop()


async def _serve_and_profile(
    *,
    folder: Path,
    nats_url: str,
    model_dir: Path,
    plan: list[PlannedRequest],
    time_scale: float,
    longest: int,
    expected: dict[str, float],
    header: dict[str, Any],
    store_url: str,
) -> Figures:
    """Gateway, profiler and sim engine up; the replay through them; `profile show`; the comparison."""
    from evertune.gateway import GatewayService, GatewaySettings
    from evertune.profiler import ProfilerService, ProfilerSettings

    nc = await connect(nats_url, name="evertune-bench-azure")
    try:
        js = nc.jetstream()
        await declare(js, load_definitions())
        database = f"az_{uuid.uuid4().hex[:8]}"
        shared = load_settings(
            SharedSettings, data_dir=folder, clickhouse_url=store_url, clickhouse_database=database
        )
        spec = EngineSpec(kind="sim", model=str(model_dir), max_model_len=longest + 16)
        engine = make_engine(spec, log_dir=folder, hardware=get_profile("h200"), served_model_name=ENDPOINT)
        assert isinstance(engine, SimEngine)  # kind "sim": one sim server
        gateway = GatewayService(GatewaySettings(port=0, tokenizer_dir=model_dir))
        subject = f"evertune.svc.profiler.profile.{uuid.uuid4().hex[:8]}"
        profiler = ProfilerService(
            ProfilerSettings(request_subject=subject, schedule_interval_s=0, metrics_port=0)
        )
        stop, ready = asyncio.Event(), asyncio.Event()
        await engine.start()
        hosting = asyncio.create_task(
            host_services(
                [profiler, gateway],
                shared=shared,
                nats_url=nats_url,
                stop=stop,
                on_ready=lambda _: ready.set(),
            )
        )
        try:
            await engine.wait_ready(timeout_s=120)
            await asyncio.wait_for(ready.wait(), 60)
            await _put_routes(js, gateway, engine.base_url)
            started = time.perf_counter()
            result = await replay(
                plan,
                target=f"http://127.0.0.1:{gateway.port}",
                model=ENDPOINT,
                time_scale=time_scale,
                timeout_s=300.0,
            )
            replay_s = time.perf_counter() - started
            summary = summarize_run(result)
            stored_rows = await _wait_for_rows(store_url, database, len(plan))
            shown = await _profile_show(nats_url, subject, data_dir=folder, window_s=replay_s + 600)
        finally:
            stop.set()
            await asyncio.wait_for(hosting, 60)
            await engine.stop()
    finally:
        await nc.close()

    got = profile_stats(shown["profile"], time_scale)
    errors = {k: abs(got[k] - expected[k]) / expected[k] for k in expected}
    got = {k: v for k, v in got.items() if k in expected}
    return {
        **header,
        "replay_s": round(replay_s, 1),
        "requests_sent": summary.requests,
        "request_errors": summary.errors,
        "error_classes": dict(Counter(r.error_class for r in result.results if r.error_class)),
        "rows_stored": stored_rows,
        "profile_requests": shown["profile"]["requests"],
        "client_lag_p99_ms": round(summary.lag.p99_ms, 2),
        "client_fell_behind": summary.lag.fell_behind,
        "profile": {k: round(v, 4) for k, v in got.items()},
        "csv": {k: round(v, 4) for k, v in expected.items()},
        "rel_err": {k: round(v, 4) for k, v in errors.items()},
        "worst_stat": max(errors, key=errors.__getitem__),
        "worst_rel_err": round(max(errors.values()), 4),
        "goal_rel_err": GOAL,
    }


async def _wait_for_rows(store_url: str, database: str, want: int, timeout_s: float = 120.0) -> int:
    """Rows of the endpoint in the store, once all `want` arrived (or the timeout passed)."""
    store = await open_store(store_url, database=database)
    try:
        deadline = time.monotonic() + timeout_s
        count = 0
        while time.monotonic() < deadline:
            rows = list(
                await store.query("SELECT count() FROM requests WHERE endpoint = {e:String}", {"e": ENDPOINT})
            )
            count = int(rows[0][0])
            if count >= want:
                break
            await asyncio.sleep(0.5)
        return count
    finally:
        await store.close()


async def _profile_show(nats_url: str, subject: str, *, data_dir: Path, window_s: float) -> dict[str, Any]:
    """`evertune profile show --endpoint E --json --build` against the running profiler."""
    env = {**os.environ, "EVERTUNE_PROFILER_REQUEST_SUBJECT": subject, "EVERTUNE_DATA_DIR": str(data_dir)}
    with tempfile.TemporaryFile() as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import sys; from evertune.apps.cli import main; sys.exit(main())",
            "profile",
            "show",
            "--endpoint",
            ENDPOINT,
            "--json",
            "--build",
            "--window",
            str(int(window_s)),
            "--nats-url",
            nats_url,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
        )
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"evertune profile show failed: {err.read().decode()[-500:]}")
    shown: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return shown
