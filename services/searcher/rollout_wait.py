"""Waiting for the rollout of a search's winner (the `deployments` KV bucket, watched).

A search queued behind one that found a winner starts only once that winner's rollout has ended
(`SearchSupervisor._start_queued`): `wait_for_rollout` follows the endpoint's deployments until the
one the winner made (`Deployment.origin_search_id`) leaves pending, starting and canary.
"""

from __future__ import annotations

import asyncio

from google.protobuf.message import DecodeError

from evertune.infra.bus import Bucket
from evertune.infra.logging import get_logger
from evertune.v1 import endpoint_pb2

log = get_logger("evertune.searcher")

#: States of a deployment whose rollout has not ended.
ROLLING = frozenset(
    {
        endpoint_pb2.DEPLOYMENT_STATE_PENDING,
        endpoint_pb2.DEPLOYMENT_STATE_STARTING,
        endpoint_pb2.DEPLOYMENT_STATE_CANARY,
    }
)


async def wait_for_rollout(
    deployments: Bucket, endpoint: str, search_id: str, *, wait_s: float, appear_s: float
) -> endpoint_pb2.DeploymentState | None:
    """Until the rollout of `search_id`'s winner on `endpoint` has ended: a deployment of that
    origin appeared (within `appear_s`) and left pending, starting and canary; at most `wait_s` in
    all. The state it left them for (ACTIVE: promoted), or None when no rollout appeared or it did
    not end in time. Watches the deployments bucket; never raises (a failure to follow it is
    logged with its error, and the queued search goes on)."""
    loop = asyncio.get_running_loop()
    appear_by = loop.time() + appear_s
    seen = False
    try:
        async with asyncio.timeout(wait_s), deployments.watch(f"{endpoint}.*") as entries:
            pending = asyncio.ensure_future(anext(entries))
            try:
                while True:
                    left = None if seen else max(0.0, appear_by - loop.time())
                    done, _ = await asyncio.wait({pending}, timeout=left)
                    if not done:
                        log.info("no rollout of the winner; queued search goes on", endpoint=endpoint)
                        return None
                    entry = pending.result()
                    pending = asyncio.ensure_future(anext(entries))
                    # deployments are `<endpoint>.dep-*`; the bucket keeps other keys beside them
                    # (the deployer's rollout mutex, JSON)
                    if entry is None or not entry.value or not entry.key.startswith(f"{endpoint}.dep-"):
                        continue
                    try:
                        deployment = endpoint_pb2.Deployment.FromString(entry.value)
                    except DecodeError:
                        continue
                    if deployment.origin_search_id != search_id:
                        continue
                    seen = True
                    if deployment.state not in ROLLING:
                        return deployment.state
            finally:
                pending.cancel()
    except TimeoutError:
        log.info("winner's rollout still running; queued search goes on", endpoint=endpoint)
    except Exception:
        log.exception("could not follow the winner's rollout", endpoint=endpoint)
    return None
