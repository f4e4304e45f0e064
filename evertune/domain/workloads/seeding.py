"""Independent, reproducible random streams derived from one seed.

Each part of a plan (an agent's prompt, a call's turns, the arrival times) draws from its own stream,
so changing one part (say, more calls) leaves the others as they were. `random.Random` seeded with
a string is reproducible across processes and Python versions (it hashes the string with SHA-512,
not with the per-process `hash`).
"""

from __future__ import annotations

import random


def derive(seed: int, *parts: object) -> random.Random:
    """A random stream named by `seed` and `parts`; the same arguments always give the same stream."""
    return random.Random(":".join([str(seed), *(str(part) for part in parts)]))
