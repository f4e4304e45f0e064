from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Api(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    API_UNSPECIFIED: _ClassVar[Api]
    API_CHAT: _ClassVar[Api]
    API_COMPLETIONS: _ClassVar[Api]
API_UNSPECIFIED: Api
API_CHAT: Api
API_COMPLETIONS: Api

class RequestRecord(_message.Message):
    __slots__ = ("request_id", "endpoint", "deployment", "start_time_unix_ns", "api", "model", "stream", "status_code", "error_class", "ttft_ms", "e2e_ms", "itl_ms", "prompt_tokens", "cached_tokens", "completion_tokens", "prefix_hashes", "client_disconnected", "upstream_ttft_ms", "prefix_block_tokens", "endpoint_uid")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    START_TIME_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    API_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    E2E_MS_FIELD_NUMBER: _ClassVar[int]
    ITL_MS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HASHES_FIELD_NUMBER: _ClassVar[int]
    CLIENT_DISCONNECTED_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_BLOCK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_UID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    endpoint: str
    deployment: str
    start_time_unix_ns: int
    api: Api
    model: str
    stream: bool
    status_code: int
    error_class: str
    ttft_ms: float
    e2e_ms: float
    itl_ms: _containers.RepeatedScalarFieldContainer[float]
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    prefix_hashes: _containers.RepeatedScalarFieldContainer[int]
    client_disconnected: bool
    upstream_ttft_ms: float
    prefix_block_tokens: int
    endpoint_uid: str
    def __init__(self, request_id: _Optional[str] = ..., endpoint: _Optional[str] = ..., deployment: _Optional[str] = ..., start_time_unix_ns: _Optional[int] = ..., api: _Optional[_Union[Api, str]] = ..., model: _Optional[str] = ..., stream: _Optional[bool] = ..., status_code: _Optional[int] = ..., error_class: _Optional[str] = ..., ttft_ms: _Optional[float] = ..., e2e_ms: _Optional[float] = ..., itl_ms: _Optional[_Iterable[float]] = ..., prompt_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., prefix_hashes: _Optional[_Iterable[int]] = ..., client_disconnected: _Optional[bool] = ..., upstream_ttft_ms: _Optional[float] = ..., prefix_block_tokens: _Optional[int] = ..., endpoint_uid: _Optional[str] = ...) -> None: ...

class RequestRecordBatch(_message.Message):
    __slots__ = ("records", "batch_id", "source")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[RequestRecord]
    batch_id: str
    source: str
    def __init__(self, records: _Optional[_Iterable[_Union[RequestRecord, _Mapping]]] = ..., batch_id: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...
