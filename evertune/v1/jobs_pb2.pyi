import datetime

from evertune.v1 import endpoint_pb2 as _endpoint_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TrialStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRIAL_STATUS_UNSPECIFIED: _ClassVar[TrialStatus]
    TRIAL_STATUS_OK: _ClassVar[TrialStatus]
    TRIAL_STATUS_ERROR: _ClassVar[TrialStatus]
    TRIAL_STATUS_TIMEOUT: _ClassVar[TrialStatus]
    TRIAL_STATUS_CANCELLED: _ClassVar[TrialStatus]
TRIAL_STATUS_UNSPECIFIED: TrialStatus
TRIAL_STATUS_OK: TrialStatus
TRIAL_STATUS_ERROR: TrialStatus
TRIAL_STATUS_TIMEOUT: TrialStatus
TRIAL_STATUS_CANCELLED: TrialStatus

class GateSpec(_message.Message):
    __slots__ = ("name", "threshold", "reference_uri")
    NAME_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_URI_FIELD_NUMBER: _ClassVar[int]
    name: str
    threshold: float
    reference_uri: str
    def __init__(self, name: _Optional[str] = ..., threshold: _Optional[float] = ..., reference_uri: _Optional[str] = ...) -> None: ...

class GateResult(_message.Message):
    __slots__ = ("name", "passed", "value", "threshold", "detail")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    name: str
    passed: bool
    value: float
    threshold: float
    detail: str
    def __init__(self, name: _Optional[str] = ..., passed: _Optional[bool] = ..., value: _Optional[float] = ..., threshold: _Optional[float] = ..., detail: _Optional[str] = ...) -> None: ...

