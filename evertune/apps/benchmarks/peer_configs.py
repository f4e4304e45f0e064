"""The peers' configurations for `bench peers` (issue 39), built from evertune's own search space:
`vllm bench sweep serve`'s serve parameters, and vllm-optimizer's search space and config file.

Each peer tunes `vllm serve` flags. A candidate of evertune's space becomes the flags evertune itself
starts vLLM with (`knob_args`), as the peers spell them: the sweep takes a JSON list of complete
combinations (`{"max_num_seqs": 128, "enable_prefix_caching": false}`, false meaning `--no-...`);
vllm-optimizer takes the values of each flag (`tune: {max-num-seqs: {values: [...]}}`) and samples
their product. What a peer cannot express is left out, each with its reason: evertune's int8 copy
(another model folder), another engine (llama.cpp), replicas (evertune's engine group), and a knob
carried by an environment variable that differs between candidates (the sweep sets the server's
environment once).

Both peers replay the same `timed_trace` file (`evertune.domain.workloads.timed_trace`) through
`vllm bench serve`, with the same client arguments (`bench_args`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evertune.domain.engines.config import EngineSpec
from evertune.domain.engines.hardware import HardwareProfile
from evertune.domain.engines.vllm_args import EVERTUNE_INT8, knob_args
from evertune.domain.slo import Slo
from evertune.domain.workloads.timed_trace import BLOCK_TOKENS
from evertune.searcher.space import engine_default_values

#: A serve parameter's value: a flag's argument, or True/False for `--flag`/`--no-flag`.
ParamValue = int | float | str | bool


@dataclass(frozen=True)
class PeerGrid:
    """evertune's candidates as the peers can serve them."""

    #: one complete set of `vllm serve` flags a candidate (flag name without dashes, `_` spelling)
    serve_params: list[dict[str, ParamValue]]
    keys: list[str]  #: evertune's config key of each entry of `serve_params`, in order
    env: dict[str, str]  #: environment every candidate's server shares (the knobs' variables)
    left_out: dict[str, str] = field(default_factory=dict)  #: config key -> why no peer can serve it


def flags_as_params(argv: Sequence[str]) -> dict[str, ParamValue]:
    """`["--max-num-seqs", "128", "--no-enable-prefix-caching"]` as the peers' parameters
    (`{"max_num_seqs": 128, "enable_prefix_caching": False}`)."""
    params: dict[str, ParamValue] = {}
    i = 0
    while i < len(argv):
        flag = argv[i]
        if not flag.startswith("--"):
            raise ValueError(f"not a flag: {flag!r}")
        takes_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        if takes_value:
            params[flag[2:].replace("-", "_")] = _number_or_text(argv[i + 1])
            i += 2
        elif flag.startswith("--no-"):
            params[flag[5:].replace("-", "_")] = False
            i += 1
        else:
            params[flag[2:].replace("-", "_")] = True
            i += 1
    return params


def params_as_flags(params: dict[str, ParamValue]) -> list[str]:
    """The `vllm serve` flags of a parameter set, as the sweep and vllm-optimizer render them."""
    argv: list[str] = []
    for name, value in params.items():
        flag = name.replace("_", "-")
        if value is True:
            argv.append(f"--{flag}")
        elif value is False:
            argv.append(f"--no-{flag}")
        else:
            argv += [f"--{flag}", str(value)]
    return argv


def _number_or_text(text: str) -> ParamValue:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _why_left_out(spec: EngineSpec) -> str:
    if spec.kind != "vllm":
        return f"another engine ({spec.kind}): the peers start `vllm serve` only"
    if spec.quantization == EVERTUNE_INT8:
        return "evertune's int8 copy is another model folder: the peers tune flags of one model"
    if spec.replica_count > 1:
        return "replicas are evertune's engine group: `vllm serve` starts one server"
    return ""


