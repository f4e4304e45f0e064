import datetime

from evertune.v1 import common_pb2 as _common_pb2
from evertune.v1 import endpoint_pb2 as _endpoint_pb2
from evertune.v1 import events_pb2 as _events_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateEndpointRequest(_message.Message):
    __slots__ = ("request_id", "spec")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    spec: _endpoint_pb2.EndpointSpec
    def __init__(self, request_id: _Optional[str] = ..., spec: _Optional[_Union[_endpoint_pb2.EndpointSpec, _Mapping]] = ...) -> None: ...

class CreateEndpointResponse(_message.Message):
    __slots__ = ("endpoint", "deployment")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    endpoint: _endpoint_pb2.Endpoint
    deployment: _endpoint_pb2.Deployment
    def __init__(self, endpoint: _Optional[_Union[_endpoint_pb2.Endpoint, _Mapping]] = ..., deployment: _Optional[_Union[_endpoint_pb2.Deployment, _Mapping]] = ...) -> None: ...

class GetEndpointRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetEndpointResponse(_message.Message):
    __slots__ = ("endpoint",)
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    endpoint: _endpoint_pb2.Endpoint
    def __init__(self, endpoint: _Optional[_Union[_endpoint_pb2.Endpoint, _Mapping]] = ...) -> None: ...

class ListEndpointsRequest(_message.Message):
    __slots__ = ("tenant", "page_size", "page_token")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    page_size: int
    page_token: str
    def __init__(self, tenant: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEndpointsResponse(_message.Message):
    __slots__ = ("endpoints", "next_page_token")
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    endpoints: _containers.RepeatedCompositeFieldContainer[_endpoint_pb2.Endpoint]
    next_page_token: str
    def __init__(self, endpoints: _Optional[_Iterable[_Union[_endpoint_pb2.Endpoint, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateEndpointRequest(_message.Message):
    __slots__ = ("name", "spec", "update_mask", "expected_revision")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec: _endpoint_pb2.EndpointSpec
    update_mask: _field_mask_pb2.FieldMask
    expected_revision: int
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[_Union[_endpoint_pb2.EndpointSpec, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., expected_revision: _Optional[int] = ...) -> None: ...

class UpdateEndpointResponse(_message.Message):
    __slots__ = ("endpoint",)
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    endpoint: _endpoint_pb2.Endpoint
    def __init__(self, endpoint: _Optional[_Union[_endpoint_pb2.Endpoint, _Mapping]] = ...) -> None: ...

class DeleteEndpointRequest(_message.Message):
    __slots__ = ("name", "expected_revision")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    name: str
    expected_revision: int
    def __init__(self, name: _Optional[str] = ..., expected_revision: _Optional[int] = ...) -> None: ...

class DeleteEndpointResponse(_message.Message):
    __slots__ = ("endpoint",)
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    endpoint: _endpoint_pb2.Endpoint
    def __init__(self, endpoint: _Optional[_Union[_endpoint_pb2.Endpoint, _Mapping]] = ...) -> None: ...

class ListDeploymentsRequest(_message.Message):
    __slots__ = ("endpoint", "include_stopped", "page_size", "page_token")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STOPPED_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    include_stopped: bool
    page_size: int
    page_token: str
    def __init__(self, endpoint: _Optional[str] = ..., include_stopped: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDeploymentsResponse(_message.Message):
    __slots__ = ("deployments", "next_page_token")
    DEPLOYMENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    deployments: _containers.RepeatedCompositeFieldContainer[_endpoint_pb2.Deployment]
    next_page_token: str
    def __init__(self, deployments: _Optional[_Iterable[_Union[_endpoint_pb2.Deployment, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PromoteRequest(_message.Message):
    __slots__ = ("endpoint", "request_id", "engine_config", "trial_id", "skip_canary", "reason")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    TRIAL_ID_FIELD_NUMBER: _ClassVar[int]
    SKIP_CANARY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    request_id: str
    engine_config: _endpoint_pb2.EngineConfig
    trial_id: str
    skip_canary: bool
    reason: str
    def __init__(self, endpoint: _Optional[str] = ..., request_id: _Optional[str] = ..., engine_config: _Optional[_Union[_endpoint_pb2.EngineConfig, _Mapping]] = ..., trial_id: _Optional[str] = ..., skip_canary: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class PromoteResponse(_message.Message):
    __slots__ = ("deployment",)
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    deployment: _endpoint_pb2.Deployment
    def __init__(self, deployment: _Optional[_Union[_endpoint_pb2.Deployment, _Mapping]] = ...) -> None: ...

class RollbackRequest(_message.Message):
    __slots__ = ("endpoint", "request_id", "to_deployment_id", "reason")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TO_DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    request_id: str
    to_deployment_id: str
    reason: str
    def __init__(self, endpoint: _Optional[str] = ..., request_id: _Optional[str] = ..., to_deployment_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RollbackResponse(_message.Message):
    __slots__ = ("deployment",)
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    deployment: _endpoint_pb2.Deployment
    def __init__(self, deployment: _Optional[_Union[_endpoint_pb2.Deployment, _Mapping]] = ...) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ("endpoint", "kinds", "min_severity", "since")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    MIN_SEVERITY_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    kinds: _containers.RepeatedScalarFieldContainer[str]
    min_severity: _common_pb2.Severity
    since: _timestamp_pb2.Timestamp
    def __init__(self, endpoint: _Optional[str] = ..., kinds: _Optional[_Iterable[str]] = ..., min_severity: _Optional[_Union[_common_pb2.Severity, str]] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
