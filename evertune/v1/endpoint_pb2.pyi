import datetime

from evertune.v1 import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SearchPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEARCH_POLICY_UNSPECIFIED: _ClassVar[SearchPolicy]
    SEARCH_POLICY_AUTO: _ClassVar[SearchPolicy]
    SEARCH_POLICY_ADVISORY: _ClassVar[SearchPolicy]
    SEARCH_POLICY_OFF: _ClassVar[SearchPolicy]

class AlertRouteKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ALERT_ROUTE_KIND_UNSPECIFIED: _ClassVar[AlertRouteKind]
    ALERT_ROUTE_KIND_WEBHOOK: _ClassVar[AlertRouteKind]
    ALERT_ROUTE_KIND_LOG: _ClassVar[AlertRouteKind]
    ALERT_ROUTE_KIND_ALERTMANAGER: _ClassVar[AlertRouteKind]
    ALERT_ROUTE_KIND_PAGERDUTY: _ClassVar[AlertRouteKind]

class SearchObjective(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEARCH_OBJECTIVE_UNSPECIFIED: _ClassVar[SearchObjective]
    SEARCH_OBJECTIVE_GOODPUT: _ClassVar[SearchObjective]
    SEARCH_OBJECTIVE_P50_TTFT: _ClassVar[SearchObjective]
    SEARCH_OBJECTIVE_COST: _ClassVar[SearchObjective]

class EndpointState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENDPOINT_STATE_UNSPECIFIED: _ClassVar[EndpointState]
    ENDPOINT_STATE_PROVISIONING: _ClassVar[EndpointState]
    ENDPOINT_STATE_READY: _ClassVar[EndpointState]
    ENDPOINT_STATE_DEGRADED: _ClassVar[EndpointState]
    ENDPOINT_STATE_DELETING: _ClassVar[EndpointState]
    ENDPOINT_STATE_FAILED: _ClassVar[EndpointState]

class DeploymentState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEPLOYMENT_STATE_UNSPECIFIED: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_PENDING: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_STARTING: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_CANARY: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_ACTIVE: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_DRAINING: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_RETIRED: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_ROLLED_BACK: _ClassVar[DeploymentState]
    DEPLOYMENT_STATE_FAILED: _ClassVar[DeploymentState]

class DeploymentOrigin(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEPLOYMENT_ORIGIN_UNSPECIFIED: _ClassVar[DeploymentOrigin]
    DEPLOYMENT_ORIGIN_INITIAL: _ClassVar[DeploymentOrigin]
    DEPLOYMENT_ORIGIN_SEARCH: _ClassVar[DeploymentOrigin]
    DEPLOYMENT_ORIGIN_PROMOTE: _ClassVar[DeploymentOrigin]
    DEPLOYMENT_ORIGIN_ROLLBACK: _ClassVar[DeploymentOrigin]
SEARCH_POLICY_UNSPECIFIED: SearchPolicy
SEARCH_POLICY_AUTO: SearchPolicy
SEARCH_POLICY_ADVISORY: SearchPolicy
SEARCH_POLICY_OFF: SearchPolicy
ALERT_ROUTE_KIND_UNSPECIFIED: AlertRouteKind
ALERT_ROUTE_KIND_WEBHOOK: AlertRouteKind
ALERT_ROUTE_KIND_LOG: AlertRouteKind
ALERT_ROUTE_KIND_ALERTMANAGER: AlertRouteKind
ALERT_ROUTE_KIND_PAGERDUTY: AlertRouteKind
SEARCH_OBJECTIVE_UNSPECIFIED: SearchObjective
SEARCH_OBJECTIVE_GOODPUT: SearchObjective
SEARCH_OBJECTIVE_P50_TTFT: SearchObjective
SEARCH_OBJECTIVE_COST: SearchObjective
ENDPOINT_STATE_UNSPECIFIED: EndpointState
ENDPOINT_STATE_PROVISIONING: EndpointState
ENDPOINT_STATE_READY: EndpointState
ENDPOINT_STATE_DEGRADED: EndpointState
ENDPOINT_STATE_DELETING: EndpointState
ENDPOINT_STATE_FAILED: EndpointState
DEPLOYMENT_STATE_UNSPECIFIED: DeploymentState
DEPLOYMENT_STATE_PENDING: DeploymentState
DEPLOYMENT_STATE_STARTING: DeploymentState
DEPLOYMENT_STATE_CANARY: DeploymentState
DEPLOYMENT_STATE_ACTIVE: DeploymentState
DEPLOYMENT_STATE_DRAINING: DeploymentState
DEPLOYMENT_STATE_RETIRED: DeploymentState
DEPLOYMENT_STATE_ROLLED_BACK: DeploymentState
DEPLOYMENT_STATE_FAILED: DeploymentState
DEPLOYMENT_ORIGIN_UNSPECIFIED: DeploymentOrigin
DEPLOYMENT_ORIGIN_INITIAL: DeploymentOrigin
DEPLOYMENT_ORIGIN_SEARCH: DeploymentOrigin
DEPLOYMENT_ORIGIN_PROMOTE: DeploymentOrigin
DEPLOYMENT_ORIGIN_ROLLBACK: DeploymentOrigin

class Slo(_message.Message):
    __slots__ = ("ttft_p50_ms", "ttft_p99_ms", "itl_p99_ms", "attainment_target")
    TTFT_P50_MS_FIELD_NUMBER: _ClassVar[int]
    TTFT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    ITL_P99_MS_FIELD_NUMBER: _ClassVar[int]
    ATTAINMENT_TARGET_FIELD_NUMBER: _ClassVar[int]
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p99_ms: float
    attainment_target: float
    def __init__(self, ttft_p50_ms: _Optional[float] = ..., ttft_p99_ms: _Optional[float] = ..., itl_p99_ms: _Optional[float] = ..., attainment_target: _Optional[float] = ...) -> None: ...

class HardwarePool(_message.Message):
    __slots__ = ("hardware_class", "max_replicas")
    HARDWARE_CLASS_FIELD_NUMBER: _ClassVar[int]
    MAX_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    hardware_class: str
    max_replicas: int
    def __init__(self, hardware_class: _Optional[str] = ..., max_replicas: _Optional[int] = ...) -> None: ...

class AlertRoute(_message.Message):
    __slots__ = ("name", "kind", "url", "min_severity", "event_kinds", "routing_key")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    MIN_SEVERITY_FIELD_NUMBER: _ClassVar[int]
    EVENT_KINDS_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: AlertRouteKind
    url: str
    min_severity: _common_pb2.Severity
    event_kinds: _containers.RepeatedScalarFieldContainer[str]
    routing_key: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[AlertRouteKind, str]] = ..., url: _Optional[str] = ..., min_severity: _Optional[_Union[_common_pb2.Severity, str]] = ..., event_kinds: _Optional[_Iterable[str]] = ..., routing_key: _Optional[str] = ...) -> None: ...

