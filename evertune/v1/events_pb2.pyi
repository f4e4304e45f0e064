import datetime

from evertune.v1 import common_pb2 as _common_pb2
from evertune.v1 import endpoint_pb2 as _endpoint_pb2
from evertune.v1 import jobs_pb2 as _jobs_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SloMetric(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SLO_METRIC_UNSPECIFIED: _ClassVar[SloMetric]
    SLO_METRIC_ATTAINMENT: _ClassVar[SloMetric]
    SLO_METRIC_TTFT_P50: _ClassVar[SloMetric]
    SLO_METRIC_TTFT_P99: _ClassVar[SloMetric]
    SLO_METRIC_ITL_P99: _ClassVar[SloMetric]

class SearchOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEARCH_OUTCOME_UNSPECIFIED: _ClassVar[SearchOutcome]
    SEARCH_OUTCOME_WINNER: _ClassVar[SearchOutcome]
    SEARCH_OUTCOME_NO_IMPROVEMENT: _ClassVar[SearchOutcome]
    SEARCH_OUTCOME_CANCELLED: _ClassVar[SearchOutcome]
    SEARCH_OUTCOME_FAILED: _ClassVar[SearchOutcome]
    SEARCH_OUTCOME_INFEASIBLE: _ClassVar[SearchOutcome]

class TrialPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRIAL_PHASE_UNSPECIFIED: _ClassVar[TrialPhase]
    TRIAL_PHASE_ACCEPTED: _ClassVar[TrialPhase]
    TRIAL_PHASE_STARTING_ENGINE: _ClassVar[TrialPhase]
    TRIAL_PHASE_WARMUP: _ClassVar[TrialPhase]
    TRIAL_PHASE_REPLAYING: _ClassVar[TrialPhase]
    TRIAL_PHASE_GATES: _ClassVar[TrialPhase]

class DeployTrigger(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEPLOY_TRIGGER_UNSPECIFIED: _ClassVar[DeployTrigger]
    DEPLOY_TRIGGER_INITIAL: _ClassVar[DeployTrigger]
    DEPLOY_TRIGGER_SEARCH: _ClassVar[DeployTrigger]
    DEPLOY_TRIGGER_API: _ClassVar[DeployTrigger]
    DEPLOY_TRIGGER_CANARY_ANALYSIS: _ClassVar[DeployTrigger]
    DEPLOY_TRIGGER_BREACH: _ClassVar[DeployTrigger]
    DEPLOY_TRIGGER_FAILURE: _ClassVar[DeployTrigger]

class CanaryVerdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CANARY_VERDICT_UNSPECIFIED: _ClassVar[CanaryVerdict]
    CANARY_VERDICT_PROCEED: _ClassVar[CanaryVerdict]
    CANARY_VERDICT_HOLD: _ClassVar[CanaryVerdict]
    CANARY_VERDICT_ROLL_BACK: _ClassVar[CanaryVerdict]
SLO_METRIC_UNSPECIFIED: SloMetric
SLO_METRIC_ATTAINMENT: SloMetric
SLO_METRIC_TTFT_P50: SloMetric
SLO_METRIC_TTFT_P99: SloMetric
SLO_METRIC_ITL_P99: SloMetric
SEARCH_OUTCOME_UNSPECIFIED: SearchOutcome
SEARCH_OUTCOME_WINNER: SearchOutcome
SEARCH_OUTCOME_NO_IMPROVEMENT: SearchOutcome
SEARCH_OUTCOME_CANCELLED: SearchOutcome
SEARCH_OUTCOME_FAILED: SearchOutcome
SEARCH_OUTCOME_INFEASIBLE: SearchOutcome
TRIAL_PHASE_UNSPECIFIED: TrialPhase
TRIAL_PHASE_ACCEPTED: TrialPhase
TRIAL_PHASE_STARTING_ENGINE: TrialPhase
TRIAL_PHASE_WARMUP: TrialPhase
TRIAL_PHASE_REPLAYING: TrialPhase
TRIAL_PHASE_GATES: TrialPhase
DEPLOY_TRIGGER_UNSPECIFIED: DeployTrigger
DEPLOY_TRIGGER_INITIAL: DeployTrigger
DEPLOY_TRIGGER_SEARCH: DeployTrigger
DEPLOY_TRIGGER_API: DeployTrigger
DEPLOY_TRIGGER_CANARY_ANALYSIS: DeployTrigger
DEPLOY_TRIGGER_BREACH: DeployTrigger
DEPLOY_TRIGGER_FAILURE: DeployTrigger
CANARY_VERDICT_UNSPECIFIED: CanaryVerdict
CANARY_VERDICT_PROCEED: CanaryVerdict
CANARY_VERDICT_HOLD: CanaryVerdict
CANARY_VERDICT_ROLL_BACK: CanaryVerdict

class Event(_message.Message):
    __slots__ = ("id", "kind", "endpoint", "time", "source", "severity", "cause_id", "endpoint_uid", "profile_ready", "sla_breach", "sla_resolved", "drift_detected", "search_started", "search_completed", "trial_progress", "trial_completed", "deploy_started", "deploy_canary_step", "deploy_promoted", "deploy_rolled_back", "endpoint_created", "endpoint_updated", "endpoint_deleted", "service_poison_message")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    CAUSE_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_UID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_READY_FIELD_NUMBER: _ClassVar[int]
    SLA_BREACH_FIELD_NUMBER: _ClassVar[int]
    SLA_RESOLVED_FIELD_NUMBER: _ClassVar[int]
    DRIFT_DETECTED_FIELD_NUMBER: _ClassVar[int]
    SEARCH_STARTED_FIELD_NUMBER: _ClassVar[int]
    SEARCH_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    TRIAL_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    TRIAL_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    DEPLOY_STARTED_FIELD_NUMBER: _ClassVar[int]
    DEPLOY_CANARY_STEP_FIELD_NUMBER: _ClassVar[int]
    DEPLOY_PROMOTED_FIELD_NUMBER: _ClassVar[int]
    DEPLOY_ROLLED_BACK_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_CREATED_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_UPDATED_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_DELETED_FIELD_NUMBER: _ClassVar[int]
    SERVICE_POISON_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    endpoint: str
    time: _timestamp_pb2.Timestamp
    source: str
    severity: _common_pb2.Severity
    cause_id: str
    endpoint_uid: str
    profile_ready: ProfileReady
    sla_breach: SlaBreach
    sla_resolved: SlaResolved
    drift_detected: DriftDetected
    search_started: SearchStarted
    search_completed: SearchCompleted
    trial_progress: TrialProgress
    trial_completed: TrialCompleted
    deploy_started: DeployStarted
    deploy_canary_step: DeployCanaryStep
    deploy_promoted: DeployPromoted
    deploy_rolled_back: DeployRolledBack
    endpoint_created: EndpointCreated
    endpoint_updated: EndpointUpdated
    endpoint_deleted: EndpointDeleted
    service_poison_message: ServicePoisonMessage
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., endpoint: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., source: _Optional[str] = ..., severity: _Optional[_Union[_common_pb2.Severity, str]] = ..., cause_id: _Optional[str] = ..., endpoint_uid: _Optional[str] = ..., profile_ready: _Optional[_Union[ProfileReady, _Mapping]] = ..., sla_breach: _Optional[_Union[SlaBreach, _Mapping]] = ..., sla_resolved: _Optional[_Union[SlaResolved, _Mapping]] = ..., drift_detected: _Optional[_Union[DriftDetected, _Mapping]] = ..., search_started: _Optional[_Union[SearchStarted, _Mapping]] = ..., search_completed: _Optional[_Union[SearchCompleted, _Mapping]] = ..., trial_progress: _Optional[_Union[TrialProgress, _Mapping]] = ..., trial_completed: _Optional[_Union[TrialCompleted, _Mapping]] = ..., deploy_started: _Optional[_Union[DeployStarted, _Mapping]] = ..., deploy_canary_step: _Optional[_Union[DeployCanaryStep, _Mapping]] = ..., deploy_promoted: _Optional[_Union[DeployPromoted, _Mapping]] = ..., deploy_rolled_back: _Optional[_Union[DeployRolledBack, _Mapping]] = ..., endpoint_created: _Optional[_Union[EndpointCreated, _Mapping]] = ..., endpoint_updated: _Optional[_Union[EndpointUpdated, _Mapping]] = ..., endpoint_deleted: _Optional[_Union[EndpointDeleted, _Mapping]] = ..., service_poison_message: _Optional[_Union[ServicePoisonMessage, _Mapping]] = ...) -> None: ...

class Bottleneck(_message.Message):
    __slots__ = ("kind", "share", "detail")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    kind: str
    share: float
    detail: str
    def __init__(self, kind: _Optional[str] = ..., share: _Optional[float] = ..., detail: _Optional[str] = ...) -> None: ...

class WorkloadSummary(_message.Message):
    __slots__ = ("rate_rps", "peak_rate_rps", "prompt_tokens_p50", "prompt_tokens_p99", "completion_tokens_p50", "completion_tokens_p99", "prefix_reuse_share", "cached_share", "ttft_p50_ms", "ttft_p99_ms", "itl_p99_ms", "attainment", "peak_p95_rate_rps", "gap_cv", "concurrency_p50", "concurrency_p99", "conversations", "turns_per_conversation", "prefix_horizon_s", "prefix_block_tokens")
    RATE_RPS_FIELD_NUMBER: _ClassVar[int]
    PEAK_RATE_RPS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_P50_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_P99_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_P50_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_P99_FIELD_NUMBER: _ClassVar[int]
    PREFIX_REUSE_SHARE_FIELD_NUMBER: _ClassVar[int]
    CACHED_SHARE_FIELD_NUMBER: _ClassVar[int]
    TTFT_P50_MS_FIELD_NUMBER: _ClassVar[int]
    TTFT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    ITL_P99_MS_FIELD_NUMBER: _ClassVar[int]
    ATTAINMENT_FIELD_NUMBER: _ClassVar[int]
    PEAK_P95_RATE_RPS_FIELD_NUMBER: _ClassVar[int]
    GAP_CV_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_P50_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_P99_FIELD_NUMBER: _ClassVar[int]
    CONVERSATIONS_FIELD_NUMBER: _ClassVar[int]
    TURNS_PER_CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HORIZON_S_FIELD_NUMBER: _ClassVar[int]
    PREFIX_BLOCK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    rate_rps: float
    peak_rate_rps: float
    prompt_tokens_p50: float
    prompt_tokens_p99: float
    completion_tokens_p50: float
    completion_tokens_p99: float
    prefix_reuse_share: float
    cached_share: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p99_ms: float
    attainment: float
    peak_p95_rate_rps: float
    gap_cv: float
    concurrency_p50: float
    concurrency_p99: float
    conversations: int
    turns_per_conversation: float
    prefix_horizon_s: float
    prefix_block_tokens: int
    def __init__(self, rate_rps: _Optional[float] = ..., peak_rate_rps: _Optional[float] = ..., prompt_tokens_p50: _Optional[float] = ..., prompt_tokens_p99: _Optional[float] = ..., completion_tokens_p50: _Optional[float] = ..., completion_tokens_p99: _Optional[float] = ..., prefix_reuse_share: _Optional[float] = ..., cached_share: _Optional[float] = ..., ttft_p50_ms: _Optional[float] = ..., ttft_p99_ms: _Optional[float] = ..., itl_p99_ms: _Optional[float] = ..., attainment: _Optional[float] = ..., peak_p95_rate_rps: _Optional[float] = ..., gap_cv: _Optional[float] = ..., concurrency_p50: _Optional[float] = ..., concurrency_p99: _Optional[float] = ..., conversations: _Optional[int] = ..., turns_per_conversation: _Optional[float] = ..., prefix_horizon_s: _Optional[float] = ..., prefix_block_tokens: _Optional[int] = ...) -> None: ...

class ProfileReady(_message.Message):
    __slots__ = ("profile_id", "window_start", "window_end", "request_count", "summary", "bottlenecks", "trace_uri", "trace_sha256", "trigger", "version", "bottleneck_verdict", "bottleneck_source", "bottleneck_evidence", "empty_reason")
    PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    REQUEST_COUNT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    BOTTLENECKS_FIELD_NUMBER: _ClassVar[int]
    TRACE_URI_FIELD_NUMBER: _ClassVar[int]
    TRACE_SHA256_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BOTTLENECK_VERDICT_FIELD_NUMBER: _ClassVar[int]
    BOTTLENECK_SOURCE_FIELD_NUMBER: _ClassVar[int]
    BOTTLENECK_EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    EMPTY_REASON_FIELD_NUMBER: _ClassVar[int]
    profile_id: str
    window_start: _timestamp_pb2.Timestamp
    window_end: _timestamp_pb2.Timestamp
    request_count: int
    summary: WorkloadSummary
    bottlenecks: _containers.RepeatedCompositeFieldContainer[Bottleneck]
    trace_uri: str
    trace_sha256: str
    trigger: str
    version: int
    bottleneck_verdict: str
    bottleneck_source: str
    bottleneck_evidence: _containers.RepeatedScalarFieldContainer[str]
    empty_reason: str
    def __init__(self, profile_id: _Optional[str] = ..., window_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., window_end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request_count: _Optional[int] = ..., summary: _Optional[_Union[WorkloadSummary, _Mapping]] = ..., bottlenecks: _Optional[_Iterable[_Union[Bottleneck, _Mapping]]] = ..., trace_uri: _Optional[str] = ..., trace_sha256: _Optional[str] = ..., trigger: _Optional[str] = ..., version: _Optional[int] = ..., bottleneck_verdict: _Optional[str] = ..., bottleneck_source: _Optional[str] = ..., bottleneck_evidence: _Optional[_Iterable[str]] = ..., empty_reason: _Optional[str] = ...) -> None: ...

class SlaBreach(_message.Message):
    __slots__ = ("breach_id", "deployment", "metric", "window", "short_window", "burn_rate", "short_burn_rate", "burn_rate_threshold", "observed_ttft_p99_ms", "target_ttft_p99_ms", "observed_itl_p99_ms", "target_itl_p99_ms", "observed_attainment", "attainment_target", "request_count", "since")
    BREACH_ID_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    SHORT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    BURN_RATE_FIELD_NUMBER: _ClassVar[int]
    SHORT_BURN_RATE_FIELD_NUMBER: _ClassVar[int]
    BURN_RATE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_TTFT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    TARGET_TTFT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ITL_P99_MS_FIELD_NUMBER: _ClassVar[int]
    TARGET_ITL_P99_MS_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ATTAINMENT_FIELD_NUMBER: _ClassVar[int]
    ATTAINMENT_TARGET_FIELD_NUMBER: _ClassVar[int]
    REQUEST_COUNT_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    breach_id: str
    deployment: str
    metric: SloMetric
    window: _duration_pb2.Duration
    short_window: _duration_pb2.Duration
    burn_rate: float
    short_burn_rate: float
    burn_rate_threshold: float
    observed_ttft_p99_ms: float
    target_ttft_p99_ms: float
    observed_itl_p99_ms: float
    target_itl_p99_ms: float
    observed_attainment: float
    attainment_target: float
    request_count: int
    since: _timestamp_pb2.Timestamp
    def __init__(self, breach_id: _Optional[str] = ..., deployment: _Optional[str] = ..., metric: _Optional[_Union[SloMetric, str]] = ..., window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., short_window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., burn_rate: _Optional[float] = ..., short_burn_rate: _Optional[float] = ..., burn_rate_threshold: _Optional[float] = ..., observed_ttft_p99_ms: _Optional[float] = ..., target_ttft_p99_ms: _Optional[float] = ..., observed_itl_p99_ms: _Optional[float] = ..., target_itl_p99_ms: _Optional[float] = ..., observed_attainment: _Optional[float] = ..., attainment_target: _Optional[float] = ..., request_count: _Optional[int] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SlaResolved(_message.Message):
    __slots__ = ("breach_id", "deployment", "metric", "since", "duration", "burn_rate", "observed_ttft_p99_ms", "observed_attainment")
    BREACH_ID_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    BURN_RATE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_TTFT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_ATTAINMENT_FIELD_NUMBER: _ClassVar[int]
    breach_id: str
    deployment: str
    metric: SloMetric
    since: _timestamp_pb2.Timestamp
    duration: _duration_pb2.Duration
    burn_rate: float
    observed_ttft_p99_ms: float
    observed_attainment: float
    def __init__(self, breach_id: _Optional[str] = ..., deployment: _Optional[str] = ..., metric: _Optional[_Union[SloMetric, str]] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., burn_rate: _Optional[float] = ..., observed_ttft_p99_ms: _Optional[float] = ..., observed_attainment: _Optional[float] = ...) -> None: ...

class DriftSignal(_message.Message):
    __slots__ = ("feature", "statistic", "score", "threshold", "reference_value", "current_value", "measure", "p_value", "p_value_threshold", "relative_change", "min_change", "current_requests", "reference_requests", "current_window")
    FEATURE_FIELD_NUMBER: _ClassVar[int]
    STATISTIC_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_VALUE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_VALUE_FIELD_NUMBER: _ClassVar[int]
    MEASURE_FIELD_NUMBER: _ClassVar[int]
    P_VALUE_FIELD_NUMBER: _ClassVar[int]
    P_VALUE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    MIN_CHANGE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    feature: str
    statistic: str
    score: float
    threshold: float
    reference_value: float
    current_value: float
    measure: str
    p_value: float
    p_value_threshold: float
    relative_change: float
    min_change: float
    current_requests: int
    reference_requests: int
    current_window: _duration_pb2.Duration
    def __init__(self, feature: _Optional[str] = ..., statistic: _Optional[str] = ..., score: _Optional[float] = ..., threshold: _Optional[float] = ..., reference_value: _Optional[float] = ..., current_value: _Optional[float] = ..., measure: _Optional[str] = ..., p_value: _Optional[float] = ..., p_value_threshold: _Optional[float] = ..., relative_change: _Optional[float] = ..., min_change: _Optional[float] = ..., current_requests: _Optional[int] = ..., reference_requests: _Optional[int] = ..., current_window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class DriftDetected(_message.Message):
    __slots__ = ("reference_profile_id", "reference_window", "current_window", "signals")
    REFERENCE_PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_WINDOW_FIELD_NUMBER: _ClassVar[int]
    CURRENT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_FIELD_NUMBER: _ClassVar[int]
    reference_profile_id: str
    reference_window: _duration_pb2.Duration
    current_window: _duration_pb2.Duration
    signals: _containers.RepeatedCompositeFieldContainer[DriftSignal]
    def __init__(self, reference_profile_id: _Optional[str] = ..., reference_window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., current_window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., signals: _Optional[_Iterable[_Union[DriftSignal, _Mapping]]] = ...) -> None: ...

class SearchStarted(_message.Message):
    __slots__ = ("search_id", "profile_id", "hardware_classes", "trial_budget", "candidates", "trigger")
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_CLASSES_FIELD_NUMBER: _ClassVar[int]
    TRIAL_BUDGET_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    search_id: str
    profile_id: str
    hardware_classes: _containers.RepeatedScalarFieldContainer[str]
    trial_budget: int
    candidates: int
    trigger: str
    def __init__(self, search_id: _Optional[str] = ..., profile_id: _Optional[str] = ..., hardware_classes: _Optional[_Iterable[str]] = ..., trial_budget: _Optional[int] = ..., candidates: _Optional[int] = ..., trigger: _Optional[str] = ...) -> None: ...

class SearchCompleted(_message.Message):
    __slots__ = ("search_id", "profile_id", "outcome", "winner", "winner_trial_id", "winner_hardware_class", "verified", "winner_metrics", "baseline_metrics", "trials", "modeled_candidates", "duration", "error", "summary", "winner_gates", "baseline_gates", "objective", "defaults_trial_id")
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    WINNER_FIELD_NUMBER: _ClassVar[int]
    WINNER_TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    WINNER_HARDWARE_CLASS_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    WINNER_METRICS_FIELD_NUMBER: _ClassVar[int]
    BASELINE_METRICS_FIELD_NUMBER: _ClassVar[int]
    TRIALS_FIELD_NUMBER: _ClassVar[int]
    MODELED_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    WINNER_GATES_FIELD_NUMBER: _ClassVar[int]
    BASELINE_GATES_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    DEFAULTS_TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    search_id: str
    profile_id: str
    outcome: SearchOutcome
    winner: _endpoint_pb2.EngineConfig
    winner_trial_id: str
    winner_hardware_class: str
    verified: bool
    winner_metrics: _jobs_pb2.TrialMetrics
    baseline_metrics: _jobs_pb2.TrialMetrics
    trials: int
    modeled_candidates: int
    duration: _duration_pb2.Duration
    error: str
    summary: str
    winner_gates: _containers.RepeatedCompositeFieldContainer[_jobs_pb2.GateResult]
    baseline_gates: _containers.RepeatedCompositeFieldContainer[_jobs_pb2.GateResult]
    objective: _endpoint_pb2.SearchObjective
    defaults_trial_id: str
    def __init__(self, search_id: _Optional[str] = ..., profile_id: _Optional[str] = ..., outcome: _Optional[_Union[SearchOutcome, str]] = ..., winner: _Optional[_Union[_endpoint_pb2.EngineConfig, _Mapping]] = ..., winner_trial_id: _Optional[str] = ..., winner_hardware_class: _Optional[str] = ..., verified: _Optional[bool] = ..., winner_metrics: _Optional[_Union[_jobs_pb2.TrialMetrics, _Mapping]] = ..., baseline_metrics: _Optional[_Union[_jobs_pb2.TrialMetrics, _Mapping]] = ..., trials: _Optional[int] = ..., modeled_candidates: _Optional[int] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., error: _Optional[str] = ..., summary: _Optional[str] = ..., winner_gates: _Optional[_Iterable[_Union[_jobs_pb2.GateResult, _Mapping]]] = ..., baseline_gates: _Optional[_Iterable[_Union[_jobs_pb2.GateResult, _Mapping]]] = ..., objective: _Optional[_Union[_endpoint_pb2.SearchObjective, str]] = ..., defaults_trial_id: _Optional[str] = ...) -> None: ...

class TrialProgress(_message.Message):
    __slots__ = ("search_id", "trial_id", "job_id", "phase", "rate_rps", "rates_done", "rates_total", "runner")
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    RATE_RPS_FIELD_NUMBER: _ClassVar[int]
    RATES_DONE_FIELD_NUMBER: _ClassVar[int]
    RATES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RUNNER_FIELD_NUMBER: _ClassVar[int]
    search_id: str
    trial_id: str
    job_id: str
    phase: TrialPhase
    rate_rps: float
    rates_done: int
    rates_total: int
    runner: str
    def __init__(self, search_id: _Optional[str] = ..., trial_id: _Optional[str] = ..., job_id: _Optional[str] = ..., phase: _Optional[_Union[TrialPhase, str]] = ..., rate_rps: _Optional[float] = ..., rates_done: _Optional[int] = ..., rates_total: _Optional[int] = ..., runner: _Optional[str] = ...) -> None: ...

class TrialCompleted(_message.Message):
    __slots__ = ("search_id", "trial_id", "job_id", "hardware_class", "engine_config", "status", "metrics", "ttft_p50_ms", "ttft_p99_ms", "goodput_rps", "gates", "passed", "simulated", "baseline", "duration", "runner", "error", "hardware", "phases")
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_CLASS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    TTFT_P50_MS_FIELD_NUMBER: _ClassVar[int]
    TTFT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    GOODPUT_RPS_FIELD_NUMBER: _ClassVar[int]
    GATES_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    SIMULATED_FIELD_NUMBER: _ClassVar[int]
    BASELINE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    RUNNER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    search_id: str
    trial_id: str
    job_id: str
    hardware_class: str
    engine_config: _endpoint_pb2.EngineConfig
    status: _jobs_pb2.TrialStatus
    metrics: _jobs_pb2.TrialMetrics
    ttft_p50_ms: float
    ttft_p99_ms: float
    goodput_rps: float
    gates: _containers.RepeatedCompositeFieldContainer[_jobs_pb2.GateResult]
    passed: bool
    simulated: bool
    baseline: bool
    duration: _duration_pb2.Duration
    runner: str
    error: str
    hardware: _jobs_pb2.HardwareFingerprint
    phases: _jobs_pb2.TrialPhases
    def __init__(self, search_id: _Optional[str] = ..., trial_id: _Optional[str] = ..., job_id: _Optional[str] = ..., hardware_class: _Optional[str] = ..., engine_config: _Optional[_Union[_endpoint_pb2.EngineConfig, _Mapping]] = ..., status: _Optional[_Union[_jobs_pb2.TrialStatus, str]] = ..., metrics: _Optional[_Union[_jobs_pb2.TrialMetrics, _Mapping]] = ..., ttft_p50_ms: _Optional[float] = ..., ttft_p99_ms: _Optional[float] = ..., goodput_rps: _Optional[float] = ..., gates: _Optional[_Iterable[_Union[_jobs_pb2.GateResult, _Mapping]]] = ..., passed: _Optional[bool] = ..., simulated: _Optional[bool] = ..., baseline: _Optional[bool] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., runner: _Optional[str] = ..., error: _Optional[str] = ..., hardware: _Optional[_Union[_jobs_pb2.HardwareFingerprint, _Mapping]] = ..., phases: _Optional[_Union[_jobs_pb2.TrialPhases, _Mapping]] = ...) -> None: ...

class DeployStarted(_message.Message):
    __slots__ = ("deployment_id", "previous_deployment_id", "engine_config", "trigger", "search_id", "trial_id", "canary_steps")
    DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    CANARY_STEPS_FIELD_NUMBER: _ClassVar[int]
    deployment_id: str
    previous_deployment_id: str
    engine_config: _endpoint_pb2.EngineConfig
    trigger: DeployTrigger
    search_id: str
    trial_id: str
    canary_steps: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, deployment_id: _Optional[str] = ..., previous_deployment_id: _Optional[str] = ..., engine_config: _Optional[_Union[_endpoint_pb2.EngineConfig, _Mapping]] = ..., trigger: _Optional[_Union[DeployTrigger, str]] = ..., search_id: _Optional[str] = ..., trial_id: _Optional[str] = ..., canary_steps: _Optional[_Iterable[int]] = ...) -> None: ...

class DeployCanaryStep(_message.Message):
    __slots__ = ("deployment_id", "stable_deployment_id", "step", "steps", "weight", "verdict", "canary_ttft_p99_ms", "stable_ttft_p99_ms", "canary_attainment", "stable_attainment", "canary_error_share", "canary_requests")
    DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STABLE_DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    CANARY_TTFT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    STABLE_TTFT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    CANARY_ATTAINMENT_FIELD_NUMBER: _ClassVar[int]
    STABLE_ATTAINMENT_FIELD_NUMBER: _ClassVar[int]
    CANARY_ERROR_SHARE_FIELD_NUMBER: _ClassVar[int]
    CANARY_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    deployment_id: str
    stable_deployment_id: str
    step: int
    steps: int
    weight: int
    verdict: CanaryVerdict
    canary_ttft_p99_ms: float
    stable_ttft_p99_ms: float
    canary_attainment: float
    stable_attainment: float
    canary_error_share: float
    canary_requests: int
    def __init__(self, deployment_id: _Optional[str] = ..., stable_deployment_id: _Optional[str] = ..., step: _Optional[int] = ..., steps: _Optional[int] = ..., weight: _Optional[int] = ..., verdict: _Optional[_Union[CanaryVerdict, str]] = ..., canary_ttft_p99_ms: _Optional[float] = ..., stable_ttft_p99_ms: _Optional[float] = ..., canary_attainment: _Optional[float] = ..., stable_attainment: _Optional[float] = ..., canary_error_share: _Optional[float] = ..., canary_requests: _Optional[int] = ...) -> None: ...

class DeployPromoted(_message.Message):
    __slots__ = ("deployment_id", "previous_deployment_id", "engine_config", "rollout_duration")
    DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_DURATION_FIELD_NUMBER: _ClassVar[int]
    deployment_id: str
    previous_deployment_id: str
    engine_config: _endpoint_pb2.EngineConfig
    rollout_duration: _duration_pb2.Duration
    def __init__(self, deployment_id: _Optional[str] = ..., previous_deployment_id: _Optional[str] = ..., engine_config: _Optional[_Union[_endpoint_pb2.EngineConfig, _Mapping]] = ..., rollout_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class DeployRolledBack(_message.Message):
    __slots__ = ("deployment_id", "restored_deployment_id", "trigger", "breach_id", "step", "reason")
    DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    RESTORED_DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    BREACH_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    deployment_id: str
    restored_deployment_id: str
    trigger: DeployTrigger
    breach_id: str
    step: int
    reason: str
    def __init__(self, deployment_id: _Optional[str] = ..., restored_deployment_id: _Optional[str] = ..., trigger: _Optional[_Union[DeployTrigger, str]] = ..., breach_id: _Optional[str] = ..., step: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class EndpointCreated(_message.Message):
    __slots__ = ("endpoint",)
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    endpoint: _endpoint_pb2.Endpoint
    def __init__(self, endpoint: _Optional[_Union[_endpoint_pb2.Endpoint, _Mapping]] = ...) -> None: ...

class EndpointUpdated(_message.Message):
    __slots__ = ("endpoint", "changed_fields", "previous_revision")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELDS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_REVISION_FIELD_NUMBER: _ClassVar[int]
    endpoint: _endpoint_pb2.Endpoint
    changed_fields: _containers.RepeatedScalarFieldContainer[str]
    previous_revision: int
    def __init__(self, endpoint: _Optional[_Union[_endpoint_pb2.Endpoint, _Mapping]] = ..., changed_fields: _Optional[_Iterable[str]] = ..., previous_revision: _Optional[int] = ...) -> None: ...

class EndpointDeleted(_message.Message):
    __slots__ = ("name", "tenant", "revision")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    name: str
    tenant: str
    revision: int
    def __init__(self, name: _Optional[str] = ..., tenant: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class ServicePoisonMessage(_message.Message):
    __slots__ = ("stream", "consumer", "subject", "msg_id", "stream_sequence", "deliveries", "error", "payload_bytes")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    stream: str
    consumer: str
    subject: str
    msg_id: str
    stream_sequence: int
    deliveries: int
    error: str
    payload_bytes: int
    def __init__(self, stream: _Optional[str] = ..., consumer: _Optional[str] = ..., subject: _Optional[str] = ..., msg_id: _Optional[str] = ..., stream_sequence: _Optional[int] = ..., deliveries: _Optional[int] = ..., error: _Optional[str] = ..., payload_bytes: _Optional[int] = ...) -> None: ...
