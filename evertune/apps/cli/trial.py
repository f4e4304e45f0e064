"""`evertune trial run`: submit one trial job by hand and wait for its result.

The job goes to `evertune.jobs.<hardware>` like a searcher's; a runner of that class (in
`evertune up`, or `evertune run runner`) takes it. Progress (`trial.progress`) prints on stderr as it
comes, one line a phase, under a bar of the rates measured when stderr is a terminal; the result
(`trial.completed`) prints as a table, or as one JSON object with `--json`.
Exit code 0 when the trial ran and passed every gate, 1 when it failed (a gate, the engine, the
deadline); no result within `--timeout` is an error naming the likely cause.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from google.protobuf.json_format import MessageToDict
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js.api import ConsumerConfig, DeliverPolicy
from rich.console import Console, Group, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from evertune.apps.cli.common import Commands, nats_url_for, shared_settings, stop_on_signals
from evertune.apps.cli.console import err_console, out_console, table
from evertune.domain.engines import EngineSpec, InvalidEngineConfig, get_profile, knob_refusals
from evertune.domain.slo import DEFAULT_ATTAINMENT
from evertune.errors import InvalidArgument, Unavailable
from evertune.infra.bus import connect, publish
from evertune.infra.events import EventKind, decode_event, endpoint_token, event_filter_subject
from evertune.v1 import endpoint_pb2, events_pb2, jobs_pb2

#: Gates a hand-submitted trial runs unless told otherwise.
DEFAULT_GATES = ("slo", "stability")


@dataclass(frozen=True)
class TrialRequest:
    """What `evertune trial run` was asked for, before it becomes a TrialJob."""

    config: str  #: engine config as JSON (EngineSpec fields; "model" may be left out)
    workload: str  #: "voice", "voice:key=value&...", or a .jsonl/.csv trace path
    rates_rps: tuple[float, ...]  #: rates to replay, requests per second
    target_rate_rps: float  #: rate of the headline figures (0 = the highest rate)
    duration_s: float  #: seconds each rate is replayed, per repeat
    warmup_s: float  #: unmeasured seconds before each rate
    repeats: int  #: measured replays of each rate
    seed: int  #: replay seed
    slo_ttft_ms: float  #: TTFT target (the SLO's ttft_p99_ms), ms
    slo_itl_ms: float  #: inter-token target, ms (0 = none)
    slo_share: float  #: share of requests that must meet both
    gates: tuple[str, ...]  #: gates to run
    reference: str  #: trial id whose golden answers the correctness gate compares with
    threshold: float  #: agreement a lossy change needs (0 = the runner's default)
    baseline: bool  #: this is the reference configuration
    hardware: str  #: hardware class (jobs subject)
    endpoint: str  #: endpoint the trial's events are about
    timeout_s: float  #: the job's deadline, seconds from now


def parse_rates(text: str) -> tuple[float, ...]:
    """`2,4,8` -> (2.0, 4.0, 8.0); anything else is a one-line error."""
    try:
        rates = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InvalidArgument(f"--rates must be comma-separated numbers, got {text!r}") from None
    if not rates or any(not r > 0 for r in rates):
        raise InvalidArgument(f"--rates needs positive requests per second, got {text!r}")
    return rates


def _config(text: str, *, hardware: str) -> endpoint_pb2.EngineConfig:
    """The job's engine config; a config `hardware` cannot run is refused here, before any job or
    engine (against a known class's profile, "cpu" being this machine; a class an operator named
    is left to its runners)."""
    try:
        fields = json.loads(text)
    except ValueError as err:
        raise InvalidArgument(f"--config is not JSON: {err}") from None
    if not isinstance(fields, dict):
        raise InvalidArgument("--config must be a JSON object of engine knobs")
    model = fields.get("model") or "-"  # the runner fills in its local model
    spec = EngineSpec.parse({**fields, "model": model})
    try:
        profile = get_profile(hardware)
    except InvalidEngineConfig:  # a class an operator named: its runners judge the config
        profile = None
    reasons = knob_refusals(spec, profile) if profile else []
    if reasons:
        raise InvalidArgument(f"--config cannot run on {hardware}: {'; '.join(reasons)}")
    config = spec.to_proto()
    if model == "-":
        config.model = ""
    return config


def _trace(workload: str) -> tuple[str, str]:
    """(trace_uri, sha256) of the workload argument."""
    if workload == "voice" or workload.startswith("voice:"):
        return workload, ""
    path = Path(workload).expanduser().resolve()
    if not path.is_file():
        raise InvalidArgument(f"trace {workload} not found")
    return path.as_uri(), hashlib.sha256(path.read_bytes()).hexdigest()


def build_job(request: TrialRequest, *, now: datetime) -> jobs_pb2.TrialJob:
    """The TrialJob of a request (ids are fresh); bad input raises `InvalidArgument` (one line)."""
    endpoint_token(request.endpoint)
    if not request.endpoint:
        raise InvalidArgument("--endpoint must not be empty")
    if "correctness" in request.gates and not (request.baseline or request.reference):
        raise InvalidArgument("the correctness gate needs --reference TRIAL_ID (or --baseline)")
    trace_uri, sha = _trace(request.workload)
    trial = uuid.uuid4().hex[:12]
    job = jobs_pb2.TrialJob(
        job_id=f"job-{trial}",
        trial_id=f"trial-{trial}",
        endpoint=request.endpoint,
        hardware_class=request.hardware,
        engine_config=_config(request.config, hardware=request.hardware),
        trace_uri=trace_uri,
        trace_sha256=sha,
        rates_rps=list(request.rates_rps),
        target_rate_rps=request.target_rate_rps,
        repeats=request.repeats,
        seed=request.seed,
        slo=endpoint_pb2.Slo(
            ttft_p99_ms=request.slo_ttft_ms,
            itl_p99_ms=request.slo_itl_ms,
            attainment_target=request.slo_share,
        ),
        gates=[
            jobs_pb2.GateSpec(
                name=name,
                threshold=request.threshold if name == "correctness" else 0.0,
                reference_uri=f"trial:{request.reference}"
                if name == "correctness" and request.reference
                else "",
            )
            for name in request.gates
        ],
        baseline=request.baseline,
    )
    job.duration_per_rate.FromTimedelta(timedelta(seconds=request.duration_s))
    job.warmup.FromTimedelta(timedelta(seconds=request.warmup_s))
    job.deadline.FromDatetime(now + timedelta(seconds=request.timeout_s))
    return job


def headline(done: events_pb2.TrialCompleted) -> str:
    """The first line of a trial's report: status, verdict, time, runner."""
    status = jobs_pb2.TrialStatus.Name(done.status).removeprefix("TRIAL_STATUS_").lower()
    return (
        f"trial {done.trial_id} on {done.hardware_class}: {status}, {'PASSED' if done.passed else 'FAILED'}"
        f" ({done.duration.ToTimedelta().total_seconds():.0f} s, runner {done.runner})"
    )


