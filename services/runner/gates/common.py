"""What every gate returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GateOutcome:
    """The outcome of one gate (the wire's GateResult)."""

    name: str  #: gate name, as in GateSpec.name
    passed: bool  #: whether the trial passed it
    value: float  #: measured value, in the gate's unit (a share 0..1 for all three gates here)
    threshold: float  #: threshold applied, same unit
    detail: str  #: one line for a person: the figures behind the verdict
