"""`evertune profile show`: an endpoint's latest workload profile, from the running profiler.

The profiler owns the store (in the embedded default, chDB inside `evertune up`), so the command
asks it over NATS: one request on the profiler's request subject (`EVERTUNE_PROFILER_REQUEST_SUBJECT`,
default `evertune.svc.profiler.profile`). It answers the latest stored profile, or builds one when
none is stored (`--build` always builds a new one). When nothing runs on the data dir (and no
`--nats-url` is given), it reads the store itself (`EVERTUNE_CLICKHOUSE_URL`, or the data dir's
chDB): the latest stored profile, or one built there and then and not stored. `--plot FILE.png`
draws the rate curve and the distributions with matplotlib (Agg backend).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from evertune.apps.cli.common import Commands, add_data_dir_flag, nats_url_for, shared_settings
from evertune.errors import EvertuneError, FailedPrecondition, InvalidArgument, NotFound, Unavailable
from evertune.infra.bus import connect
from evertune.infra.settings import SharedSettings, load_settings
from evertune.infra.store import open_store

#: Request subject of the profiler (the default of EVERTUNE_PROFILER_REQUEST_SUBJECT).
DEFAULT_SUBJECT = "evertune.svc.profiler.profile"
#: Seconds to wait for the profiler (a build over a long window takes a while).
REQUEST_TIMEOUT_S = 120.0

_ERRORS: dict[str, type[EvertuneError]] = {"not_found": NotFound, "invalid_argument": InvalidArgument}


def check_plot_path(path: Path) -> None:
    """Refuse, with one line, a plot path that cannot be written (before anything is asked)."""
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise InvalidArgument(f"cannot write plot {path}: use a .png, .svg or .pdf file name")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InvalidArgument(f"cannot write plot {path}: folder {folder} does not exist")
    if path.is_dir():
        raise InvalidArgument(f"cannot write plot {path}: it is a folder")
    target = path if path.exists() else folder
    if not os.access(target, os.W_OK):
        raise InvalidArgument(f"cannot write plot {path}: permission denied")


async def ask(
    nc: Client,
    *,
    endpoint: str,
    subject: str = DEFAULT_SUBJECT,
    build: bool = False,
    window_s: float | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> dict[str, Any]:
    """The profiler's reply for `endpoint` (the `stored` object); raises its error as one line."""
    body: dict[str, Any] = {"endpoint": endpoint, "action": "build" if build else "latest"}
    if window_s is not None:
        body["window_s"] = window_s
    try:
        msg = await nc.request(subject, json.dumps(body).encode(), timeout=timeout_s)
    except NoRespondersError:
        raise Unavailable("no profiler answers (is `evertune up` running?)") from None
    except (NatsTimeoutError, TimeoutError):
        raise Unavailable(f"the profiler did not answer within {timeout_s:g} s") from None
    reply = json.loads(msg.data)
    if not reply.get("ok"):
        raise _ERRORS.get(str(reply.get("code")), EvertuneError)(str(reply.get("error", "profile failed")))
    stored: dict[str, Any] = reply["stored"]
    return stored


def text_lines(stored: dict[str, Any]) -> list[str]:
    """The stored profile for a person."""
    from evertune.profiler.profile import profile_from_jsonable, summary_lines

    profile = profile_from_jsonable(stored["profile"])
    head = (
        f"profile {stored['profile_id']} v{stored['version']} ({stored['trigger']}, built "
        f"{stored['created'][:19]} UTC); trace {stored['trace_lines']} requests at {stored['trace_uri']}"
    )
    return [head, *summary_lines(profile)]


