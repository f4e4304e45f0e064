"""What each arm of a canary served, from the telemetry store (the `requests` table the profiler's
sink fills from the gateway's records). The one place the deployer reads ClickHouse.

One query gives both arms: the canary over its current step (`canary_since`), the stable deployment
over the whole rollout so far (`stable_since`; at the 100% step the stable gets no new traffic,
so its window is what it served beside the canary at the earlier steps). Per request:

- a request counts when it says something about the deployment: requests whose client went away
  (`client_disconnect`, or a disconnect before the first token without an error) are left out;
- failed = an error class or HTTP status >= 400 (as the sla-monitor counts them);
- TTFT of each successful request that got a first token;
- the request's p99 inter-token gap (nearest rank over its gaps), for requests with gaps;
- good = not failed, TTFT within the SLO's `ttft_p99_ms` and the p99 gap within `itl_p99_ms`
  (when set): attainment = good / counted.

Large arms are sampled (`max_samples` TTFTs and gaps each, uniformly); counts stay exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from evertune.deployer.canary import ArmWindow
from evertune.domain.slo import Slo
from evertune.infra.store import Store

#: Most per-request figures fetched per arm (a uniform sample beyond that).
MAX_SAMPLES: Final = 5000

_QUERY = """
SELECT deployment,
       count() AS requests,
       countIf(failed) AS errors,
       countIf(NOT failed AND ttft_ms > 0 AND ttft_ms <= {ttft_target:Float64}
               AND ({itl_target:Float64} <= 0 OR itl_p99 <= {itl_target:Float64})) AS good,
       groupArraySampleIf({max_samples:UInt32}, 1)(ttft_ms, NOT failed AND ttft_ms > 0) AS ttfts,
       groupArraySampleIf({max_samples:UInt32}, 2)(itl_p99, NOT failed AND length(itl_ms) > 0) AS gaps
FROM (
    SELECT deployment, ttft_ms, itl_ms,
           (error_class != '' OR status_code >= 400) AS failed,
           if(length(itl_ms) = 0, 0.,
              toFloat64(arrayElement(arraySort(itl_ms), toUInt32(ceil(0.99 * length(itl_ms)))))) AS itl_p99
    FROM requests
    WHERE endpoint = {endpoint:String}
      AND ((deployment = {canary:String} AND ts >= {canary_since:DateTime64(6, 'UTC')})
           OR (deployment = {stable:String} AND ts >= {stable_since:DateTime64(6, 'UTC')}))
      AND ts < {until:DateTime64(6, 'UTC')}
      AND error_class != 'client_disconnect'
      AND NOT (error_class = '' AND status_code < 400 AND ttft_ms <= 0 AND client_disconnected)
)
GROUP BY deployment
"""


@dataclass(frozen=True)
class Windows:
    """The two arms of one analysis."""

    canary: ArmWindow  #: what the canary served in its window
    stable: ArmWindow  #: what the stable deployment served in its window


class Telemetry:
    """Reads arm windows from the store (see the module docstring)."""

    def __init__(self, store: Store, *, max_samples: int = MAX_SAMPLES) -> None:
        self.store = store
        self.max_samples = max_samples

    async def windows(
        self,
        *,
        endpoint: str,
        canary: str,
        stable: str,
        canary_since: datetime,
        stable_since: datetime,
        until: datetime,
        slo: Slo,
    ) -> Windows:
        """Both arms' windows; an arm with no rows is an empty window."""
        result = await self.store.query(
            _QUERY,
            {
                "endpoint": endpoint,
                "canary": canary,
                "stable": stable,
                "canary_since": canary_since,
                "stable_since": stable_since,
                "until": until,
                "ttft_target": slo.ttft_ms,
                "itl_target": slo.itl_wire_ms,  # 0: no inter-token target
                "max_samples": self.max_samples,
            },
        )
        arms: Mapping[str, ArmWindow] = {
            str(deployment): ArmWindow(
                ttft_ms=[float(v) for v in ttfts],
                itl_p99_ms=[float(v) for v in gaps],
                requests=int(requests),
                errors=int(errors),
                attainment=int(good) / int(requests) if requests else None,
            )
            for deployment, requests, errors, good, ttfts, gaps in result
        }
        empty = ArmWindow(ttft_ms=[], itl_p99_ms=[], requests=0, errors=0, attainment=None)
        return Windows(canary=arms.get(canary, empty), stable=arms.get(stable, empty))
