"""Property test of every gRPC request message (issue 16): for every RPC of EndpointService and
SearchService, hypothesis builds request messages from the protobuf descriptors (`messages`, one
generic builder: each field by its type, nested messages, repeated and map fields, oneofs) and sends
them to the real running deployer and searcher (the session's NATS, chDB for the searcher), as a
tenant and as the operator. Whatever a client sends, the answer is never UNKNOWN or INTERNAL, an
error's details are one bounded line (no traceback), and the service answers a valid call after.

Reproducible: `derandomize=True` (examples derived from the test's name, the same on every run and
in CI) and no example database. `EVERTUNE_FUZZ_EXAMPLES=<n>` runs n examples per RPC instead, with
random seeds when `EVERTUNE_FUZZ_RANDOM=1`, to explore further by hand; a failure found that way
belongs in an explicit `@example` (the `KNOWN` table)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import example, given
from hypothesis import strategies as st
from nats.aio.client import Client
from pydantic import SecretStr

from evertune.infra.bus import Bucket
from evertune.infra.store import Store, migrate, open_store
from evertune.v1 import endpoint_pb2, endpoint_service_pb2, search_service_pb2
from evertune.v1 import search_service_pb2_grpc as search_grpc
from tests.deployer.conftest import TOKEN_A, TOKEN_OPERATOR, Stack, bearer, start_stack, stop_stack
from tests.deployer.helpers import create_request, spec
from tests.searcher.stack import make_searcher, running, store_profile
from tests.security.fuzz import fuzz_settings

#: Longest error details accepted: one line a person reads, not an echo of a huge field.
MAX_DETAILS = 1000
#: Codes a client's input must never produce.
SERVER_FAULTS = frozenset({grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL})
#: Examples per RPC (the caller, tenant or operator, drawn per example): the file in about 30 s.
FUZZ = fuzz_settings(examples=60)

SEARCH_OWNER = "tenant-t-token-0123456789"  # make_endpoint's endpoints belong to tenant "t"
SEARCH_OPERATOR = "operator-token-0123456789"

# --- the strategy builder: generic over descriptors ---------------------------------------------

_INT_LIMITS = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
#: Strings with control characters, line breaks, NULs, wide and combining characters.
_NASTY = st.text(st.characters(codec="utf-8", categories=("Cc", "Zs", "Zl", "Zp", "Mn", "So", "Lo")))
_HUGE = st.sampled_from((70_000, 1_000_000)).map(lambda n: "x" * n)


def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = st.sampled_from(sorted({lo, hi, lo + 1, hi - 1, 0, 1, -1 if lo < 0 else 0, hi // 2}))
    return st.one_of(edges, st.integers(lo, hi), st.integers(max(lo, -1000), min(hi, 1000)))


def _floats(width: Literal[32, 64]) -> st.SearchStrategy[float]:
    specials = st.sampled_from((0.0, -0.0, float("nan"), float("inf"), float("-inf"), -1.0, 1e308, 5e-324))
    return st.one_of(specials, st.floats(width=width), st.floats(-1e6, 1e6, width=width))


def _strings(hints: tuple[str, ...]) -> st.SearchStrategy[str]:
    parts: list[st.SearchStrategy[str]] = [
        st.just(""),
        st.text(max_size=40),
        _NASTY,
        st.from_regex(r"[a-z][a-z0-9-]{0,70}", fullmatch=True),  # near a valid name
        _HUGE,
    ]
    if hints:
        parts.insert(0, st.sampled_from(hints))
    return st.one_of(*parts)


def _scalar(field: FieldDescriptor, hints: tuple[str, ...]) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _INT_LIMITS:
        return _ints(*_INT_LIMITS[kind])
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return _floats(64)
    if kind == FieldDescriptor.TYPE_FLOAT:
        return _floats(32)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_STRING:
        return _strings(hints)
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), _HUGE.map(str.encode))
    if kind == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), _ints(-(2**31), 2**31 - 1))  # unknown numbers too
    raise AssertionError(f"no strategy for field {field.full_name} of type {kind}")


def _message_type(field: FieldDescriptor) -> Descriptor:
    assert field.message_type is not None, field.full_name
    return field.message_type


def messages(
    descriptor: Descriptor, *, hints: tuple[str, ...] = (), depth: int = 0, sparse: bool = False
) -> st.SearchStrategy[Message]:
    """Messages of `descriptor`: each field left unset or drawn by its type (nested messages to
    depth 4, repeated fields of 0-3 values, map fields, every member of a oneof); `sparse`: one or
    two fields set at each level."""
    cls = GetMessageClass(descriptor)

    def field_values(field: FieldDescriptor) -> st.SearchStrategy[Any]:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            entry = _message_type(field)
            if entry.GetOptions().map_entry:
                key = _scalar(entry.fields_by_name["key"], hints)
                value_field = entry.fields_by_name["value"]
                value = (
                    messages(_message_type(value_field), hints=hints, depth=depth + 1)
                    if value_field.type == FieldDescriptor.TYPE_MESSAGE
                    else _scalar(value_field, hints)
                )
                return st.dictionaries(key, value, max_size=3)
            if depth >= 4:
                return st.nothing()
            one = st.deferred(lambda: messages(entry, hints=hints, depth=depth + 1, sparse=sparse))
        else:
            one = _scalar(field, hints)
        if field.is_repeated:
            return st.lists(one, max_size=3)
        return one

    def build(values: dict[str, Any]) -> Message:
        message = cls()
        for name, value in values.items():
            field = descriptor.fields_by_name[name]
            target = getattr(message, name)
            if field.type == FieldDescriptor.TYPE_MESSAGE and _message_type(field).GetOptions().map_entry:
                for k, v in value.items():
                    if isinstance(v, Message):
                        target[k].CopyFrom(v)
                    else:
                        target[k] = v
            elif field.is_repeated:
                for v in value:
                    target.add().CopyFrom(v) if isinstance(v, Message) else target.append(v)
            elif isinstance(value, Message):
                target.CopyFrom(value)
            else:
                setattr(message, name, value)  # a oneof member clears the others
        return message

    if sparse:  # one or two fields per message: a small change to a valid message
        chosen = st.lists(st.sampled_from(list(descriptor.fields)), min_size=1, max_size=2, unique=True)
        return chosen.flatmap(
            lambda fields: st.fixed_dictionaries({f.name: field_values(f) for f in fields})
        ).map(build)
    optional = {f.name: field_values(f) for f in descriptor.fields}
    return st.fixed_dictionaries({}, optional=optional).map(build)


def requests(
    descriptor: Descriptor, *, hints: tuple[str, ...], valid: Message | None = None
) -> st.SearchStrategy[Message]:
    """Requests of `descriptor`: any message, or (given one) a valid request with a field or two
    (at any depth) replaced by drawn values."""
    anything = messages(descriptor, hints=hints)
    if valid is None:
        return anything

    def merged(change: Message) -> Message:
        request = type(valid)()
        request.CopyFrom(valid)
        request.MergeFrom(change)
        return request

    return st.one_of(anything, messages(descriptor, hints=hints, sparse=True).map(merged))


# --- the running services -----------------------------------------------------------------------

#: Names the fixtures create, so that strategies (built at import) can name them.
ENDPOINT = "fuzz-target"  # a tenant-a endpoint on the deployer
SEARCH_ENDPOINT = "fuzz-search-target"  # a tenant-t endpoint the searcher sees
SEARCH_ID = "search-of-the-fixture"  # stands for the fixture's search id (replaced when sent)


@dataclass
class Services:
    deployer: Stack
    search: search_grpc.SearchServiceStub
    search_id: str


async def _search_endpoint(nc: Client) -> None:
    """SEARCH_ENDPOINT in the `endpoints` KV, as tests/searcher/stack.py's `make_endpoint` writes one."""
    spec = endpoint_pb2.EndpointSpec(
        name=SEARCH_ENDPOINT,
        tenant="t",
        slo=endpoint_pb2.Slo(ttft_p99_ms=150.0),
        hardware_pool=endpoint_pb2.HardwarePool(hardware_class="sim-h200", max_replicas=1),
        initial_engine_config=endpoint_pb2.EngineConfig(engine="vllm", max_num_seqs=8),
        search_policy=endpoint_pb2.SEARCH_POLICY_AUTO,
    )
    bucket = await Bucket.open(nc.jetstream(), "endpoints")
    await bucket.mutate(
        SEARCH_ENDPOINT, lambda _: endpoint_pb2.Endpoint(spec=spec, revision=1).SerializeToString()
    )