class SpeculativeConfig(_message.Message):
    __slots__ = ("method", "num_speculative_tokens", "draft_model", "prompt_lookup_max")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    NUM_SPECULATIVE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOOKUP_MAX_FIELD_NUMBER: _ClassVar[int]
    method: str
    num_speculative_tokens: int
    draft_model: str
    prompt_lookup_max: int
    def __init__(self, method: _Optional[str] = ..., num_speculative_tokens: _Optional[int] = ..., draft_model: _Optional[str] = ..., prompt_lookup_max: _Optional[int] = ...) -> None: ...

class EngineConfig(_message.Message):
    __slots__ = ("engine", "model", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "enable_prefix_caching", "enforce_eager", "dtype", "block_size", "kv_cache_space_gib", "speculative", "quantization", "tensor_parallel_size", "replicas", "kernels", "max_model_len", "micro_batch_tokens", "flash_attention", "cache_reuse_tokens")
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_SEQS_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_BATCHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_CHUNKED_PREFILL_FIELD_NUMBER: _ClassVar[int]
    ENABLE_PREFIX_CACHING_FIELD_NUMBER: _ClassVar[int]
    ENFORCE_EAGER_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_SPACE_GIB_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    QUANTIZATION_FIELD_NUMBER: _ClassVar[int]
    TENSOR_PARALLEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    MICRO_BATCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FLASH_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    CACHE_REUSE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    engine: str
    model: str
    max_num_seqs: int
    max_num_batched_tokens: int
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    enforce_eager: bool
    dtype: str
    block_size: int
    kv_cache_space_gib: float
    speculative: SpeculativeConfig
    quantization: str
    tensor_parallel_size: int
    replicas: int
    kernels: str
    max_model_len: int
    micro_batch_tokens: int
    flash_attention: bool
    cache_reuse_tokens: int
    def __init__(self, engine: _Optional[str] = ..., model: _Optional[str] = ..., max_num_seqs: _Optional[int] = ..., max_num_batched_tokens: _Optional[int] = ..., enable_chunked_prefill: _Optional[bool] = ..., enable_prefix_caching: _Optional[bool] = ..., enforce_eager: _Optional[bool] = ..., dtype: _Optional[str] = ..., block_size: _Optional[int] = ..., kv_cache_space_gib: _Optional[float] = ..., speculative: _Optional[_Union[SpeculativeConfig, _Mapping]] = ..., quantization: _Optional[str] = ..., tensor_parallel_size: _Optional[int] = ..., replicas: _Optional[int] = ..., kernels: _Optional[str] = ..., max_model_len: _Optional[int] = ..., micro_batch_tokens: _Optional[int] = ..., flash_attention: _Optional[bool] = ..., cache_reuse_tokens: _Optional[int] = ...) -> None: ...