def peer_grid(specs: Sequence[tuple[str, EngineSpec]], *, hardware: HardwareProfile) -> PeerGrid:
    """The candidates `specs` (config key, spec) as serve parameters, in their order."""
    serve_params: list[dict[str, ParamValue]] = []
    keys: list[str] = []
    envs: list[dict[str, str]] = []
    left_out: dict[str, str] = {}
    for key, spec in specs:
        reason = _why_left_out(spec)
        if reason:
            left_out[key] = reason
            continue
        # every searched knob written out, at vLLM's default where evertune leaves it unset: the
        # optimizer then has the default among each flag's values
        unset = {
            name: value
            for name, value in engine_default_values(hardware).items()
            if name != "replicas" and getattr(spec, name) is None
        }
        args = knob_args(spec.model_copy(update=unset), hardware=hardware)
        serve_params.append(flags_as_params(args.argv))
        keys.append(key)
        envs.append(args.env)
    # the sweep sets one environment for every server: a candidate whose variables differ is out
    shared = envs[0] if envs else {}
    for key, env in zip(keys, envs, strict=True):
        if env != shared:
            left_out[key] = f"its environment {env} differs from the others' {shared}"
    kept = [i for i, env in enumerate(envs) if env == shared]
    return PeerGrid(
        serve_params=[serve_params[i] for i in kept],
        keys=[keys[i] for i in kept],
        env=dict(shared),
        left_out=left_out,
    )


def optimizer_space(grid: PeerGrid) -> dict[str, dict[str, list[ParamValue]]]:
    """vllm-optimizer's `tune:` section: each flag evertune's candidates set with more than one
    value, and those values (in first-seen order). The optimizer samples their product, which can
    hold combinations evertune's space leaves out (a step budget below the sequence limit): vLLM
    refuses them at start, a failed trial the optimizer records."""
    values: dict[str, list[ParamValue]] = {}
    for params in grid.serve_params:
        for name, value in params.items():
            seen = values.setdefault(name, [])
            if value not in seen:
                seen.append(value)
    return {name.replace("_", "-"): {"values": v} for name, v in values.items() if len(v) > 1}


def fixed_params(grid: PeerGrid) -> dict[str, ParamValue]:
    """The flags every candidate sets to the same value (the optimizer's fixed `server:` flags)."""
    if not grid.serve_params:
        return {}
    first = grid.serve_params[0]
    return {
        name: value
        for name, value in first.items()
        if all(params.get(name) == value for params in grid.serve_params)
    }


def bench_args(*, trace_path: Path, requests: int, slo: Slo) -> dict[str, ParamValue]:
    """`vllm bench serve`'s arguments for the common workload, the same for every peer: the
    timed_trace file of `requests` lines replayed at its own timestamps, greedy, with TTFT
    percentiles and the goodput at the SLO's TTFT target. `requests` must be the file's line count:
    vLLM's client stops at `--num-prompts` (1000 by default), and vllm-optimizer counts every
    request short of it as failed (a 35-line trace at 100 failed 65%, 2026-12-07)."""
    return {
        "dataset-name": "timed_trace",
        "dataset-path": str(trace_path),
        "timed-trace-chunk-hash-size": BLOCK_TOKENS,
        "num-prompts": requests,
        "goodput": f"ttft:{slo.ttft_ms:g}",
        "metric-percentiles": "50,90,99",
        "percentile-metrics": "ttft,tpot,itl,e2el",
        "temperature": 0,
    }


def optimizer_config(
    grid: PeerGrid,
    *,
    name: str,
    output_dir: Path,
    model_dir: Path,
    port: int,
    bench: dict[str, ParamValue],
    slo: Slo,
    trials: int,
    repeats: int,
    seed: int,
) -> dict[str, Any]:
    """vllm-optimizer's config (its YAML; JSON is YAML too): TPE over evertune's flags, maximising
    the requests served within the SLO's TTFT target (it can only maximise), constrained to the
    SLO's p50 TTFT target (its constraints take average/p50/p95/p99, not the SLO's p90 share)."""
    tune = optimizer_space(grid)
    constraints: list[dict[str, Any]] = []
    if slo.ttft_p50_ms:
        constraints.append(
            {"metric": "time_to_first_token_ms", "statistic": "p50", "max": f"{slo.ttft_p50_ms:g} ms"}
        )
    server = {flag.replace("_", "-"): value for flag, value in fixed_params(grid).items()}
    return {
        "schema_version": 1,
        "experiment": {"name": name, "output_dir": str(output_dir), "seed": seed},
        "server": {"model": str(model_dir), "host": "127.0.0.1", "port": port, **server},
        "tune": tune,
        "env": dict(grid.env),
        "benchmark": {"engine": "vllm", "repeats": repeats, "runs": [{"name": "voice", "args": dict(bench)}]},
        "baseline": {"enabled": True},
        "optimization": {
            "maximize": "request_goodput",
            "sampler": "tpe",
            "trials": trials,
            "constraints": constraints,
        },
    }
