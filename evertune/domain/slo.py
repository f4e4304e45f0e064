"""An endpoint's service-level objective: the one definition every package uses, with its wire
conversion beside it.

A request is good when its TTFT is at most `ttft_ms` and its p99 inter-token gap at most
`itl_ms`; the SLO is met when at least `share` of the requests are good (attainment). The error
budget is `1 - share`. On the wire (`evertune.v1.Slo`) an `itl_p99_ms` of 0 means no inter-token
target (here: infinity, so comparisons need no special case) and an `attainment_target` of 0 means
`DEFAULT_ATTAINMENT`. The deployer's API checks more at its edge (p50 <= p99, an upper bound, a
share below 1); everything else takes an `Slo` as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from evertune.errors import InvalidArgument
from evertune.v1 import endpoint_pb2

#: The attainment target when none is given (an `attainment_target` of 0 on the wire).
DEFAULT_ATTAINMENT: Final = 0.9


@dataclass(frozen=True)
class Slo:
    """Latency targets a request must meet, and the share of requests that must meet them."""

    ttft_ms: float  #: a good request's time to first token is at most this, ms (the p99 target)
    itl_ms: float = math.inf  #: and its p99 inter-token gap at most this, ms (inf: no target)
    share: float = DEFAULT_ATTAINMENT  #: share of requests that must be good, in (0, 1]
    ttft_p50_ms: float = 0.0  #: median TTFT target over a run, ms (0: none)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.ttft_ms) and self.ttft_ms > 0):
            raise InvalidArgument(f"SLO ttft_p99_ms must be > 0, got {self.ttft_ms}")
        if not self.itl_ms > 0:  # NaN fails too
            raise InvalidArgument(f"SLO itl_p99_ms must be > 0 (or none), got {self.itl_ms}")
        if not 0.0 < self.share <= 1.0:
            raise InvalidArgument(f"SLO attainment_target must be in (0, 1], got {self.share}")
        if not (math.isfinite(self.ttft_p50_ms) and self.ttft_p50_ms >= 0):
            raise InvalidArgument(f"SLO ttft_p50_ms must be >= 0, got {self.ttft_p50_ms}")

    def median_met(self, ttft_p50_ms: float) -> bool:
        """Whether a run's median TTFT meets the median target (always, when there is none)."""
        return self.ttft_p50_ms == 0 or ttft_p50_ms <= self.ttft_p50_ms

    @property
    def budget(self) -> float:
        """The error budget: the share of requests that may miss the targets."""
        return 1.0 - self.share

    @property
    def itl_wire_ms(self) -> float:
        """`itl_ms` as the wire and JSON write it: 0 for no target."""
        return self.itl_ms if math.isfinite(self.itl_ms) else 0.0

    @classmethod
    def from_proto(cls, message: endpoint_pb2.Slo) -> Slo:
        """The SLO of a wire message (itl 0: none; attainment 0: the default); `InvalidArgument`
        naming the field for a value no SLO can have."""
        if message.itl_p99_ms < 0:
            raise InvalidArgument(f"SLO itl_p99_ms must be >= 0 (0 = none), got {message.itl_p99_ms}")
        return cls(
            ttft_ms=message.ttft_p99_ms,
            itl_ms=message.itl_p99_ms or math.inf,
            share=message.attainment_target or DEFAULT_ATTAINMENT,
            ttft_p50_ms=message.ttft_p50_ms,
        )

    def to_proto(self) -> endpoint_pb2.Slo:
        """The wire message (the share written out, even when it is the default)."""
        return endpoint_pb2.Slo(
            ttft_p50_ms=self.ttft_p50_ms,
            ttft_p99_ms=self.ttft_ms,
            itl_p99_ms=self.itl_wire_ms,
            attainment_target=self.share,
        )


def describe_slo(slo: Slo) -> str:
    """One line for people: "TTFT <= 800 ms for 90% of requests, p50 <= 550 ms"."""
    text = f"TTFT <= {slo.ttft_ms:g} ms for {slo.share:.0%} of requests"
    if math.isfinite(slo.itl_ms):
        text += f" (inter-token gap p99 <= {slo.itl_ms:g} ms)"
    if slo.ttft_p50_ms:
        text += f", p50 <= {slo.ttft_p50_ms:g} ms"
    return text


#: A voice turn's budget for the model: about 800 ms from the caller's end of speech to the first
#: token for 90% of turns, and a median of 550 ms (a published healthcare voice deployment's
#: target). The default SLO of evertune's voice stories on the real model.
VOICE_TURN_SLO: Final = Slo(ttft_ms=800.0, share=0.9, ttft_p50_ms=550.0)