def plot(stored: dict[str, Any], path: Path) -> None:
    """Draw the rate curve, the length distributions, concurrency and conversation turns."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from evertune.profiler.profile import Distribution, profile_from_jsonable

    profile = profile_from_jsonable(stored["profile"])
    figure, axes = plt.subplots(2, 3, figsize=(15, 8))
    figure.suptitle(
        f"{profile.endpoint}: {profile.requests} requests, {profile.window_start:%Y-%m-%d %H:%M} to "
        f"{profile.window_end:%H:%M} UTC (v{stored['version']})"
    )
    rate = axes[0][0]
    minutes = list(range(len(profile.rate.per_minute_rps)))
    rate.plot(minutes, profile.rate.per_minute_rps, drawstyle="steps-post")
    rate.axhline(profile.rate.peak_p95_rps, linestyle="--", color="tab:red", label="peak (p95 of minutes)")
    rate.axhline(profile.rate.mean_rps, linestyle=":", color="tab:gray", label="mean")
    start = f"{profile.rate.start:%H:%M:%S}" if profile.rate.start else "-"
    rate.set(
        title="arrival rate", xlabel=f"minutes from the first arrival ({start} UTC)", ylabel="requests/s"
    )
    rate.legend()

    def histogram(axis: Any, d: Distribution, title: str, unit: str) -> None:
        lefts = [k * d.bin_width for k in range(len(d.histogram))]
        axis.bar(lefts, d.histogram, width=d.bin_width, align="edge")
        for value, style in ((d.p50, "--"), (d.p99, ":")):
            axis.axvline(value, linestyle=style, color="tab:red")
        axis.set(title=f"{title} (p50 {d.p50:g}, p99 {d.p99:g})", xlabel=unit, ylabel="requests")

    histogram(axes[0][1], profile.prompt_tokens, "prompt tokens", "tokens")
    histogram(axes[0][2], profile.completion_tokens, "output tokens", "tokens")
    flight = axes[1][0]
    flight.bar(range(len(profile.concurrency.time_share)), profile.concurrency.time_share)
    flight.set(
        title=f"requests in flight (mean {profile.concurrency.mean:.1f})",
        xlabel="in flight",
        ylabel="share of time",
    )
    histogram(axes[1][1], profile.prefix.turns_per_conversation, "turns per conversation", "turns")
    shares = axes[1][2]
    kinds = [s.kind for s in profile.bottleneck.shares]
    shares.barh(kinds, [s.share for s in profile.bottleneck.shares])
    shares.set(
        title=f"where TTFT goes ({profile.bottleneck.source}): {profile.bottleneck.verdict}",
        xlabel="share of slow requests' TTFT",
        xlim=(0, 1),
    )
    figure.tight_layout()
    try:
        figure.savefig(path)
    except OSError as err:
        raise InvalidArgument(f"cannot write plot {path}: {err.strerror or err}") from None
    finally:
        plt.close(figure)


async def from_store(
    shared: SharedSettings, *, endpoint: str, build: bool, window_s: float | None, why: str
) -> dict[str, Any]:
    """Without a running profiler: the latest stored profile, read from the store itself, or one
    built now over the last `window_s` (default: the profiler's window) and not stored."""
    from evertune.profiler import catalog
    from evertune.profiler.builder import build_from_store
    from evertune.profiler.profile import ProfileConfig, to_jsonable
    from evertune.profiler.queries import endpoint_seen, newest_endpoint_uid
    from evertune.profiler.settings import ProfilerSettings

    url = shared.store_url
    if url.startswith("chdb://") and not (Path(url.removeprefix("chdb://")) / "metadata").is_dir():
        raise FailedPrecondition(f"{why}, and there is no store at {url}")
    store = await open_store(url, database=shared.clickhouse_database)
    try:
        tables = await store.query(
            "SELECT name FROM system.tables WHERE database = {db:String}", {"db": store.database}
        )
        names = {str(name) for (name,) in tables}
        if not build and "profiles" in names:
            # the endpoint the name holds now: the one its newest request was served under
            uid = await newest_endpoint_uid(store, endpoint) if "requests" in names else None
            stored = await catalog.latest(store, endpoint, endpoint_uid=uid)
            if stored is not None:
                from evertune.profiler.service import stored_reply

                return stored_reply(stored)
        if "requests" not in names or not await endpoint_seen(store, endpoint):
            raise NotFound(f"unknown endpoint {endpoint!r}: no telemetry and no profile of it in {url}")
        settings = load_settings(ProfilerSettings)
        now = datetime.now(UTC)
        built = await build_from_store(
            store,
            endpoint=endpoint,
            since=now - timedelta(seconds=window_s or settings.window_s),
            until=now,
            config=ProfileConfig(
                block_tokens=settings.prefix_block_tokens, horizon_s=settings.prefix_horizon_s
            ),
            max_samples=settings.max_samples,
        )
    finally:
        await store.close()
    return {
        "endpoint": endpoint,
        "version": 0,
        "profile_id": "(not stored)",
        "created": now.isoformat(),
        "trigger": "cli",
        "cause_id": "",
        "trace_uri": "",
        "trace_sha256": "",
        "trace_lines": len(built.records),
        "ready": {},
        "profile": to_jsonable(built.profile),
    }


def add_commands(commands: Commands) -> None:
    """`evertune profile show`."""
    profile = commands.add_parser("profile", help="workload profiles of endpoints")
    profile_commands = profile.add_subparsers(dest="profile_command", required=True, metavar="COMMAND")
    parser = profile_commands.add_parser("show", help="print an endpoint's latest profile (built if none)")
    add_data_dir_flag(parser)
    parser.add_argument("--endpoint", required=True, help="endpoint name")
    parser.add_argument("--nats-url", default=None, help="ask this NATS instead of the data dir's")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--plot", type=Path, default=None, help="draw the rate curve and distributions to FILE.png"
    )
    parser.add_argument("--build", action="store_true", help="build a new profile instead of the latest")
    parser.add_argument("--window", type=float, default=None, help="seconds of telemetry to build over")
    parser.set_defaults(func=show_command)


