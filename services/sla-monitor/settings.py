"""Settings of the sla-monitor service (`EVERTUNE_SLA_MONITOR_*`)."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from evertune.domain.slo import DEFAULT_ATTAINMENT
from evertune.sla_monitor.burn_rate import DEFAULT_RULES, BurnRateRule
from evertune.sla_monitor.drift import DriftConfig
from evertune.sla_monitor.payloads import ReceiverConfig, RetryPolicy, check_receivers

#: The drift detector's defaults: the `drift_*` settings below take theirs from it (declared once).
_DRIFT = DriftConfig()


class SlaMonitorSettings(BaseSettings):
    """Settings of the sla-monitor service; loaded once at start and passed down.

    Window lengths (`slot_s`, `sketch_history_s`, `resolve_hold_s` and every rule's windows) are
    multiplied by `time_scale`: 1/60 turns hours into minutes for demos and tests.
    """

    model_config = SettingsConfigDict(env_prefix="EVERTUNE_SLA_MONITOR_", extra="ignore")

    #: durable consumer name on TELEMETRY; instances sharing it share the telemetry
    durable: str = "sla-monitor"
    #: telemetry subjects watched (within the TELEMETRY stream); one endpoint's: `evertune.telemetry.<name>`
    subject: str = Field(default="evertune.telemetry.>", min_length=1)
    #: seconds between two evaluations of every rule
    evaluate_interval_s: float = Field(default=1.0, gt=0)
    #: longest wait of one telemetry fetch, in seconds (before time_scale): a pull for a batch
    #: waits this long for the batch to fill, so it bounds how late a record is seen at low traffic
    fetch_wait_s: float = Field(default=0.25, gt=0)
    #: time slot of sketches and counts, in seconds (before time_scale)
    slot_s: float = Field(default=10.0, gt=0)
    #: seconds of percentile sketches kept (before time_scale); longer windows report p99 over this
    sketch_history_s: float = Field(default=3600.0, gt=0)
    #: live percentile window shown in the status, in seconds (before time_scale)
    status_window_s: float = Field(default=300.0, gt=0)
    #: a breach resolves once its condition stayed clear this long, in seconds (before time_scale)
    resolve_hold_s: float = Field(default=300.0, ge=0)
    #: requests the long window needs before a rule may fire
    min_requests: int = Field(default=10, ge=1)
    #: requests a deployment scope (a canary beside the stable one) needs in both windows of a rule
    deployment_min_requests: int = Field(default=50, ge=1)
    #: alert per deployment while an endpoint has more than one (a canary beside the stable one)
    deployment_alerts: bool = True
    #: multiplies every window length (1 = real time, 1/60 = hours become minutes)
    time_scale: float = Field(default=1.0, gt=0)
    #: burn-rate rules (JSON list of {name, long_window_s, short_window_s, burn_rate, severity})
    rules: list[BurnRateRule] = Field(default_factory=lambda: list(DEFAULT_RULES))
    #: fast rules' counts are kept in slots this long, in seconds (before time_scale)
    fine_slot_s: float = Field(default=1.0, gt=0)
    #: rules whose long window is at most this many seconds (before time_scale) use the fine slots
    fine_history_s: float = Field(default=900.0, ge=0)
    #: KV bucket of the deployer's endpoints (serialized Endpoint per endpoint name), watched for
    #: each endpoint's SLO and alert routes; "" = use the defaults below for every endpoint
    endpoints_bucket: str = "endpoints"
    #: default SLO of endpoints not in the bucket: per-request TTFT target, in milliseconds
    ttft_p99_ms: float = Field(default=500.0, gt=0)
    #: default SLO: per-request p99 inter-token gap target, in milliseconds (0 = none)
    itl_p99_ms: float = Field(default=100.0, ge=0)
    #: default SLO: share of requests that must meet both targets (budget = 1 - this)
    attainment_target: float = Field(default=DEFAULT_ATTAINMENT, gt=0, lt=1)
    #: address of the Prometheus /metrics server
    metrics_host: str = "127.0.0.1"
    #: port of the Prometheus /metrics server; 0 picks a free one (logged, and in the status), -1 = off
    metrics_port: int = Field(default=9402, ge=-1, le=65535)
    #: watch the workload for drift and TTFT change-points (drift.detected)
    drift: bool = True
    #: seconds of an endpoint's traffic a reference is learnt from when no profile.ready gave one
    #: (after start, after a workload finding, after a deployment change; before time_scale)
    drift_reference_s: float = Field(default=600.0, gt=0)
    #: seconds between two drift checks of every endpoint (before time_scale)
    drift_check_interval_s: float = Field(default=10.0, gt=0)
    #: live window of the length and reuse tests, in requests
    drift_window_requests: int = Field(default=_DRIFT.window_requests, ge=10)
    #: requests (live and reference) a length or reuse test needs
    drift_min_requests: int = Field(default=_DRIFT.min_requests, ge=10)
    #: p-value a drift test must go below
    drift_p_value: float = Field(default=_DRIFT.p_value, gt=0, lt=1)
    #: live window of the arrival-rate test, in seconds (before time_scale)
    drift_rate_window_s: float = Field(default=_DRIFT.rate_window_s, gt=0)
    #: a drifted feature is not reported again for this long, in seconds (before time_scale)
    drift_cooldown_s: float = Field(default=_DRIFT.cooldown_s, ge=0)
    #: a prefix block counts as reused when seen this recently, in seconds (before time_scale)
    drift_prefix_horizon_s: float = Field(default=_DRIFT.prefix_horizon_s, gt=0)
    #: requests that learn the TTFT change-point baseline
    drift_cusum_warmup: int = Field(default=_DRIFT.cusum_warmup, ge=10)
    #: batch ids remembered to skip a redelivered telemetry batch
    dedup_batches: int = Field(default=10000, ge=0)
    #: alert receivers of endpoints not in the endpoints bucket (JSON list of
    #: {kind: alertmanager|pagerduty|webhook|log, url, routing_key?, min_severity?, name?, event_kinds?})
    receivers: list[ReceiverConfig] = Field(default_factory=list)
    #: seconds one alert POST may take (connect and answer)
    receiver_timeout_s: float = Field(default=5.0, gt=0)
    #: secret that signs every alert POST (X-Evertune-Timestamp, X-Evertune-Signature: "sha256=" +
    #: hex HMAC-SHA256(secret, timestamp "." body)); empty: alerts go unsigned
    alert_signing_secret: SecretStr = SecretStr("")
    #: an alert not delivered this many seconds after it was decided is dropped
    alert_max_age_s: float = Field(default=3600.0, gt=0)
    #: alerts pending per receiver at most; a full queue drops its oldest
    receiver_queue_size: int = Field(default=1000, ge=1)
    #: wait before the first retry of a failed delivery, in seconds (doubles each try, jittered)
    retry_base_s: float = Field(default=0.5, gt=0)
    #: longest wait between two delivery tries, in seconds
    retry_cap_s: float = Field(default=60.0, gt=0)

    @field_validator("rules")
    @classmethod
    def _check_rules(cls, rules: list[BurnRateRule]) -> list[BurnRateRule]:
        names = [r.name for r in rules]
        if len(set(names)) != len(names):
            raise ValueError(f"rule names must be unique, got {names}")
        for rule in rules:
            if not 0 < rule.short_window_s <= rule.long_window_s:
                raise ValueError(f"rule {rule.name}: need 0 < short_window_s <= long_window_s")
            if rule.burn_rate <= 0:
                raise ValueError(f"rule {rule.name}: burn_rate must be > 0")
            if rule.min_bad < 0:
                raise ValueError(f"rule {rule.name}: min_bad must be >= 0")
        return rules

    @field_validator("receivers")
    @classmethod
    def _check_receivers(cls, receivers: list[ReceiverConfig]) -> list[ReceiverConfig]:
        return check_receivers(receivers)

    def retry_policy(self) -> RetryPolicy:
        """The delivery retry policy of the settings."""
        return RetryPolicy(base_s=self.retry_base_s, cap_s=self.retry_cap_s, max_age_s=self.alert_max_age_s)

    def drift_config(self) -> DriftConfig:
        """The drift detector's thresholds, windows multiplied by `time_scale`."""
        k = self.time_scale
        return DriftConfig(
            window_requests=self.drift_window_requests,
            min_requests=self.drift_min_requests,
            p_value=self.drift_p_value,
            rate_window_s=self.drift_rate_window_s * k,
            prefix_horizon_s=self.drift_prefix_horizon_s * k,
            cooldown_s=self.drift_cooldown_s * k,
            cusum_warmup=self.drift_cusum_warmup,
        )

    def scaled_rules(self) -> tuple[BurnRateRule, ...]:
        """The rules with their windows multiplied by `time_scale`."""
        return tuple(r.scaled(self.time_scale) for r in self.rules)
