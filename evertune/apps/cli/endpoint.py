"""`evertune endpoints|deployments|deploy ...`: a gRPC client of the deployer's EndpointService.

Where the deployer is: `--address`, else `EVERTUNE_DEPLOYER_ADDRESS`, else the address the
`evertune up` on the data dir wrote to its runtime file, else 127.0.0.1:50051. The bearer token:
`--token`, else `EVERTUNE_TOKEN` (none: no credentials, for a deployer with auth off). `--tls-ca
FILE` (else `EVERTUNE_TLS_CA_FILE`) speaks TLS, trusting that CA (or self-signed certificate);
`--tls-cert`/`--tls-key` (else `EVERTUNE_TLS_CERT_FILE`/`_KEY_FILE`) present a client certificate
to a deployer with mutual TLS (`common.grpc_connection`, on `evertune.client.EndpointClient`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from rich.console import Group, RenderableType
from rich.table import Table

from evertune.apps.cli.common import OBJECTIVES, Commands, add_tls_flags, grpc_address, grpc_connection
from evertune.apps.cli.console import out_console, table
from evertune.client import EndpointClient
from evertune.errors import InvalidArgument
from evertune.v1 import endpoint_pb2
from evertune.v1 import endpoint_service_pb2 as pb

DEFAULT_ADDRESS = "127.0.0.1:50051"
_POLICIES = {
    "auto": endpoint_pb2.SEARCH_POLICY_AUTO,
    "advisory": endpoint_pb2.SEARCH_POLICY_ADVISORY,
    "off": endpoint_pb2.SEARCH_POLICY_OFF,
}


def _rollout_flags(parser: argparse.ArgumentParser, *, new: str) -> None:
    parser.add_argument(
        "--canary-steps",
        default=None,
        metavar="P,P,...",
        help=f"{new}canary weights in percent, e.g. 10,50,100 ('default': the deployer's)",
    )
    parser.add_argument(
        "--canary-step-s", type=float, default=None, help=f"{new}seconds per canary step (0: the deployer's)"
    )
    parser.add_argument(
        "--canary-failure-limit",
        type=int,
        default=None,
        help=f"{new}failed analyses that roll back (1: the first; 0: the deployer's)",
    )


def add_commands(commands: Commands) -> None:
    """Register `endpoints`, `deployments` and `deploy` on the top-level subparsers."""

    def common(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--address", default=None, help="deployer host:port")
        parser.add_argument("--token", default=None, help="bearer token (default $EVERTUNE_TOKEN)")
        add_tls_flags(parser)
        parser.add_argument("--data-dir", type=Path, default=None, help="data dir of a local `evertune up`")
        parser.add_argument("--json", action="store_true", help="print JSON")

    endpoints = commands.add_parser("endpoints", help="create, list, get, update, delete endpoints (gRPC)")
    endpoints.set_defaults(func=run)
    sub = endpoints.add_subparsers(dest="endpoints_command", required=True, metavar="COMMAND")
    create = sub.add_parser("create", help="create an endpoint and its first deployment")
    create.add_argument("name")
    create.add_argument("--model", required=True, help="model served (local path or hub id)")
    create.add_argument("--ttft-p99-ms", type=float, required=True, help="p99 TTFT target, ms")
    create.add_argument("--itl-p99-ms", type=float, default=0.0, help="p99 inter-token target, ms")
    create.add_argument("--tenant", default="", help="tenant (default: the token's)")
    create.add_argument("--hardware", default="cpu", help="hardware class (default cpu)")
    create.add_argument("--engine", default="vllm", help="engine kind: vllm or sim")
    create.add_argument("--knob", action="append", default=[], metavar="K=V", help="engine knob, repeatable")
    create.add_argument("--policy", choices=sorted(_POLICIES), default="auto", help="search policy")
    create.add_argument("--request-id", default=None, help="idempotency key (default: a new uuid)")
    _rollout_flags(create, new="")
    common(create)
    listing = sub.add_parser("list", help="list endpoints")
    listing.add_argument("--tenant", default="", help="only this tenant's")
    common(listing)
    get = sub.add_parser("get", help="show one endpoint")
    get.add_argument("name")
    common(get)
    update = sub.add_parser(
        "update", help="change an endpoint's SLO, search policy, alert routes or rollout policy"
    )
    update.add_argument("name")
    update.add_argument("--ttft-p50-ms", type=float, default=None, help="new p50 TTFT target, ms")
    update.add_argument("--ttft-p99-ms", type=float, default=None, help="new p99 TTFT target, ms")
    update.add_argument("--itl-p99-ms", type=float, default=None, help="new p99 inter-token target, ms")
    update.add_argument("--attainment-target", type=float, default=None, help="new SLO attainment target")
    update.add_argument("--policy", choices=sorted(_POLICIES), default=None, help="new search policy")
    update.add_argument("--objective", choices=sorted(OBJECTIVES), default=None, help="new search objective")
    update.add_argument("--max-replicas", type=int, default=None, help="new replica cap of the pool")
    update.add_argument(
        "--webhook",
        action="append",
        default=None,
        metavar="NAME=URL",
        help="alert route to a webhook, repeatable; replaces every alert route",
    )
    update.add_argument("--no-alert-routes", action="store_true", help="remove every alert route")
    _rollout_flags(update, new="new ")
    update.add_argument(
        "--expected-revision", type=int, default=0, help="refuse unless the endpoint is at this revision"
    )
    common(update)
    delete = sub.add_parser("delete", help="drain and delete an endpoint")
    delete.add_argument("name")
    common(delete)

    deployments = commands.add_parser("deployments", help="an endpoint's deployments (gRPC)")
    deployments.set_defaults(func=run)
    dsub = deployments.add_subparsers(dest="deployments_command", required=True, metavar="COMMAND")
    dlist = dsub.add_parser("list", help="list an endpoint's deployments, newest first")
    dlist.add_argument("endpoint")
    dlist.add_argument("--all", action="store_true", help="include stopped ones")
    common(dlist)

    deploy = commands.add_parser("deploy", help="promote a configuration or roll back (gRPC)")
    deploy.set_defaults(func=run)
    psub = deploy.add_subparsers(dest="deploy_command", required=True, metavar="COMMAND")
    promote = psub.add_parser("promote", help="roll out an engine configuration or a trial's")
    promote.add_argument("endpoint")
    promote.add_argument("--knob", action="append", default=[], metavar="K=V", help="engine knob, repeatable")
    promote.add_argument("--engine", default="", help="engine kind (default: vllm)")
    promote.add_argument("--trial", default="", help="promote this trial's configuration instead")
    promote.add_argument("--reason", default="", help="one line for the record")
    promote.add_argument("--request-id", default=None, help="idempotency key (default: a new uuid)")
    common(promote)
    rollback = psub.add_parser("rollback", help="send traffic back to the previous deployment")
    rollback.add_argument("endpoint")
    rollback.add_argument("--to", default="", help="deployment id to restore (default: the previous)")
    rollback.add_argument("--reason", default="", help="one line for the record")
    rollback.add_argument("--request-id", default=None, help="idempotency key (default: a new uuid)")
    common(rollback)


def engine_config(knobs: list[str], *, engine: str) -> endpoint_pb2.EngineConfig:
    """An EngineConfig from `K=V` knobs (values: true/false, numbers, or text)."""
    fields: dict[str, Any] = {"engine": engine} if engine else {}
    for knob in knobs:
        key, sep, raw = knob.partition("=")
        if not sep or not key:
            raise InvalidArgument(f"--knob {knob!r}: expected K=V, e.g. max_num_seqs=64")
        value: Any = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        else:
            for convert in (int, float):
                try:
                    value = convert(raw)
                    break
                except ValueError:
                    continue
        fields[key] = value
    try:
        return ParseDict(fields, endpoint_pb2.EngineConfig())
    except ParseError as err:
        raise InvalidArgument(f"--knob: {err}") from None


def canary_steps(text: str) -> list[int]:
    """`--canary-steps` percents ("10,50,100") as basis points ([1000, 5000, 10000]); "default" is
    the empty list (the deployer's steps). The deployer checks the plan itself."""
    if text.strip().lower() == "default":
        return []
    try:
        return [round(float(part) * 100) for part in text.split(",")]
    except ValueError:
        raise InvalidArgument(
            f"--canary-steps {text!r}: expected percents separated by commas, e.g. 10,50,100"
        ) from None


def rollout_policy(args: argparse.Namespace) -> tuple[endpoint_pb2.RolloutPolicy, list[str]]:
    """The RolloutPolicy the `--canary-*` flags give, and the update_mask paths they set."""
    policy = endpoint_pb2.RolloutPolicy()
    paths: list[str] = []
    if args.canary_steps is not None:
        policy.steps.extend(canary_steps(args.canary_steps))
        paths.append("rollout.steps")
    if args.canary_step_s is not None:
        policy.step_duration_s = args.canary_step_s
        paths.append("rollout.step_duration_s")
    if args.canary_failure_limit is not None:
        if args.canary_failure_limit < 0:
            raise InvalidArgument("--canary-failure-limit: must be >= 0 (0 = the deployer's default)")
        policy.failure_limit = args.canary_failure_limit
        paths.append("rollout.failure_limit")
    return policy, paths


def update_request(args: argparse.Namespace) -> pb.UpdateEndpointRequest:
    """An UpdateEndpointRequest naming in its mask exactly the fields the flags set."""
    request = pb.UpdateEndpointRequest(name=args.name, expected_revision=args.expected_revision)
    spec = request.spec
    paths: list[str] = []
    for flag, path in (
        ("ttft_p50_ms", "slo.ttft_p50_ms"),
        ("ttft_p99_ms", "slo.ttft_p99_ms"),
        ("itl_p99_ms", "slo.itl_p99_ms"),
        ("attainment_target", "slo.attainment_target"),
    ):
        value = getattr(args, flag)
        if value is not None:
            setattr(spec.slo, flag, value)
            paths.append(path)
    if args.policy is not None:
        spec.search_policy = _POLICIES[args.policy]
        paths.append("search_policy")
    if args.objective is not None:
        spec.objective = OBJECTIVES[args.objective]
        paths.append("objective")
    if args.max_replicas is not None:
        spec.hardware_pool.max_replicas = args.max_replicas
        paths.append("hardware_pool.max_replicas")
    if args.webhook and args.no_alert_routes:
        raise InvalidArgument("--webhook and --no-alert-routes: give one or the other")
    for route in args.webhook or ():
        key, sep, url = route.partition("=")
        if not sep or not key or not url:
            raise InvalidArgument(
                f"--webhook {route!r}: expected NAME=URL, e.g. pager=http://127.0.0.1:9000/hook"
            )
        spec.alert_routes.add(name=key, kind=endpoint_pb2.ALERT_ROUTE_KIND_WEBHOOK, url=url)
    if args.webhook or args.no_alert_routes:
        paths.append("alert_routes")
    rollout, rollout_paths = rollout_policy(args)
    spec.rollout.CopyFrom(rollout)
    paths.extend(rollout_paths)
    if not paths:
        raise InvalidArgument("endpoints update: nothing to change; give at least one of its options")
    request.update_mask.paths.extend(paths)
    return request


def _address(args: argparse.Namespace) -> str:
    return grpc_address(
        service="deployer", given=args.address, data_dir=args.data_dir, default=DEFAULT_ADDRESS
    )


def _name(enum: Any, value: int, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix)


def endpoint_row(endpoint: endpoint_pb2.Endpoint) -> tuple[str, ...]:
    """(name, tenant, state, revision, stable deployment, p99 TTFT target, model) of an endpoint."""
    spec = endpoint.spec
    return (
        spec.name,
        spec.tenant,
        _name(endpoint_pb2.EndpointState, endpoint.state, "ENDPOINT_STATE_"),
        str(endpoint.revision),
        endpoint.stable_deployment_id or "-",
        f"{spec.slo.ttft_p99_ms:g}",
        spec.model,
    )


def endpoint_table(endpoints: Sequence[endpoint_pb2.Endpoint]) -> Table:
    """Endpoints, one row each."""
    grid = table("NAME", "TENANT", "STATE", "REV", "STABLE", "TTFT_P99_MS", "MODEL", right=(3, 5))
    for endpoint in endpoints:
        grid.add_row(*endpoint_row(endpoint))
    return grid


def rollout_line(policy: endpoint_pb2.RolloutPolicy) -> str:
    """One line about an endpoint's rollout policy; "deployer default" for what it leaves unset."""
    default = "deployer default"
    steps = ",".join(f"{w / 100:g}%" for w in policy.steps) if policy.steps else default
    parts = [
        f"steps {steps}",
        f"step {policy.step_duration_s:g} s" if policy.step_duration_s else f"step {default}",
        f"failure limit {policy.failure_limit}" if policy.failure_limit else f"failure limit {default}",
    ]
    canary = MessageToDict(policy, preserving_proto_field_name=True)
    for key in ("steps", "step_duration_s", "failure_limit"):
        canary.pop(key, None)
    parts.append(
        "canary " + " ".join(f"{k}={v}" for k, v in sorted(canary.items())) if canary else f"canary {default}"
    )
    return "rollout: " + "; ".join(parts)


def _detail(endpoints: Sequence[endpoint_pb2.Endpoint]) -> Group:
    return Group(endpoint_table(endpoints), *(rollout_line(e.spec.rollout) for e in endpoints))


def deployment_row(deployment: endpoint_pb2.Deployment) -> tuple[str, ...]:
    """(id, state, weight, origin, knobs as JSON, state message) of a deployment."""
    knobs = MessageToDict(deployment.engine_config, preserving_proto_field_name=True)
    knobs.pop("model", None)
    return (
        deployment.id,
        _name(endpoint_pb2.DeploymentState, deployment.state, "DEPLOYMENT_STATE_"),
        str(deployment.weight),
        _name(endpoint_pb2.DeploymentOrigin, deployment.origin, "DEPLOYMENT_ORIGIN_"),
        json.dumps(knobs, sort_keys=True),
        deployment.state_message,
    )


def deployment_table(deployments: Sequence[endpoint_pb2.Deployment]) -> Table:
    """Deployments, one row each (weight in basis points)."""
    grid = table("ID", "STATE", "WEIGHT", "ORIGIN", "ENGINE CONFIG", "MESSAGE", right=(2,))
    for deployment in deployments:
        grid.add_row(*deployment_row(deployment))
    return grid


def run(args: argparse.Namespace) -> int:
    """Run one of the commands; prints the result, raises RpcError when the deployer refuses."""
    out = out_console()

    def show(messages: Sequence[Any], render: Callable[[Any], RenderableType]) -> None:
        """One JSON object a message with --json, else their table."""
        if args.json:
            for message in messages:
                print(json.dumps(MessageToDict(message)))
        elif messages:
            out.print(render(messages))

    async def call(client: EndpointClient) -> None:
        if args.command == "endpoints":
            await _endpoints(client, args, show)
        elif args.command == "deployments":
            show(await client.deployments(args.endpoint, include_stopped=args.all), deployment_table)
        elif args.deploy_command == "promote":
            deployment = await client.promote(
                args.endpoint,
                trial_id=args.trial or "",
                engine_config=None if args.trial else engine_config(args.knob, engine=args.engine),
                reason=args.reason,
                request_id=args.request_id or "",
            )
            show([deployment], deployment_table)
        else:
            deployment = await client.rollback(
                args.endpoint, to_deployment_id=args.to, reason=args.reason, request_id=args.request_id or ""
            )
            show([deployment], deployment_table)

    async def main() -> None:
        async with EndpointClient(grpc_connection(args, _address(args))) as client:
            await call(client)

    asyncio.run(main())
    return 0


async def _endpoints(
    client: EndpointClient,
    args: argparse.Namespace,
    show: Callable[[Sequence[Any], Callable[[Any], RenderableType]], None],
) -> None:
    command = args.endpoints_command
    if command == "create":
        spec = endpoint_pb2.EndpointSpec(
            name=args.name,
            tenant=args.tenant,
            model=args.model,
            slo=endpoint_pb2.Slo(ttft_p99_ms=args.ttft_p99_ms, itl_p99_ms=args.itl_p99_ms),
            hardware_pool=endpoint_pb2.HardwarePool(hardware_class=args.hardware),
            initial_engine_config=engine_config(args.knob, engine=args.engine),
            search_policy=_POLICIES[args.policy],
        )
        rollout, paths = rollout_policy(args)
        if paths:
            spec.rollout.CopyFrom(rollout)
        show([await client.create(spec, request_id=args.request_id or "")], endpoint_table)
    elif command == "list":
        show(await client.list(tenant=args.tenant), endpoint_table)
    elif command == "get":
        show([await client.get(args.name)], _detail)
    elif command == "update":
        show([await client.update(update_request(args))], endpoint_table)
    else:
        show([await client.delete(args.name)], endpoint_table)