def show_command(args: argparse.Namespace) -> int:
    return show(
        endpoint=args.endpoint,
        data_dir=args.data_dir,
        nats_url=args.nats_url,
        as_json=args.json,
        plot_path=args.plot,
        build=args.build,
        window_s=args.window,
    )


def show(
    *,
    endpoint: str,
    data_dir: Path | None,
    nats_url: str | None,
    as_json: bool,
    plot_path: Path | None,
    build: bool,
    window_s: float | None,
) -> int:
    """`evertune profile show`."""
    if not endpoint:
        raise InvalidArgument("--endpoint must name an endpoint")
    if window_s is not None and not window_s > 0:
        raise InvalidArgument(f"--window must be a positive number of seconds, not {window_s:g}")
    if plot_path is not None:
        check_plot_path(plot_path)
    shared = shared_settings(data_dir, log_format="console")
    try:
        url = nats_url_for(shared, nats_url)
    except FailedPrecondition as nothing_runs:  # no stack on the data dir: read the store itself
        stored = asyncio.run(
            from_store(shared, endpoint=endpoint, build=build, window_s=window_s, why=str(nothing_runs))
        )
    else:
        subject = os.environ.get("EVERTUNE_PROFILER_REQUEST_SUBJECT", DEFAULT_SUBJECT)

        async def main() -> dict[str, Any]:
            nc = await connect(
                url,
                name="evertune-profile",
                connect_timeout_s=shared.connect_timeout_s,
                auth=shared.nats_auth(),
            )
            try:
                return await ask(nc, endpoint=endpoint, subject=subject, build=build, window_s=window_s)
            finally:
                await nc.close()

        stored = asyncio.run(main())
    empty = stored["profile"].get("empty_reason", "")
    if empty:
        raise FailedPrecondition(f"no data: {empty}")
    if as_json:
        print(json.dumps(stored))
    else:
        print("\n".join(text_lines(stored)))
    if plot_path is not None:
        plot(stored, plot_path)
        if not as_json:
            print(f"plot written to {plot_path}")
    return 0
