"""Whether an sla.breach during a rollout judges its canary (pure).

The sla-monitor raises breaches per deployment (a canary beside the stable one, once it has served
enough requests of its own) and for the endpoint as a whole. While a canary takes part of the
traffic, an endpoint-wide breach mixes both arms, and a rollout often starts *because* the stable
deployment breaches: a winner rolled out to fix a breaching configuration would otherwise be rolled
back by that configuration's own breach. In a demo run on 2 cores (EPYC Zen 4) exactly that
happened: the canary at 10% had served no request at all when an endpoint-wide breach of the
queueing stable deployment rolled it back.

So an endpoint-wide breach judges the canary only once the canary takes all the traffic, and only
if the breach's short window began after that. Before, the canary is judged by the breaches that
name it and by each step's analysis (canary against stable, `canary.py`).

Only pages roll back. A ticket (the slow-burn rule, 10% of a 30-day budget over 3 days) asks for a
look within working hours; on a canary's first requests it is a handful of samples, not a trend.
In a demo run on an EPYC Zen 3 the ticket rule named a canary at 100% on its first 16 requests
(burn 1.6: two or three slow ones among its cold-start requests, p99 ~1 s against the stable's
5.5 s) and rolled back a winner that every step analysis had passed.
"""

from __future__ import annotations

from dataclasses import dataclass

from evertune.deployer.plan import FULL_WEIGHT
from evertune.deployer.state import RolloutRecord


@dataclass(frozen=True)
class SeenBreach:
    """The parts of an sla.breach that decide whom it judges."""

    deployment: str  #: deployment the breach names ("" = the endpoint as a whole)
    at_s: float  #: unix time of the breach event
    short_window_s: float  #: the breaching rule's short window, s
    paging: bool = True  #: a page (severity CRITICAL); False: a ticket (WARNING), never a rollback


def why_not_the_canary(breach: SeenBreach, rollout: RolloutRecord) -> str:
    """ "" when `breach` judges the rollout's canary (it must roll back); otherwise why it does not.

    `rollout.step` -1 (the canary takes no traffic yet), a ticket, another deployment's breach, a breach from
    before the canary's first traffic, and an endpoint-wide one while the canary carries part of the
    traffic, or whose short window began before it carried all of it, do not judge it."""
    if rollout.step < 0:
        return "the canary takes no traffic yet"
    if not breach.paging:
        return "a ticket, not a page: a slow burn asks for a look, the step analyses judge the canary"
    if breach.deployment and breach.deployment != rollout.deployment_id:
        return f"a breach of deployment {breach.deployment}, not the canary"
    if breach.at_s < rollout.started_s:
        return "a breach from before the canary's first traffic"
    if breach.deployment:
        return ""
    if rollout.weight < FULL_WEIGHT:
        return (
            f"an endpoint-wide breach while the canary takes {rollout.weight / 100:g}% of the traffic: "
            "the canary is judged by its own breaches and the step analyses"
        )
    if breach.at_s - breach.short_window_s < rollout.step_started_s:
        return "an endpoint-wide breach whose short window began before the canary took all the traffic"
    return ""