@pytest.fixture(scope="module")
async def services(
    nc: Client,
    store_engine: Store,
    store_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    searcher_model_dir: Path,
) -> AsyncIterator[Services]:
    tmp = Path(tmp_path_factory.mktemp("fuzz-grpc"))
    database = f"fuzz_{uuid.uuid4().hex[:16]}"
    store = await open_store(store_url, database=database)
    await migrate(store)
    deployer = await start_stack(nc, tmp / "deployer")
    try:
        create = create_request(ENDPOINT)
        await deployer.stub.CreateEndpoint(create, metadata=deployer.a, timeout=30)
        await _search_endpoint(nc)
        await store_profile(store, SEARCH_ENDPOINT, searcher_model_dir)
        tokens = SecretStr(f"{SEARCH_OWNER} t, {SEARCH_OPERATOR} *")
        searcher = make_searcher(tmp / "searcher", model_dir=searcher_model_dir, tokens=tokens)
        async with (
            running(searcher, nc, store),
            grpc.aio.insecure_channel(searcher.grpc.address) as channel,
        ):
            stub = search_grpc.SearchServiceStub(channel)  # type: ignore[no-untyped-call]
            start = search_service_pb2.StartSearchRequest(
                request_id=uuid.uuid4().hex, endpoint=SEARCH_ENDPOINT
            )
            search = (await stub.StartSearch(start, metadata=bearer(SEARCH_OWNER), timeout=20)).search
            yield Services(deployer, stub, search.id)
    finally:
        await stop_stack(deployer)
        try:
            await store.command(f"DROP DATABASE IF EXISTS `{database}`")
        finally:
            await store.close()


