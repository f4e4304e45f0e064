"""Settings of the searcher service (`EVERTUNE_SEARCHER_*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from evertune.infra.runtime.tls import check_tls_settings
from evertune.searcher.strategy import DEFAULT_ETA, DEFAULT_MIN_GAIN, NoiseRule

#: The noise rule's defaults: the settings of the confirmation take theirs from it (declared once).
_NOISE = NoiseRule()


class SearcherSettings(BaseSettings):
    """Settings of the searcher service; loaded once at start and passed down."""

    model_config = SettingsConfigDict(env_prefix="EVERTUNE_SEARCHER_", extra="ignore")

    #: Address of the SearchService gRPC server.
    grpc_host: str = "127.0.0.1"
    #: gRPC port; 0 picks a free one.
    grpc_port: int = Field(default=50052, ge=0, le=65535)
    #: Address the Prometheus `/metrics` server binds (`0.0.0.0` for a scraper on another host).
    metrics_host: str = "127.0.0.1"
    #: Port of the Prometheus `/metrics` server; 0 picks a free one (in the status), -1 = off.
    metrics_port: int = Field(default=9403, ge=-1, le=65535)
    #: Token file: one `<token> <tenant>` per line (`*` = every tenant), as the deployer's
    #: (`evertune.infra.runtime.auth`): a tenant's token sees and starts searches of its endpoints only.
    token_file: Path | None = None
    #: Tokens in the same format, entries separated by commas (added to the file's).
    tokens: SecretStr = SecretStr("")
    #: Serve without tokens on a non-loopback address (never do this outside a closed network).
    allow_unauthenticated: bool = False
    #: Take tokens over plaintext gRPC on a non-loopback address: only when TLS is terminated in
    #: front of the searcher (a service mesh, a proxy); otherwise set the TLS files.
    allow_plaintext_tokens: bool = False
    #: TLS certificate chain (PEM); with `tls_key_file` the server speaks TLS only.
    tls_cert_file: Path | None = None
    #: TLS private key (PEM).
    tls_key_file: Path | None = None
    #: CA (PEM) that signs client certificates: set, the server speaks mutual TLS (a client without
    #: a certificate it signed is refused). Only with the two files above.
    tls_client_ca_file: Path | None = None
    #: A profile.ready of fewer requests starts no search: a few requests (a drift alarm's short
    #: window) do not describe a workload worth trials.
    min_profile_requests: int = Field(default=30, ge=1)
    #: A search queued behind one that found a winner starts once the winner's rollout has ended
    #: (its deployment left pending, starting and canary), or after this many seconds: started
    #: during the canary it would take the old stable configuration as its baseline, and its trial
    #: engines would share the machine with the canary's. 0: start at once.
    rollout_wait_s: float = Field(default=900.0, ge=0.0)
    #: How long that wait gives the deployer to start the winner's rollout before it gives up.
    rollout_appear_s: float = Field(default=30.0, gt=0.0)
    #: Real trials of a search whose request leaves the budget at 0.
    default_budget: int = Field(default=8, ge=2, le=1000)
    #: Most real trials a request may ask for.
    max_budget: int = Field(default=64, ge=2, le=1000)
    #: What "best" means: highest goodput at the SLO, lowest p50 TTFT at the peak, or fewest
    #: accelerators per request/s at the SLO.
    objective: Literal["goodput", "p50_ttft", "cost"] = "goodput"
    #: The SLO must hold at the profile's peak rate x this (the runners' gate rate: keep them equal).
    headroom: float = Field(default=1.25, ge=1.0, le=10.0)
    #: Rates a trial replays, as multiples of the profile's peak, ascending (goodput is found on it).
    rate_ladder: tuple[float, ...] = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0)
    #: Successive halving: keep the best 1/eta of each round, at eta x the trial length.
    eta: int = Field(default=DEFAULT_ETA, ge=2, le=8)
    #: A winner must beat the live configuration's score by this share (simulated classes, whose
    #: trials have no noise; real hardware is judged by the noise rule below).
    min_gain: float = Field(default=DEFAULT_MIN_GAIN, ge=0.0, le=10.0)
    #: Real hardware: interleaved (baseline, leader) pairs measured after the halving to confirm the
    #: leader (each pair is two trials, kept from the budget when it can also hold a halving).
    confirm_pairs: int = Field(default=_NOISE.confirm_pairs, ge=0, le=20)
    #: Real hardware: pairs a winner needs, the deciding halving round's included (fewer: no winner).
    min_pairs: int = Field(default=_NOISE.min_pairs, ge=1, le=21)
    #: Confidence asked of the interval of the leader's effect (sign-test order statistics).
    noise_confidence: float = Field(default=_NOISE.confidence, gt=0.0, lt=1.0)
    #: Smallest relative A/A noise floor, whatever the baseline's repeats show.
    noise_min_floor: float = Field(default=_NOISE.min_floor, ge=0.0, le=1.0)
    #: Seconds each rate is replayed in a trial of fidelity 1 (fidelity f replays f x this).
    trial_duration_s: float = Field(default=30.0, gt=0.0, le=3600.0)
    #: Unmeasured seconds of traffic before each rate.
    trial_warmup_s: float = Field(default=0.0, ge=0.0, le=3600.0)
    #: Replays of each rate (the stability gate makes the runner do at least 2).
    trial_repeats: int = Field(default=1, ge=1, le=20)
    #: Gates every candidate trial asks for ("correctness" is skipped on sim-* classes).
    gates: tuple[Literal["correctness", "slo", "stability"], ...] = ("correctness", "slo", "stability")
    #: Seconds a fidelity-1 trial may take from publication to its report (engine start included);
    #: past it (x the fidelity) the trial counts as failed: "no runner answered".
    trial_timeout_s: float = Field(default=1800.0, gt=0.0)
    #: Seconds of the profile's trace the performance model simulates at each rate.
    model_horizon_s: float = Field(default=120.0, gt=0.0)
    #: Most replicas a candidate may have (also capped by the pool's `max_replicas`). Runners replay
    #: over every replica; 1 by default keeps the space small where replicas share one machine's cores.
    max_replicas: int = Field(default=1, ge=1, le=64)
    #: Model folder (config.json, tokenizer) the performance model reads when the endpoint's model is
    #: not a local folder; empty: the local tiny model under the data dir.
    model_dir: Path | None = None
    #: Folder the searcher writes profile traces to for the runners (file:// URIs); empty:
    #: `<data-dir>/searcher/traces`. Runners must see the same folder.
    trace_dir: Path | None = None

    @field_validator("rate_ladder")
    @classmethod
    def _ladder(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if not value or any(m <= 0 for m in value):
            raise ValueError("needs positive multipliers of the peak rate")
        if list(value) != sorted(set(value)):
            raise ValueError("must be ascending without repeats")
        return value

    @field_validator("max_budget")
    @classmethod
    def _budgets(cls, value: int, info: ValidationInfo) -> int:
        if value < info.data.get("default_budget", 0):
            raise ValueError("must be at least default_budget")
        return value

    @model_validator(mode="after")
    def _tls(self) -> Self:
        check_tls_settings(self, "EVERTUNE_SEARCHER_")
        return self
