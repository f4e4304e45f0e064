"""Done-when of the deploy issue: an endpoint created from a gRPC client generated from the .proto
files alone serves a streaming request through the gateway.

Python stubs are generated here with grpc_tools.protoc from proto/evertune/v1/*.proto into a
temporary folder. The client runs in an isolated interpreter (`-I -S`) whose path is that folder
and the folders grpcio, protobuf and the openai SDK come from, so no module of evertune's own is
importable (the client checks that `evertune.v1` resolves to the generated folder). Against a
gateway, profiler sink and deployer hosted in this process (the reliability tests' loop, sim
engine), it creates an endpoint with a bearer token, waits until it is READY, and streams one chat
completion through the gateway with the openai SDK; the test then finds that request's telemetry row
(by the id the gateway answered in `x-request-id`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from importlib import resources
from pathlib import Path

import grpc
import openai
import pytest
from google import protobuf
from pydantic import SecretStr

from evertune.domain.model import ensure_model
from tests import checkout
from tests.reliability.helpers import wait_rows
from tests.reliability.loop import running_loop

REPO = checkout.ROOT
TOKEN = "proto-client-token-0123456789"

CLIENT = r"""
import sys
sys.path[:0] = sys.argv[1].split(":")
import json, time, uuid
out = sys.argv[2]
address, gateway, name, model, token = sys.argv[3:8]
import grpc
from evertune.v1 import endpoint_pb2, endpoint_service_pb2 as pb, endpoint_service_pb2_grpc
import evertune.v1
assert all(p.startswith(out) for p in evertune.v1.__path__), list(evertune.v1.__path__)
assert not any(m == "evertune.errors" or m.startswith("evertune.infra.bus") for m in sys.modules)
meta = (("authorization", "Bearer " + token),)
channel = grpc.insecure_channel(address)
stub = endpoint_service_pb2_grpc.EndpointServiceStub(channel)
spec = endpoint_pb2.EndpointSpec(
    name=name, model=model, slo=endpoint_pb2.Slo(ttft_p99_ms=1000.0),
    hardware_pool=endpoint_pb2.HardwarePool(hardware_class="sim-cpu"),
    initial_engine_config=endpoint_pb2.EngineConfig(engine="sim", max_num_seqs=16),
    search_policy=endpoint_pb2.SEARCH_POLICY_OFF,
)
created = stub.CreateEndpoint(
    pb.CreateEndpointRequest(request_id=uuid.uuid4().hex, spec=spec), metadata=meta, timeout=10
).endpoint
deadline = time.monotonic() + 30
while True:
    got = stub.GetEndpoint(pb.GetEndpointRequest(name=name), metadata=meta, timeout=10).endpoint
    if got.state == endpoint_pb2.ENDPOINT_STATE_READY:
        break
    assert got.state != endpoint_pb2.ENDPOINT_STATE_FAILED, got.state_message
    assert time.monotonic() < deadline, "endpoint not READY within 30 s"
    time.sleep(0.2)
import openai
client = openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=0)
raw = client.chat.completions.with_raw_response.create(
    model=name, stream=True, max_tokens=8, messages=[{"role": "user", "content": "Hello there."}]
)
stream = raw.parse()
text, finish = "", None
for chunk in stream:
    for choice in chunk.choices:
        text += choice.delta.content or ""
        finish = choice.finish_reason or finish
print(json.dumps({
    "tenant": created.spec.tenant, "stable": got.stable_deployment_id,
    "chars": len(text), "finish": finish, "request_id": raw.headers.get("x-request-id"),
}))
"""


async def _protoc(out: Path) -> None:
    """Python and gRPC stubs of every evertune proto into `out`, from the .proto files alone."""
    protos = sorted(str(p.relative_to(REPO / "proto")) for p in (REPO / "proto/evertune/v1").glob("*.proto"))
    well_known = resources.files("grpc_tools") / "_proto"
    argv = [
        sys.executable, "-m", "grpc_tools.protoc", f"-I{REPO / 'proto'}", f"-I{well_known}",
        f"--python_out={out}", f"--grpc_python_out={out}", *protos,
    ]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(*argv, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()


def _library_dirs() -> list[str]:
    """The folders grpcio, protobuf and the openai SDK (and what it needs) are installed in."""
    dirs = {str(Path(m.__file__).resolve().parents[1]) for m in (grpc, openai)}  # type: ignore[arg-type]
    dirs.add(str(Path(protobuf.__file__).resolve().parents[2]))
    return sorted(dirs)


@pytest.mark.timeout(90)
async def test_generated_client_creates_an_endpoint_that_streams(store_url: str, tmp_path: Path) -> None:
    out = tmp_path / "generated"
    out.mkdir()
    await _protoc(out)
    assert (out / "evertune/v1/endpoint_service_pb2_grpc.py").exists()
    model_dir = await asyncio.to_thread(ensure_model, tmp_path / "model")
    name = f"proto-{uuid.uuid4().hex[:6]}"
    async with running_loop(
        tmp_path, store_url=store_url, model_dir=model_dir, tokens=SecretStr(f"{TOKEN} tenant-p")
    ) as loop:
        script = tmp_path / "client.py"
        script.write_text(CLIENT)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", str(script), ":".join([str(out), *_library_dirs()]), str(out),
            loop.stack.deployer.server.address, loop.stack.gateway_url, name, str(model_dir), TOKEN,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=tmp_path,
        )  # fmt: skip
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, stderr.decode()[-3000:]
        seen = json.loads(stdout.decode().strip().splitlines()[-1])
        assert seen["tenant"] == "tenant-p" and seen["stable"].startswith("dep-")
        assert seen["chars"] > 0 and seen["finish"] in ("length", "stop")
        rows = await wait_rows(loop.store, name, 1, timeout_s=20)
        assert rows == {seen["request_id"]: 1}  # the gateway's id of the streamed request