def rate_rows(done: events_pb2.TrialCompleted) -> list[tuple[str, ...]]:
    """One row a measured rate: rate, requests, errors, TTFT p50/p90/p99, ITL p99, attainment."""
    return [
        (
            f"{r.rate_rps:.2f}",
            str(r.request_count),
            str(r.error_count),
            f"{r.ttft_p50_ms:.1f}",
            f"{r.ttft_p90_ms:.1f}",
            f"{r.ttft_p99_ms:.1f}",
            f"{r.itl_p99_ms:.1f}",
            f"{r.attainment:.3f}",
        )
        for r in done.metrics.rates
    ]


def render(done: events_pb2.TrialCompleted) -> RenderableType:
    """A readable report of a trial.completed: the headline, the rates, goodput, the gates."""
    parts: list[RenderableType] = [headline(done)]
    if done.error:
        parts.append(f"error: {done.error}")
    if done.metrics.rates:
        headers = ("rate rps", "requests", "errors", "p50 ms", "p90 ms", "p99 ms", "itl p99", "attain")
        rates = table(*headers, right=tuple(range(len(headers))))
        for row in rate_rows(done):
            rates.add_row(*row)
        parts += [rates, f"goodput {done.goodput_rps:g} rps"]
    if done.gates:
        gates = table("gate", "result", "detail")
        for gate in done.gates:
            gates.add_row(gate.name, "pass" if gate.passed else "FAIL", gate.detail)
        parts.append(gates)
    return Group(*parts)