class EndpointSpec(_message.Message):
    __slots__ = ("name", "tenant", "model", "slo", "hardware_pool", "initial_engine_config", "search_policy", "alert_routes", "correctness_agreement_threshold", "objective", "rollout")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SLO_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_POOL_FIELD_NUMBER: _ClassVar[int]
    INITIAL_ENGINE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    SEARCH_POLICY_FIELD_NUMBER: _ClassVar[int]
    ALERT_ROUTES_FIELD_NUMBER: _ClassVar[int]
    CORRECTNESS_AGREEMENT_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    name: str
    tenant: str
    model: str
    slo: Slo
    hardware_pool: HardwarePool
    initial_engine_config: EngineConfig
    search_policy: SearchPolicy
    alert_routes: _containers.RepeatedCompositeFieldContainer[AlertRoute]
    correctness_agreement_threshold: float
    objective: SearchObjective
    rollout: RolloutPolicy
    def __init__(self, name: _Optional[str] = ..., tenant: _Optional[str] = ..., model: _Optional[str] = ..., slo: _Optional[_Union[Slo, _Mapping]] = ..., hardware_pool: _Optional[_Union[HardwarePool, _Mapping]] = ..., initial_engine_config: _Optional[_Union[EngineConfig, _Mapping]] = ..., search_policy: _Optional[_Union[SearchPolicy, str]] = ..., alert_routes: _Optional[_Iterable[_Union[AlertRoute, _Mapping]]] = ..., correctness_agreement_threshold: _Optional[float] = ..., objective: _Optional[_Union[SearchObjective, str]] = ..., rollout: _Optional[_Union[RolloutPolicy, _Mapping]] = ...) -> None: ...

