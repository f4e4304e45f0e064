"""Per-tenant request rates (pure): one token bucket per tenant, the clock passed in.

A tenant's bucket holds at most `capacity` tokens (its burst) and refills at `rate` tokens per
second; a request takes one token or is refused with the seconds until the next token is due. The
tenant is the one of the caller's API key (`*` for an operator's key and for a gateway without
keys). A rate of 0 means no cap (no bucket is kept).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class TokenBucket:
    """`rate` tokens per second, at most `capacity`; starts full at `updated`."""

    rate: float
    capacity: float
    tokens: float
    updated: float

    def take(self, now: float) -> float:
        """Take one token at `now`: 0.0 when taken, else the seconds until one is due (> 0)."""
        if now > self.updated:  # a clock that steps back refills nothing
            self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
            self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


def retry_after_s(wait_s: float) -> int:
    """Whole seconds a client told to wait `wait_s` should wait (`Retry-After`): rounded up, >= 1."""
    return max(1, math.ceil(wait_s))


class TenantRates:
    """The buckets of every tenant: `default` requests/s each, `overrides` per tenant (0 = no cap);
    a bucket holds `burst_s` seconds of its rate (at least one request)."""

    def __init__(self, default: float, overrides: Mapping[str, float], burst_s: float) -> None:
        self.default = default
        self.overrides = dict(overrides)
        self.burst_s = burst_s
        self._buckets: dict[str, TokenBucket] = {}

    def rate(self, tenant: str) -> float:
        """Requests per second `tenant` may send (0: no cap)."""
        return self.overrides.get(tenant, self.default)

    def take(self, tenant: str, now: float) -> float:
        """One request of `tenant` at `now`: 0.0 when admitted, else seconds until one would be."""
        bucket = self._buckets.get(tenant)
        if bucket is None:
            rate = self.rate(tenant)
            if rate <= 0:
                return 0.0
            capacity = max(1.0, rate * self.burst_s)
            bucket = self._buckets[tenant] = TokenBucket(rate, capacity, capacity, now)
        return bucket.take(now)
