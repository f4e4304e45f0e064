"""`evertune replay`: open-loop replay of a workload against an OpenAI-compatible URL, measured."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict
from pathlib import Path

from evertune.apps.cli.common import Commands, shared_settings, stop_on_signals
from evertune.apps.cli.console import err_console, out_console
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
from evertune.domain.slo import DEFAULT_ATTAINMENT, Slo
from evertune.domain.workloads import PlannedRequest
from evertune.errors import InvalidArgument


def add_commands(commands: Commands) -> None:
    """`evertune replay`."""
    parser = commands.add_parser(
        "replay", help="replay a workload open-loop against an OpenAI-compatible URL"
    )
    parser.add_argument("--target", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--workload", required=True, help="`voice`, or a .csv (Azure format) or .jsonl trace")
    parser.add_argument("--model", default=None, help="model name to ask for (default: the target's first)")
    parser.add_argument("--rate-scale", type=float, default=1.0, help="multiply the request rate (default 1)")
    parser.add_argument("--time-scale", type=float, default=1.0, help="play time this many times faster")
    parser.add_argument(
        "--duration", type=float, default=None, help="seconds of workload (voice length, trace cut)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the workload (default 0)")
    parser.add_argument("--slo-ttft-ms", type=float, default=None, help="TTFT target, ms")
    parser.add_argument(
        "--slo-itl-ms", type=float, default=None, help="inter-token target (per-request p99 gap), ms"
    )
    parser.add_argument(
        "--slo-share",
        type=float,
        default=DEFAULT_ATTAINMENT,
        help=f"share that must meet both (default {DEFAULT_ATTAINMENT:g})",
    )
    parser.add_argument(
        "--find-goodput",
        nargs=2,
        type=float,
        metavar=("LOW_RPS", "HIGH_RPS"),
        default=None,
        help="search the highest rate meeting the SLO between these request rates",
    )
    parser.add_argument(
        "--tokenizer", type=Path, default=None, help="model folder whose tokenizer sizes trace prompts"
    )
    parser.add_argument("--strict", action="store_true", help="reject a trace with any bad row")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    parser.set_defaults(func=replay_command)


def replay_command(args: argparse.Namespace) -> int:
    return replay_workload(
        target=args.target,
        workload=args.workload,
        model=args.model,
        rate_scale=args.rate_scale,
        time_scale=args.time_scale,
        duration_s=args.duration,
        seed=args.seed,
        slo_ttft_ms=args.slo_ttft_ms,
        slo_itl_ms=args.slo_itl_ms,
        slo_share=args.slo_share,
        find_goodput_rps=tuple(args.find_goodput) if args.find_goodput else None,
        tokenizer=args.tokenizer,
        strict=args.strict,
        as_json=args.json,
    )


def replay_workload(
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
    # a model's tokenizer and the trace readers import torch: here, so that other commands start without it
    from evertune.domain.model import ensure_model
    from evertune.domain.workloads.source import load_workload

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