def progress_line(p: events_pb2.TrialProgress) -> str:
    """A trial.progress as one line: the phase, its rate, rates done, the runner."""
    phase = events_pb2.TrialPhase.Name(p.phase).removeprefix("TRIAL_PHASE_").lower()
    rate = f" {p.rate_rps:g} rps" if p.rate_rps else ""
    return f"{phase}{rate} ({p.rates_done}/{p.rates_total} rates) on {p.runner}"


def trial_bar(console: Console) -> Progress:
    """The bar of a trial's rates, with its phase and elapsed time (drawn on a terminal only)."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(bar_width=20),
        MofNCompleteColumn(),
        TextColumn("rates"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
        redirect_stdout=False,  # stdout holds the answer alone
    )


def trial_run(request: TrialRequest, *, data_dir: Path | None, nats_url: str | None, as_json: bool) -> int:
    shared = shared_settings(data_dir, log_format="console")
    url = nats_url_for(shared, nats_url)
    job = build_job(request, now=datetime.now(UTC))
    err = err_console()

    async def main() -> int:
        stop = asyncio.Event()
        stop_on_signals(stop)
        nc = await connect(
            url, name="evertune-trial", connect_timeout_s=shared.connect_timeout_s, auth=shared.nats_auth()
        )
        result: asyncio.Future[events_pb2.TrialCompleted] = asyncio.get_running_loop().create_future()
        bar = trial_bar(err)
        task = bar.add_task("submitted", total=len(job.rates_rps))

        async def on_event(msg: Msg) -> None:
            event = decode_event(msg.data, subject=msg.subject)
            if event is None:
                return
            if event.kind == EventKind.TRIAL_PROGRESS and event.trial_progress.trial_id == job.trial_id:
                p = event.trial_progress
                bar.print(progress_line(p))  # above the bar; the only line when it is not drawn
                phase = events_pb2.TrialPhase.Name(p.phase).removeprefix("TRIAL_PHASE_").lower()
                bar.update(task, description=phase, completed=p.rates_done, total=p.rates_total or None)
            elif event.kind == EventKind.TRIAL_COMPLETED and event.trial_completed.trial_id == job.trial_id:
                if not result.done():
                    result.set_result(event.trial_completed)

        try:
            js = nc.jetstream()
            sub = await js.subscribe(
                event_filter_subject(None, job.endpoint),
                stream="EVENTS",
                cb=on_event,
                ordered_consumer=True,
                config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW),
            )
            subject = f"evertune.jobs.{job.hardware_class}"
            await publish(js, subject, job, msg_id=job.job_id)
            err.print(f"submitted trial {job.trial_id} (job {job.job_id}) to {subject}")
            stopping: asyncio.Future[object] = asyncio.ensure_future(stop.wait())
            waiting: set[asyncio.Future[object]] = {result, stopping}  # type: ignore[arg-type]
            with bar:
                done, _ = await asyncio.wait(
                    waiting, timeout=request.timeout_s + 30, return_when=asyncio.FIRST_COMPLETED
                )
            stopping.cancel()
            with contextlib.suppress(NatsError):  # the connection closes next anyway
                await sub.unsubscribe()
            if stop.is_set() and result not in done:
                err.print("evertune trial: interrupted (the job stays queued)")
                return 130
            if result not in done:
                raise Unavailable(
                    f"no result for trial {job.trial_id} within {request.timeout_s + 30:g} s "
                    f"(is a runner for {job.hardware_class!r} running?)"
                )
        finally:
            await nc.close()
        completed = result.result()
        if as_json:
            print(
                json.dumps(
                    MessageToDict(
                        completed, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
                    )
                )
            )
        else:
            out_console().print(render(completed))
        return 0 if completed.passed else 1

    return asyncio.run(main())


def add_commands(commands: Commands) -> None:
    """`evertune trial run ...`."""
    trial = commands.add_parser("trial", help="submit a trial job to a runner and wait for its result")
    trial_commands = trial.add_subparsers(dest="trial_command", required=True, metavar="COMMAND")
    run = trial_commands.add_parser("run", help="run one trial (a runner must be up: `evertune up`)")
    run.add_argument("--config", default="{}", help="engine knobs as JSON, e.g. '{\"max_num_seqs\": 32}'")
    run.add_argument(
        "--workload", default="voice", help="`voice`, `voice:key=value&...`, or a .jsonl/.csv trace"
    )
    run.add_argument("--rates", required=True, help="rates to replay, requests/s, comma-separated")
    run.add_argument("--target-rate", type=float, default=0.0, help="headline rate (default: the highest)")
    run.add_argument("--duration", type=float, default=30.0, help="seconds per rate and repeat (default 30)")
    run.add_argument("--warmup", type=float, default=0.0, help="unmeasured seconds before each rate")
    run.add_argument("--repeats", type=int, default=2, help="measured replays per rate (default 2)")
    run.add_argument("--seed", type=int, default=0, help="replay seed (default 0)")
    run.add_argument("--slo-ttft-ms", type=float, default=250.0, help="TTFT target, ms (default 250)")
    run.add_argument("--slo-itl-ms", type=float, default=100.0, help="inter-token target, ms (default 100)")
    run.add_argument(
        "--slo-share",
        type=float,
        default=DEFAULT_ATTAINMENT,
        help=f"share that must meet both (default {DEFAULT_ATTAINMENT:g})",
    )
    run.add_argument("--gates", default=",".join(DEFAULT_GATES), help="gates: slo,stability,correctness")
    run.add_argument(
        "--reference", default="", help="trial id whose golden answers correctness compares with"
    )
    run.add_argument("--threshold", type=float, default=0.0, help="agreement a lossy change needs")
    run.add_argument("--baseline", action="store_true", help="this is the reference configuration")
    run.add_argument("--hardware", default="cpu", help="hardware class (default cpu)")
    run.add_argument("--endpoint", default="manual", help="endpoint the events are about (default manual)")
    run.add_argument("--timeout", type=float, default=1800.0, help="the job's deadline, s (default 1800)")
    run.add_argument("--data-dir", type=Path, default=None, help="data directory of the `evertune up`")
    run.add_argument("--nats-url", default=None, help="NATS to use instead of the data dir's")
    run.add_argument("--json", action="store_true", help="print the result as one JSON object")
    run.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed `evertune trial run` command."""
    request = TrialRequest(
        config=args.config,
        workload=args.workload,
        rates_rps=parse_rates(args.rates),
        target_rate_rps=args.target_rate,
        duration_s=args.duration,
        warmup_s=args.warmup,
        repeats=args.repeats,
        seed=args.seed,
        slo_ttft_ms=args.slo_ttft_ms,
        slo_itl_ms=args.slo_itl_ms,
        slo_share=args.slo_share,
        gates=tuple(g.strip() for g in args.gates.split(",") if g.strip()),
        reference=args.reference,
        threshold=args.threshold,
        baseline=args.baseline,
        hardware=args.hardware,
        endpoint=args.endpoint,
        timeout_s=args.timeout,
    )
    return trial_run(request, data_dir=args.data_dir, nats_url=args.nats_url, as_json=args.json)
