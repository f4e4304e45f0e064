"""A tenant serves models from its own folders only (hole 4 of the security issue): with model roots
set, a model path outside the tenant's folders (another tenant's, a `..` or a symbolic link out) or
a hub id is refused, at CreateEndpoint and at Promote, before any engine starts."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import grpc
import pytest
from nats.aio.client import Client

from evertune.deployer.model_roots import ModelRoots
from evertune.errors import InvalidArgument, SettingsError
from evertune.v1 import endpoint_pb2
from evertune.v1 import endpoint_service_pb2 as pb
from tests.deployer.conftest import deployer_settings, start_stack, stop_stack
from tests.deployer.helpers import create_request


def _folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    a, b, shared = tmp_path / "models-a", tmp_path / "models-b", tmp_path / "shared"
    for folder in (a / "voice", b / "secret", shared / "base"):
        folder.mkdir(parents=True)
    (a / "escape").symlink_to(b / "secret")  # a link out of a's folder
    return a, b, shared


def test_models_must_lie_in_the_tenants_folders(tmp_path: Path) -> None:
    a, b, shared = _folders(tmp_path)
    roots = ModelRoots.parse(json.dumps({"tenant-a": [str(a)], "*": [str(shared)]}))
    assert roots is not None
    assert roots.refusal(str(a / "voice"), tenant="tenant-a") == ""
    assert roots.refusal(str(shared / "base"), tenant="tenant-a") == ""
    for model in (str(b / "secret"), f"{a}/../models-b/secret", str(a / "escape")):
        assert "outside the folders tenant 'tenant-a'" in roots.refusal(model, tenant="tenant-a"), model
    assert "outside" in roots.refusal(str(a / "voice"), tenant="tenant-b")
    assert "hub models are off" in roots.refusal("org/some-model", tenant="tenant-a")
    hub = ModelRoots.parse(json.dumps({"*": [str(shared)]}), allow_hub=True)
    assert hub is not None and hub.refusal("org/some-model", tenant="x") == ""
    assert ModelRoots.parse("") is None
    for bad in ("[1]", "{}", '{"t": "/x"}', '{"t": ["relative"]}', "not json"):
        with pytest.raises(InvalidArgument):
            ModelRoots.parse(bad)


def test_a_bad_setting_is_one_line(tmp_path: Path) -> None:
    from evertune.deployer import DeployerService

    with pytest.raises(SettingsError, match="EVERTUNE_DEPLOYER_MODEL_ROOTS: "):
        DeployerService(deployer_settings(tmp_path, model_roots='{"t": "/x"}'))


async def test_the_deployer_refuses_another_tenants_model(nc: Client, tmp_path: Path) -> None:
    a, b, _ = _folders(tmp_path)
    roots = json.dumps({"tenant-a": [str(a)], "tenant-b": [str(b)]})
    stack = await start_stack(nc, tmp_path, model_roots=roots)
    try:
        name = f"roots-{uuid.uuid4().hex[:8]}"
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stack.stub.CreateEndpoint(create_request(name, model=str(b / "secret")), metadata=stack.a)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (info.value.details() or "").startswith("spec.model: ")
        created = await stack.stub.CreateEndpoint(
            create_request(name, model=str(a / "voice")), metadata=stack.a
        )
        assert created.endpoint.spec.model == str(a / "voice")
        promote = pb.PromoteRequest(
            endpoint=name,
            request_id=uuid.uuid4().hex,
            engine_config=endpoint_pb2.EngineConfig(model=str(a / "escape"), max_num_seqs=4),
            skip_canary=True,
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stack.stub.Promote(promote, metadata=stack.a)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (info.value.details() or "").startswith("engine_config.model: ")
    finally:
        await stop_stack(stack)