# --- the property -------------------------------------------------------------------------------


async def _answer(
    call: Callable[..., Any], request: Message, metadata: tuple[tuple[str, str], ...], *, streaming: bool
) -> None:
    """Send `request`; any error must be a client's status with one bounded line of details."""
    try:
        if streaming:  # the first event, or the watch running into its short deadline
            await call(request, metadata=metadata, timeout=0.5).read()
        else:
            await call(request, metadata=metadata, timeout=10)
    except grpc.aio.AioRpcError as err:
        details = err.details() or ""
        what = f"{err.code().name} {details[:300]!r} for {str(request)[:300]!r}"
        assert err.code() not in SERVER_FAULTS, what
        assert "\n" not in details and "\r" not in details and "Traceback" not in details, what
        assert len(details) <= MAX_DETAILS, what


async def _ensure_endpoint(deployer: Stack) -> None:
    get = endpoint_service_pb2.GetEndpointRequest(name=ENDPOINT)
    try:
        await deployer.stub.GetEndpoint(get, metadata=deployer.op, timeout=10)
    except grpc.aio.AioRpcError as err:
        assert err.code() == grpc.StatusCode.NOT_FOUND, err
        await deployer.stub.CreateEndpoint(create_request(ENDPOINT), metadata=deployer.a, timeout=30)


def _methods(service: str) -> list[MethodDescriptor]:
    module = endpoint_service_pb2 if service == "EndpointService" else search_service_pb2
    return list(module.DESCRIPTOR.services_by_name[service].methods)


DEPLOYER_HINTS = (
    ENDPOINT,
    "dep-0123456789ab",
    "spec.slo",
    "rollout.steps",
    "m",
    "tenant-a",
    "deploy.promoted",
)
SEARCHER_HINTS = (SEARCH_ENDPOINT, SEARCH_ID, "o1", "o99999999999999999999")

