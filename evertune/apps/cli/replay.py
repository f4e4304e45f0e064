"""`evertune replay`: open-loop replay of a workload against an OpenAI-compatible URL, measured."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from pathlib import Path

from evertune.apps.cli.common import shared_settings, stop_on_signals
from evertune.apps.cli.console import err_console, out_console
from evertune.domain.model import ensure_model
from evertune.domain.replay import (
    ReplayProgress,
    Summary,
    find_goodput,
    goodput_table,
    plan_rps,
    replay,
    summarize_run,
    summary_table,
)
from evertune.domain.slo import Slo
from evertune.domain.workloads import PlannedRequest
from evertune.domain.workloads.source import load_workload
from evertune.errors import InvalidArgument


def replay_command(
    *,
    target: str,
    workload: str,
    model: str | None,
    rate_scale: float,
    time_scale: float,
    duration_s: float | None,
    seed: int,
    slo_ttft_ms: float | None,
    slo_itl_ms: float | None,
    slo_share: float,
    find_goodput_rps: tuple[float, float] | None,
    tokenizer: Path | None,
    strict: bool,
    as_json: bool,
) -> int:
    shared = shared_settings(None, log_format="console")
    if (slo_ttft_ms is None) != (slo_itl_ms is None):
        raise InvalidArgument("give both --slo-ttft-ms and --slo-itl-ms, or neither")
    slo = Slo(ttft_ms=slo_ttft_ms, itl_ms=slo_itl_ms, share=slo_share) if slo_ttft_ms and slo_itl_ms else None
    if find_goodput_rps is not None and slo is None:
        raise InvalidArgument("--find-goodput needs an SLO: --slo-ttft-ms and --slo-itl-ms")
    tokenizer_dir = tokenizer
    if tokenizer_dir is None and workload != "voice":
        tokenizer_dir = ensure_model(shared.data_dir.expanduser())
    loaded = load_workload(
        workload,
        duration_s=duration_s,
        seed=seed,
        rate_scale=rate_scale,
        tokenizer_dir=tokenizer_dir,
        strict=strict,
    )
    if not loaded.plan:
        raise InvalidArgument(f"the workload has no requests ({loaded.description})")
    out, err = out_console(), err_console()
    err.print(f"workload: {loaded.description}; {len(loaded.plan)} requests")

    async def once(plan: list[PlannedRequest], rate: float) -> Summary:
        with ReplayProgress(len(plan), console=err) as progress:
            run = await replay(
                plan,
                target=target,
                model=model,
                rate=rate,
                time_scale=time_scale,
                on_sent=progress.sent,
                on_result=progress.done,
            )
        return summarize_run(run, slo=slo)

    async def main() -> int:
        stop = asyncio.Event()
        stop_on_signals(stop)
        work = asyncio.create_task(_run(loaded.plan))
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not work.done():
            work.cancel()
            err.print("evertune replay: interrupted")
            return 130
        return work.result()

    async def _run(plan: list[PlannedRequest]) -> int:
        if find_goodput_rps is None:
            summary = await once(plan, 1.0)
            if as_json:
                print(json.dumps(asdict(summary)))
            else:
                out.print(summary_table(summary))
            return 0
        assert slo is not None
        base_rps = plan_rps(plan)
        result = await find_goodput(
            lambda rps: once(plan, rps / base_rps),
            slo=slo,
            low_rps=find_goodput_rps[0],
            high_rps=find_goodput_rps[1],
            on_probe=lambda p: err.print(f"probe {p}"),
        )
        if as_json:
            print(json.dumps(asdict(result)))
        else:
            out.print(goodput_table(result))
        return 0

    return asyncio.run(main())