class RatePoint(_message.Message):
    __slots__ = ("rate_rps", "request_count", "error_count", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p99_ms", "attainment")
    RATE_RPS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_COUNT_FIELD_NUMBER: _ClassVar[int]
    ERROR_COUNT_FIELD_NUMBER: _ClassVar[int]
    TTFT_P50_MS_FIELD_NUMBER: _ClassVar[int]
    TTFT_P90_MS_FIELD_NUMBER: _ClassVar[int]
    TTFT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    ITL_P99_MS_FIELD_NUMBER: _ClassVar[int]
    ATTAINMENT_FIELD_NUMBER: _ClassVar[int]
    rate_rps: float
    request_count: int
    error_count: int
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_p99_ms: float
    itl_p99_ms: float
    attainment: float
    def __init__(self, rate_rps: _Optional[float] = ..., request_count: _Optional[int] = ..., error_count: _Optional[int] = ..., ttft_p50_ms: _Optional[float] = ..., ttft_p90_ms: _Optional[float] = ..., ttft_p99_ms: _Optional[float] = ..., itl_p99_ms: _Optional[float] = ..., attainment: _Optional[float] = ...) -> None: ...

class TrialMetrics(_message.Message):
    __slots__ = ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p99_ms", "attainment", "goodput_rps", "rates")
    TTFT_P50_MS_FIELD_NUMBER: _ClassVar[int]
    TTFT_P90_MS_FIELD_NUMBER: _ClassVar[int]
    TTFT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    ITL_P99_MS_FIELD_NUMBER: _ClassVar[int]
    ATTAINMENT_FIELD_NUMBER: _ClassVar[int]
    GOODPUT_RPS_FIELD_NUMBER: _ClassVar[int]
    RATES_FIELD_NUMBER: _ClassVar[int]
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_p99_ms: float
    itl_p99_ms: float
    attainment: float
    goodput_rps: float
    rates: _containers.RepeatedCompositeFieldContainer[RatePoint]
    def __init__(self, ttft_p50_ms: _Optional[float] = ..., ttft_p90_ms: _Optional[float] = ..., ttft_p99_ms: _Optional[float] = ..., itl_p99_ms: _Optional[float] = ..., attainment: _Optional[float] = ..., goodput_rps: _Optional[float] = ..., rates: _Optional[_Iterable[_Union[RatePoint, _Mapping]]] = ...) -> None: ...

class HardwareDevice(_message.Message):
    __slots__ = ("name", "compute_capability", "memory_gib")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    name: str
    compute_capability: str
    memory_gib: float
    def __init__(self, name: _Optional[str] = ..., compute_capability: _Optional[str] = ..., memory_gib: _Optional[float] = ...) -> None: ...

class HardwareFingerprint(_message.Message):
    __slots__ = ("id", "tier", "kind", "cpu_model", "cores", "memory_gib", "isa_features", "devices", "machine", "cpu_signature")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    ISA_FEATURES_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    MACHINE_FIELD_NUMBER: _ClassVar[int]
    CPU_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    id: str
    tier: str
    kind: str
    cpu_model: str
    cores: int
    memory_gib: float
    isa_features: _containers.RepeatedScalarFieldContainer[str]
    devices: _containers.RepeatedCompositeFieldContainer[HardwareDevice]
    machine: str
    cpu_signature: str
    def __init__(self, id: _Optional[str] = ..., tier: _Optional[str] = ..., kind: _Optional[str] = ..., cpu_model: _Optional[str] = ..., cores: _Optional[int] = ..., memory_gib: _Optional[float] = ..., isa_features: _Optional[_Iterable[str]] = ..., devices: _Optional[_Iterable[_Union[HardwareDevice, _Mapping]]] = ..., machine: _Optional[str] = ..., cpu_signature: _Optional[str] = ...) -> None: ...

class TrialPhases(_message.Message):
    __slots__ = ("engine_start_s", "warmup_s", "golden_s", "replay_s", "engine_stop_s")
    ENGINE_START_S_FIELD_NUMBER: _ClassVar[int]
    WARMUP_S_FIELD_NUMBER: _ClassVar[int]
    GOLDEN_S_FIELD_NUMBER: _ClassVar[int]
    REPLAY_S_FIELD_NUMBER: _ClassVar[int]
    ENGINE_STOP_S_FIELD_NUMBER: _ClassVar[int]
    engine_start_s: float
    warmup_s: float
    golden_s: float
    replay_s: float
    engine_stop_s: float
    def __init__(self, engine_start_s: _Optional[float] = ..., warmup_s: _Optional[float] = ..., golden_s: _Optional[float] = ..., replay_s: _Optional[float] = ..., engine_stop_s: _Optional[float] = ...) -> None: ...

class TrialJob(_message.Message):
    __slots__ = ("job_id", "search_id", "trial_id", "endpoint", "hardware_class", "engine_config", "trace_uri", "trace_sha256", "profile_id", "rates_rps", "target_rate_rps", "duration_per_rate", "warmup", "repeats", "seed", "slo", "gates", "deadline", "baseline", "slo_headroom", "skip_golden", "endpoint_uid")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_CLASS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    TRACE_URI_FIELD_NUMBER: _ClassVar[int]
    TRACE_SHA256_FIELD_NUMBER: _ClassVar[int]
    PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    RATES_RPS_FIELD_NUMBER: _ClassVar[int]
    TARGET_RATE_RPS_FIELD_NUMBER: _ClassVar[int]
    DURATION_PER_RATE_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    REPEATS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    SLO_FIELD_NUMBER: _ClassVar[int]
    GATES_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    BASELINE_FIELD_NUMBER: _ClassVar[int]
    SLO_HEADROOM_FIELD_NUMBER: _ClassVar[int]
    SKIP_GOLDEN_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_UID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    search_id: str
    trial_id: str
    endpoint: str
    hardware_class: str
    engine_config: _endpoint_pb2.EngineConfig
    trace_uri: str
    trace_sha256: str
    profile_id: str
    rates_rps: _containers.RepeatedScalarFieldContainer[float]
    target_rate_rps: float
    duration_per_rate: _duration_pb2.Duration
    warmup: _duration_pb2.Duration
    repeats: int
    seed: int
    slo: _endpoint_pb2.Slo
    gates: _containers.RepeatedCompositeFieldContainer[GateSpec]
    deadline: _timestamp_pb2.Timestamp
    baseline: bool
    slo_headroom: float
    skip_golden: bool
    endpoint_uid: str
    def __init__(self, job_id: _Optional[str] = ..., search_id: _Optional[str] = ..., trial_id: _Optional[str] = ..., endpoint: _Optional[str] = ..., hardware_class: _Optional[str] = ..., engine_config: _Optional[_Union[_endpoint_pb2.EngineConfig, _Mapping]] = ..., trace_uri: _Optional[str] = ..., trace_sha256: _Optional[str] = ..., profile_id: _Optional[str] = ..., rates_rps: _Optional[_Iterable[float]] = ..., target_rate_rps: _Optional[float] = ..., duration_per_rate: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., warmup: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., repeats: _Optional[int] = ..., seed: _Optional[int] = ..., slo: _Optional[_Union[_endpoint_pb2.Slo, _Mapping]] = ..., gates: _Optional[_Iterable[_Union[GateSpec, _Mapping]]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., baseline: _Optional[bool] = ..., slo_headroom: _Optional[float] = ..., skip_golden: _Optional[bool] = ..., endpoint_uid: _Optional[str] = ...) -> None: ...
