"""How the fuzz tests run hypothesis: the same examples in CI and here (derandomized, no example
database written), more or random ones on request (`EVERTUNE_FUZZ_EXAMPLES=N`,
`EVERTUNE_FUZZ_RANDOM=1`)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings


def fuzz_settings(*, examples: int) -> settings:
    """Hypothesis settings for a fuzz test of `examples` examples (unless the environment says)."""
    return settings(
        max_examples=int(os.environ.get("EVERTUNE_FUZZ_EXAMPLES", str(examples))),
        deadline=None,
        derandomize=os.environ.get("EVERTUNE_FUZZ_RANDOM") != "1",
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