#: Valid requests that fuzzed ones are small changes of (deeper into validation than random ones).
VALID: dict[str, Message] = {
    "CreateEndpoint": create_request("fuzz-created"),
    "UpdateEndpoint": endpoint_service_pb2.UpdateEndpointRequest(
        name=ENDPOINT, spec=spec(ENDPOINT, ttft_p99_ms=400.0), update_mask=FieldMask(paths=["slo"])
    ),
    "Promote": endpoint_service_pb2.PromoteRequest(
        endpoint=ENDPOINT,
        request_id="fuzz-promote",
        engine_config=endpoint_pb2.EngineConfig(engine="vllm", max_num_seqs=4),
        reason="fuzz",
    ),
    "Rollback": endpoint_service_pb2.RollbackRequest(endpoint=ENDPOINT, request_id="fuzz-rollback"),
    "WatchEvents": endpoint_service_pb2.WatchEventsRequest(endpoint=ENDPOINT, kinds=["deploy.promoted"]),
    "StartSearch": search_service_pb2.StartSearchRequest(request_id="fuzz-start", endpoint=SEARCH_ENDPOINT),
    "ListSearches": search_service_pb2.ListSearchesRequest(endpoint=SEARCH_ENDPOINT, page_size=5),
    "ListTrials": search_service_pb2.ListTrialsRequest(search_id=SEARCH_ID, page_size=5),
}

#: Minimal inputs that once answered UNKNOWN/INTERNAL or a bad line, kept as explicit examples.
KNOWN: dict[str, list[Message]] = {
    # UNKNOWN "Timestamp is not valid: Nanos -1 must be in a range [0, 999999]": now INVALID_ARGUMENT.
    "WatchEvents": [
        endpoint_service_pb2.WatchEventsRequest(since=Timestamp(nanos=-1)),
        endpoint_service_pb2.WatchEventsRequest(since=Timestamp(seconds=2**62)),
    ],
}


def _endpoint_test(method: MethodDescriptor) -> Callable[..., Any]:
    @FUZZ
    @given(
        request=requests(method.input_type, hints=DEPLOYER_HINTS, valid=VALID.get(method.name)),
        as_operator=st.booleans(),
    )
    async def test(services: Services, request: Message, as_operator: bool) -> None:
        deployer = services.deployer
        who = bearer(TOKEN_OPERATOR if as_operator else TOKEN_A)
        await _answer(getattr(deployer.stub, method.name), request, who, streaming=method.server_streaming)
        await _ensure_endpoint(deployer)  # a valid call answered (ENDPOINT back if a fuzzed call deleted it)

    for known in KNOWN.get(method.name, []):
        test = example(request=known, as_operator=False)(test)
    return test


def _search_test(method: MethodDescriptor) -> Callable[..., Any]:
    @FUZZ
    @given(
        request=requests(method.input_type, hints=SEARCHER_HINTS, valid=VALID.get(method.name)),
        as_operator=st.booleans(),
    )
    async def test(services: Services, request: Message, as_operator: bool) -> None:
        for field in request.DESCRIPTOR.fields:  # the placeholder stands for the fixture's search
            if field.type == FieldDescriptor.TYPE_STRING and not field.is_repeated:
                if getattr(request, field.name) == SEARCH_ID:
                    setattr(request, field.name, services.search_id)
        who = bearer(SEARCH_OPERATOR if as_operator else SEARCH_OWNER)
        await _answer(getattr(services.search, method.name), request, who, streaming=method.server_streaming)
        get = search_service_pb2.GetSearchRequest(search_id=services.search_id)
        found = await services.search.GetSearch(get, metadata=bearer(SEARCH_OWNER), timeout=10)
        assert found.search.id == services.search_id

    for known in KNOWN.get(method.name, []):
        test = example(request=known, as_operator=False)(test)
    return test


# One test per RPC, named after it, taken from the descriptors: a new RPC is fuzzed without an edit.
for _m in _methods("EndpointService"):
    globals()[f"test_endpoint_service_{_m.name}"] = _endpoint_test(_m)
for _m in _methods("SearchService"):
    globals()[f"test_search_service_{_m.name}"] = _search_test(_m)


def test_every_rpc_is_fuzzed() -> None:
    names = {name for name in globals() if name.startswith("test_")}
    for service, prefix in (("EndpointService", "endpoint"), ("SearchService", "search")):
        assert {f"test_{prefix}_service_{m.name}" for m in _methods(service)} <= names
