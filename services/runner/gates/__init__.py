"""The gates a trial must pass before its config can win; each a pure function of measured figures.

- `correctness`: greedy outputs on the golden set against the reference config's (token for token
  for exact changes, an agreement threshold for lossy ones);
- `stability` (the brief's "reliability"): no errors, and p99 figures stable across repeats;
- `slo`: the SLO met at the gate rate (the target rate x headroom).
"""

from evertune.runner.gates.correctness import (
    EXACT_KNOBS,
    Agreement,
    ChangeClass,
    agreement,
    classify_change,
    correctness_gate,
)
from evertune.runner.gates.slo import slo_gate
from evertune.runner.gates.stability import Spread, p99_spread, stability_gate

__all__ = [
    "EXACT_KNOBS",
    "Agreement",
    "ChangeClass",
    "Spread",
    "agreement",
    "classify_change",
    "correctness_gate",
    "p99_spread",
    "slo_gate",
    "stability_gate",
]