class RolloutPolicy(_message.Message):
    __slots__ = ("steps", "step_duration_s", "min_requests", "tail_min_requests", "max_ttft_regression", "ttft_slack_ms", "max_itl_regression", "itl_slack_ms", "max_error_share_increase", "p_value", "failure_limit")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    STEP_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    MIN_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TAIL_MIN_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    MAX_TTFT_REGRESSION_FIELD_NUMBER: _ClassVar[int]
    TTFT_SLACK_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_ITL_REGRESSION_FIELD_NUMBER: _ClassVar[int]
    ITL_SLACK_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_ERROR_SHARE_INCREASE_FIELD_NUMBER: _ClassVar[int]
    P_VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedScalarFieldContainer[int]
    step_duration_s: float
    min_requests: int
    tail_min_requests: int
    max_ttft_regression: float
    ttft_slack_ms: float
    max_itl_regression: float
    itl_slack_ms: float
    max_error_share_increase: float
    p_value: float
    failure_limit: int
    def __init__(self, steps: _Optional[_Iterable[int]] = ..., step_duration_s: _Optional[float] = ..., min_requests: _Optional[int] = ..., tail_min_requests: _Optional[int] = ..., max_ttft_regression: _Optional[float] = ..., ttft_slack_ms: _Optional[float] = ..., max_itl_regression: _Optional[float] = ..., itl_slack_ms: _Optional[float] = ..., max_error_share_increase: _Optional[float] = ..., p_value: _Optional[float] = ..., failure_limit: _Optional[int] = ...) -> None: ...

class Endpoint(_message.Message):
    __slots__ = ("spec", "state", "create_time", "update_time", "revision", "stable_deployment_id", "state_message", "uid")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    STABLE_DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    spec: EndpointSpec
    state: EndpointState
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    revision: int
    stable_deployment_id: str
    state_message: str
    uid: str
    def __init__(self, spec: _Optional[_Union[EndpointSpec, _Mapping]] = ..., state: _Optional[_Union[EndpointState, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revision: _Optional[int] = ..., stable_deployment_id: _Optional[str] = ..., state_message: _Optional[str] = ..., uid: _Optional[str] = ...) -> None: ...

class Deployment(_message.Message):
    __slots__ = ("id", "endpoint", "engine_config", "state", "weight", "create_time", "update_time", "origin", "origin_search_id", "origin_trial_id", "previous_deployment_id", "upstream_url", "state_message")
    ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_URL_FIELD_NUMBER: _ClassVar[int]
    STATE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    endpoint: str
    engine_config: EngineConfig
    state: DeploymentState
    weight: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    origin: DeploymentOrigin
    origin_search_id: str
    origin_trial_id: str
    previous_deployment_id: str
    upstream_url: str
    state_message: str
    def __init__(self, id: _Optional[str] = ..., endpoint: _Optional[str] = ..., engine_config: _Optional[_Union[EngineConfig, _Mapping]] = ..., state: _Optional[_Union[DeploymentState, str]] = ..., weight: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., origin: _Optional[_Union[DeploymentOrigin, str]] = ..., origin_search_id: _Optional[str] = ..., origin_trial_id: _Optional[str] = ..., previous_deployment_id: _Optional[str] = ..., upstream_url: _Optional[str] = ..., state_message: _Optional[str] = ...) -> None: ...

class Route(_message.Message):
    __slots__ = ("deployment_id", "upstream_url", "weight")
    DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_URL_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    deployment_id: str
    upstream_url: str
    weight: int
    def __init__(self, deployment_id: _Optional[str] = ..., upstream_url: _Optional[str] = ..., weight: _Optional[int] = ...) -> None: ...

class RouteTable(_message.Message):
    __slots__ = ("endpoint", "routes", "revision", "update_time", "tenant", "endpoint_uid", "model")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_UID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    routes: _containers.RepeatedCompositeFieldContainer[Route]
    revision: int
    update_time: _timestamp_pb2.Timestamp
    tenant: str
    endpoint_uid: str
    model: str
    def __init__(self, endpoint: _Optional[str] = ..., routes: _Optional[_Iterable[_Union[Route, _Mapping]]] = ..., revision: _Optional[int] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tenant: _Optional[str] = ..., endpoint_uid: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...
