"""`evertune search start|show|list|trials|cancel`: a gRPC client of the searcher's SearchService.

Where the searcher is: `--address`, else `EVERTUNE_SEARCHER_ADDRESS`, else the address the
`evertune up` on the data dir wrote to its runtime file, else 127.0.0.1:50052. `start` waits for
the search by default, printing a line per trial as it ends (`--no-wait` returns at once).
`trials` lists a search's finished trials (ListTrials, every page), one line each: the config's
difference from the baseline trial's, the figures, the gates, passed or not. The bearer token:
`--token`, else `EVERTUNE_TOKEN` (none: no credentials, for a searcher with auth off). TLS and
mutual TLS: `--tls-ca`, `--tls-cert`, `--tls-key`, as the endpoint commands
(`common.grpc_connection`). The calls go through `evertune.client.SearchClient`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import uuid
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict

from evertune.apps.cli.common import OBJECTIVES, Commands, add_tls_flags, grpc_address, grpc_connection
from evertune.client import SearchClient
from evertune.v1 import events_pb2, jobs_pb2
from evertune.v1 import search_service_pb2 as pb

DEFAULT_ADDRESS = "127.0.0.1:50052"


def add_commands(commands: Commands) -> None:
    """Register `search` on the top-level subparsers."""

    def common(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--address", default=None, help="searcher host:port")
        parser.add_argument("--token", default=None, help="bearer token (default $EVERTUNE_TOKEN)")
        add_tls_flags(parser)
        parser.add_argument("--data-dir", type=Path, default=None, help="data dir of a local `evertune up`")
        parser.add_argument("--json", action="store_true", help="print JSON")

    search = commands.add_parser(
        "search", help="start, show, list, cancel configuration searches and list their trials (gRPC)"
    )
    search.set_defaults(func=run)
    sub = search.add_subparsers(dest="search_command", required=True, metavar="COMMAND")
    start = sub.add_parser("start", help="start a search for an endpoint and follow it")
    start.add_argument("endpoint")
    start.add_argument("--budget", type=int, default=0, help="real trials (default: the searcher's)")
    start.add_argument("--hardware", action="append", default=[], help="hardware class, repeatable")
    start.add_argument("--profile", default=None, help="profile id (default: the endpoint's latest)")
    start.add_argument(
        "--objective",
        choices=sorted(OBJECTIVES),
        default=None,
        help="what to optimise (default: the endpoint's)",
    )
    start.add_argument("--request-id", default=None, help="idempotency key (default: a new uuid)")
    start.add_argument("--no-wait", action="store_true", help="return once the search is accepted")
    common(start)
    show = sub.add_parser("show", help="show one search")
    show.add_argument("search_id")
    common(show)
    listing = sub.add_parser("list", help="list searches, newest first")
    listing.add_argument("--endpoint", default="", help="only this endpoint's")
    common(listing)
    trials = sub.add_parser("trials", help="list a search's finished trials, one line each")
    trials.add_argument("search_id")
    common(trials)
    cancel = sub.add_parser("cancel", help="cancel a running search")
    cancel.add_argument("search_id")
    cancel.add_argument("--reason", default="", help="one line for the record")
    common(cancel)


def _address(args: argparse.Namespace) -> str:
    return grpc_address(
        service="searcher", given=args.address, data_dir=args.data_dir, default=DEFAULT_ADDRESS
    )


def _ms(value: float) -> str:
    return f"{value:.0f} ms" if math.isfinite(value) and value > 0 else "-"


def _metrics(m: jobs_pb2.TrialMetrics) -> str:
    return (
        f"goodput {m.goodput_rps:.2f} rps, TTFT p50 {_ms(m.ttft_p50_ms)} p99 {_ms(m.ttft_p99_ms)}, "
        f"attainment {m.attainment:.2f}"
    )


def describe(search: pb.Search) -> str:
    """A few lines for a person."""
    state = pb.SearchState.Name(search.state).removeprefix("SEARCH_STATE_").lower()
    lines = [
        f"{search.id}  {search.endpoint}  {state}"
        + (
            f"  {events_pb2.SearchOutcome.Name(search.outcome).removeprefix('SEARCH_OUTCOME_').lower()}"
            if search.state == pb.SEARCH_STATE_DONE
            else ""
        ),
        f"  profile {search.profile_id}, on {', '.join(search.hardware_classes)}, trigger {search.trigger}",
        f"  trials {search.trials_completed}/{search.trials_started} of {search.trial_budget}, "
        f"{search.modeled_candidates} candidates modelled",
    ]
    if search.HasField("baseline_metrics"):
        lines.append(f"  baseline: {_metrics(search.baseline_metrics)}")
    if search.best_trial_id:
        knobs = MessageToDict(search.best_engine_config, preserving_proto_field_name=True)
        knobs.pop("model", None)
        lines.append(f"  best ({search.best_trial_id}{'' if search.verified else ', not verified'}): {knobs}")
        lines.append(f"        {_metrics(search.best_metrics)}")
    if search.error:
        lines.append(f"  {search.error}")
    return "\n".join(lines)


def _trial_line(event: events_pb2.Event) -> str:
    done = event.trial_completed
    status = jobs_pb2.TrialStatus.Name(done.status).removeprefix("TRIAL_STATUS_").lower()
    verdict = "passed" if done.passed else "failed"
    tag = " baseline" if done.baseline else ""
    extra = f" ({done.error})" if done.error else ""
    return (
        f"  trial {done.trial_id}{tag}: {status}, {verdict}, goodput {done.goodput_rps:.2f} rps, "
        f"TTFT p50 {_ms(done.ttft_p50_ms)}{extra}"
    )


def _knobs(config: Any) -> dict[str, Any]:
    knobs = MessageToDict(config, preserving_proto_field_name=True)
    knobs.pop("model", None)
    return knobs


def _value(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def config_diff(config: Any, baseline: Any | None) -> str:
    """The knobs where `config` differs from `baseline` ("k a -> b, ..."; "= baseline" when none);
    every knob set when there is no baseline to compare with."""
    mine = _knobs(config)
    if baseline is None:
        return " ".join(f"{k}={_value(v)}" for k, v in sorted(mine.items())) or "engine defaults"
    theirs = _knobs(baseline)
    changes = [
        f"{k} {_value(theirs.get(k))} -> {_value(mine.get(k))}"
        for k in sorted(set(mine) | set(theirs))
        if mine.get(k) != theirs.get(k)
    ]
    return ", ".join(changes) or "= baseline"


def _gate(gate: jobs_pb2.GateResult) -> str:
    text = f"{gate.name} {'ok' if gate.passed else 'FAIL'} {gate.value:.2f}/{gate.threshold:.2f}"
    return text + (f" ({gate.detail})" if gate.detail and not gate.passed else "")


def trial_line(trial: pb.Trial, baseline: Any | None) -> str:
    """One line per trial: id, class, status, verdict, config vs the baseline, figures, gates."""
    r = trial.result
    status = jobs_pb2.TrialStatus.Name(r.status).removeprefix("TRIAL_STATUS_").lower()
    verdict = "passed" if r.passed else "FAILED"
    config = "baseline" if r.baseline else config_diff(r.engine_config, baseline)
    line = f"{r.trial_id}  {r.hardware_class}  {status}  {verdict}  [{config}]"
    if r.status == jobs_pb2.TRIAL_STATUS_OK:
        line += f"  {_metrics(r.metrics)}"
    if r.gates:
        line += "  gates: " + ", ".join(_gate(g) for g in r.gates)
    if r.error:
        line += f"  error: {r.error}"
    return line


def run(args: argparse.Namespace) -> int:
    """Run one of the commands; raises RpcError when the searcher refuses."""

    def show(search: pb.Search) -> None:
        print(json.dumps(MessageToDict(search)) if args.json else describe(search))

    async def call(client: SearchClient) -> int:
        command = args.search_command
        if command == "start":
            request = pb.StartSearchRequest(
                request_id=args.request_id or uuid.uuid4().hex,
                endpoint=args.endpoint,
                hardware_classes=args.hardware,
                trial_budget=args.budget,
            )
            if args.objective is not None:
                request.objective = OBJECTIVES[args.objective]
            if args.profile is not None:
                request.profile_id = args.profile
            search = await client.start(request)
            if args.no_wait:
                show(search)
                return 0
            if not args.json:
                print(f"{search.id}: searching {search.endpoint} ...", flush=True)
            async for event in client.watch(search.id):
                if args.json:
                    continue
                if event.kind == "search.started":
                    print(
                        f"  {event.search_started.candidates} candidates predicted to meet the SLO",
                        flush=True,
                    )
                elif event.kind == "trial.completed":
                    print(_trial_line(event), flush=True)
            show(await client.get(search.id))
            return 0
        if command == "show":
            show(await client.get(args.search_id))
            return 0
        if command == "trials":
            trials = await client.trials(args.search_id)
            if args.json:
                print(
                    json.dumps([MessageToDict(t, always_print_fields_with_no_presence=True) for t in trials])
                )
                return 0
            base = next((t.result.engine_config for t in trials if t.result.baseline), None)
            for trial in trials:
                print(trial_line(trial, base))
            if not trials:
                print(f"{args.search_id}: no finished trials yet")
            return 0
        if command == "cancel":
            show(await client.cancel(args.search_id, reason=args.reason))
            return 0
        searches = await client.list(endpoint=args.endpoint)
        if args.json:
            print(json.dumps([MessageToDict(s) for s in searches]))
        else:
            for search in searches:
                print(describe(search).splitlines()[0])
        return 0

    async def main() -> int:
        async with SearchClient(grpc_connection(args, _address(args))) as client:
            return await call(client)

    return asyncio.run(main())
