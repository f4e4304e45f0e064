import datetime

from evertune.v1 import endpoint_pb2 as _endpoint_pb2
from evertune.v1 import events_pb2 as _events_pb2
from evertune.v1 import jobs_pb2 as _jobs_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SearchState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEARCH_STATE_UNSPECIFIED: _ClassVar[SearchState]
    SEARCH_STATE_PENDING: _ClassVar[SearchState]
    SEARCH_STATE_RUNNING: _ClassVar[SearchState]
    SEARCH_STATE_DONE: _ClassVar[SearchState]
SEARCH_STATE_UNSPECIFIED: SearchState
SEARCH_STATE_PENDING: SearchState
SEARCH_STATE_RUNNING: SearchState
SEARCH_STATE_DONE: SearchState

class Search(_message.Message):
    __slots__ = ("id", "endpoint", "profile_id", "hardware_classes", "trial_budget", "state", "outcome", "trials_completed", "trials_started", "modeled_candidates", "best_engine_config", "best_trial_id", "best_metrics", "baseline_metrics", "verified", "trigger", "create_time", "update_time", "end_time", "error", "summary", "objective", "endpoint_uid")
    ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_CLASSES_FIELD_NUMBER: _ClassVar[int]
    TRIAL_BUDGET_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    TRIALS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    TRIALS_STARTED_FIELD_NUMBER: _ClassVar[int]
    MODELED_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    BEST_ENGINE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    BEST_TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    BEST_METRICS_FIELD_NUMBER: _ClassVar[int]
    BASELINE_METRICS_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_UID_FIELD_NUMBER: _ClassVar[int]
    id: str
    endpoint: str
    profile_id: str
    hardware_classes: _containers.RepeatedScalarFieldContainer[str]
    trial_budget: int
    state: SearchState
    outcome: _events_pb2.SearchOutcome
    trials_completed: int
    trials_started: int
    modeled_candidates: int
    best_engine_config: _endpoint_pb2.EngineConfig
    best_trial_id: str
    best_metrics: _jobs_pb2.TrialMetrics
    baseline_metrics: _jobs_pb2.TrialMetrics
    verified: bool
    trigger: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    error: str
    summary: str
    objective: _endpoint_pb2.SearchObjective
    endpoint_uid: str
    def __init__(self, id: _Optional[str] = ..., endpoint: _Optional[str] = ..., profile_id: _Optional[str] = ..., hardware_classes: _Optional[_Iterable[str]] = ..., trial_budget: _Optional[int] = ..., state: _Optional[_Union[SearchState, str]] = ..., outcome: _Optional[_Union[_events_pb2.SearchOutcome, str]] = ..., trials_completed: _Optional[int] = ..., trials_started: _Optional[int] = ..., modeled_candidates: _Optional[int] = ..., best_engine_config: _Optional[_Union[_endpoint_pb2.EngineConfig, _Mapping]] = ..., best_trial_id: _Optional[str] = ..., best_metrics: _Optional[_Union[_jobs_pb2.TrialMetrics, _Mapping]] = ..., baseline_metrics: _Optional[_Union[_jobs_pb2.TrialMetrics, _Mapping]] = ..., verified: _Optional[bool] = ..., trigger: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error: _Optional[str] = ..., summary: _Optional[str] = ..., objective: _Optional[_Union[_endpoint_pb2.SearchObjective, str]] = ..., endpoint_uid: _Optional[str] = ...) -> None: ...

class StartSearchRequest(_message.Message):
    __slots__ = ("request_id", "endpoint", "profile_id", "hardware_classes", "trial_budget", "objective")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    PROFILE_ID_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_CLASSES_FIELD_NUMBER: _ClassVar[int]
    TRIAL_BUDGET_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    endpoint: str
    profile_id: str
    hardware_classes: _containers.RepeatedScalarFieldContainer[str]
    trial_budget: int
    objective: _endpoint_pb2.SearchObjective
    def __init__(self, request_id: _Optional[str] = ..., endpoint: _Optional[str] = ..., profile_id: _Optional[str] = ..., hardware_classes: _Optional[_Iterable[str]] = ..., trial_budget: _Optional[int] = ..., objective: _Optional[_Union[_endpoint_pb2.SearchObjective, str]] = ...) -> None: ...

class StartSearchResponse(_message.Message):
    __slots__ = ("search",)
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    search: Search
    def __init__(self, search: _Optional[_Union[Search, _Mapping]] = ...) -> None: ...

class GetSearchRequest(_message.Message):
    __slots__ = ("search_id",)
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    search_id: str
    def __init__(self, search_id: _Optional[str] = ...) -> None: ...

class GetSearchResponse(_message.Message):
    __slots__ = ("search",)
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    search: Search
    def __init__(self, search: _Optional[_Union[Search, _Mapping]] = ...) -> None: ...

class ListSearchesRequest(_message.Message):
    __slots__ = ("endpoint", "states", "page_size", "page_token")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    states: _containers.RepeatedScalarFieldContainer[SearchState]
    page_size: int
    page_token: str
    def __init__(self, endpoint: _Optional[str] = ..., states: _Optional[_Iterable[_Union[SearchState, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSearchesResponse(_message.Message):
    __slots__ = ("searches", "next_page_token")
    SEARCHES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    searches: _containers.RepeatedCompositeFieldContainer[Search]
    next_page_token: str
    def __init__(self, searches: _Optional[_Iterable[_Union[Search, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelSearchRequest(_message.Message):
    __slots__ = ("search_id", "reason")
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    search_id: str
    reason: str
    def __init__(self, search_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelSearchResponse(_message.Message):
    __slots__ = ("search",)
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    search: Search
    def __init__(self, search: _Optional[_Union[Search, _Mapping]] = ...) -> None: ...

class WatchSearchRequest(_message.Message):
    __slots__ = ("search_id", "replay")
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    search_id: str
    replay: bool
    def __init__(self, search_id: _Optional[str] = ..., replay: _Optional[bool] = ...) -> None: ...

class Trial(_message.Message):
    __slots__ = ("result", "start_time", "end_time", "deliveries", "log_tail", "config_key")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    LOG_TAIL_FIELD_NUMBER: _ClassVar[int]
    CONFIG_KEY_FIELD_NUMBER: _ClassVar[int]
    result: _events_pb2.TrialCompleted
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    deliveries: int
    log_tail: str
    config_key: str
    def __init__(self, result: _Optional[_Union[_events_pb2.TrialCompleted, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deliveries: _Optional[int] = ..., log_tail: _Optional[str] = ..., config_key: _Optional[str] = ...) -> None: ...

class ListTrialsRequest(_message.Message):
    __slots__ = ("search_id", "page_size", "page_token")
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    search_id: str
    page_size: int
    page_token: str
    def __init__(self, search_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTrialsResponse(_message.Message):
    __slots__ = ("trials", "next_page_token")
    TRIALS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    trials: _containers.RepeatedCompositeFieldContainer[Trial]
    next_page_token: str
    def __init__(self, trials: _Optional[_Iterable[_Union[Trial, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
