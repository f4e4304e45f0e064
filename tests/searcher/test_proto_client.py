"""Done-when of the search issue: a search started over gRPC from a client generated from the .proto
files alone completes, and its trials are listed.

The stubs are generated here with grpc_tools.protoc from proto/evertune/v1/*.proto into a temporary
folder; the client (proto_client.py) runs in an isolated interpreter that sees only that folder and
grpcio/protobuf, against a searcher and a `sim-cpu` runner hosted in this process. What it read is
compared byte for byte with the events it watched and with the `trials` table; the command line's
`search trials` prints the same trials.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from importlib import resources
from pathlib import Path

import grpc
import pytest
from google import protobuf
from nats.aio.client import Client
from nats.js import JetStreamContext

from evertune.apps.cli import main
from evertune.infra.store import Store, migrate
from evertune.v1 import endpoint_pb2, events_pb2
from evertune.v1 import search_service_pb2 as pb
from tests import checkout

from .stack import make_endpoint, make_searcher, running, sim_runner, store_profile

REPO = checkout.ROOT
CLIENT = Path(__file__).with_name("proto_client.py")


async def _run(*argv: str, timeout_s: float) -> str:
    """Run a command; its stdout (stderr in the failure message)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode()[-3000:]
    return out.decode()


def _protos(out: Path) -> list[str]:
    """The contract files relative to the include root; `out` created for protoc."""
    out.mkdir()
    return sorted(str(p.relative_to(REPO / "proto")) for p in (REPO / "proto/evertune/v1").glob("*.proto"))


async def _generate_stubs(out: Path) -> None:
    protos = _protos(out)
    assert "evertune/v1/search_service.proto" in protos
    await _run(
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{REPO / 'proto'}",
        f"-I{resources.files('grpc_tools') / '_proto'}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        *protos,
        timeout_s=60,
    )
    assert (out / "evertune/v1/search_service_pb2_grpc.py").is_file()


async def test_a_client_from_the_protos_alone_runs_a_search_and_lists_its_trials(
    nc: Client,
    js: JetStreamContext,
    store: Store,
    tmp_path: Path,
    data_dir: Path,
    searcher_model_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stubs = tmp_path / "stubs"
    await _generate_stubs(stubs)
    # The folder holding grpcio and protobuf (site-packages), without its .pth files.
    site = Path(grpc.__file__).parents[1]
    assert Path(protobuf.__file__).parents[2] == site
    await migrate(store)
    endpoint = await make_endpoint(
        js, policy=endpoint_pb2.SEARCH_POLICY_ADVISORY, objective=endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT
    )
    await store_profile(store, endpoint, searcher_model_dir)
    searcher = make_searcher(tmp_path, rate_ladder=(1.0,))
    async with running(sim_runner(searcher_model_dir), nc, store), running(searcher, nc, store):
        address = searcher.grpc.address
        out = await _run(
            sys.executable, "-I", "-S", str(CLIENT), str(stubs), str(site), address, endpoint, timeout_s=150
        )
        got = json.loads(out.strip().splitlines()[-1])
        args = ["search", "trials", "--address", address]
        search_id = pb.Search.FromString(base64.b64decode(got["search"])).id
        assert await asyncio.to_thread(main, [*args[:2], search_id, *args[2:]]) == 0
        assert await asyncio.to_thread(main, [*args[:2], search_id, *args[2:], "--json"]) == 0
    # Nothing of this checkout was imported by the client: only the generated stubs.
    assert got["loaded"], "the client imported no stubs"
    for name, where in got["loaded"].items():
        paths = where if isinstance(where, list) else [where]
        assert all(str(p).startswith(str(stubs)) for p in paths), (name, where)

    search = pb.Search.FromString(base64.b64decode(got["search"]))
    events = [events_pb2.Event.FromString(base64.b64decode(e)) for e in got["events"]]
    trials = [pb.Trial.FromString(base64.b64decode(t)) for t in got["trials"]]
    # The search completed: its stream ended with search.completed, and GetSearch says DONE.
    assert events[0].kind == "search.started" and events[-1].kind == "search.completed"
    assert search.state == pb.SEARCH_STATE_DONE and search.trigger == "api", search.error
    assert search.outcome == events_pb2.SEARCH_OUTCOME_WINNER, search.error
    # Its trials are listed: exactly the trial.completed reports it watched, a page of one at a time.
    reports = [e.trial_completed for e in events if e.kind == "trial.completed"]
    assert len(trials) == len(reports) == search.trials_completed >= 2 and got["pages"] == len(trials)
    by_id = {r.trial_id: r for r in reports}
    assert sorted(by_id) == sorted(t.result.trial_id for t in trials)
    for trial in trials:
        assert trial.result == by_id[trial.result.trial_id]
        assert trial.result.search_id == search.id and trial.deliveries == 1 and len(trial.config_key) == 16
        assert trial.end_time.ToDatetime() >= trial.start_time.ToDatetime() > search.create_time.ToDatetime()
    assert [t.result.baseline for t in trials].count(True) == 1 and trials[0].result.baseline
    assert search.best_trial_id in by_id and by_id[search.best_trial_id].passed
    ended = [t.end_time.ToDatetime() for t in trials]
    assert ended == sorted(ended)
    rows = await store.query("SELECT count() FROM trials WHERE search_id = {s:String}", {"s": search.id})
    assert rows.scalar() == len(trials)
    assert got["errors"] == {
        "unknown_search": "NOT_FOUND: search_id: search 'search-nope' not found",
        "bad_token": "INVALID_ARGUMENT: page_token: not a token this server issued (use next_page_token)",
        "big_page": "INVALID_ARGUMENT: page_size: at most 1000, got 5000",
    }
    # The command line lists the same trials: one line each, the winner's knob change against the
    # baseline, then the same as JSON.
    # (The services log to stdout too: keep the command's lines, a trial's or the JSON array.)
    printed = [
        line for line in capsys.readouterr().out.splitlines() if line.startswith((f"{search.id}-", "[{"))
    ]
    assert len(printed) == len(trials) + 1
    for line, trial in zip(printed, trials, strict=False):
        assert line.startswith(f"{trial.result.trial_id}  sim-cpu  ok  ")
        assert ("passed" in line) == trial.result.passed and "gates: slo " in line
    assert "[baseline]" in printed[0]
    best = printed[[t.result.trial_id for t in trials].index(search.best_trial_id)]
    assert "[enable_prefix_caching off -> on" in best and "passed" in best
    as_json = json.loads(printed[-1])
    assert [t["result"]["trialId"] for t in as_json] == [t.result.trial_id for t in trials]
