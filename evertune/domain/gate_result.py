"""What a trial's gate decided: the runner makes them, the searcher and the deployer read them
back from `trial.completed` (the wire's `GateResult`, converted here and nowhere else)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from evertune.v1 import jobs_pb2

#: Share of a lossy change's answers the correctness gate needs close to the live configuration's
#: when the endpoint (`correctness_agreement_threshold`) or the job (`GateSpec.threshold`) says 0.
DEFAULT_AGREEMENT: Final = 0.95


@dataclass(frozen=True)
class GateResult:
    """The outcome of one gate of one trial."""

    name: str  #: gate name, as in GateSpec.name ("correctness", "slo", "stability")
    passed: bool  #: whether the trial passed it
    value: float  #: measured value, in the gate's unit (a share 0..1 for the gates here)
    threshold: float  #: threshold applied, same unit
    detail: str = ""  #: one line for a person: the figures behind the verdict

    @classmethod
    def from_proto(cls, message: jobs_pb2.GateResult) -> GateResult:
        return cls(
            name=message.name,
            passed=message.passed,
            value=message.value,
            threshold=message.threshold,
            detail=message.detail,
        )

    def to_proto(self) -> jobs_pb2.GateResult:
        return jobs_pb2.GateResult(
            name=self.name, passed=self.passed, value=self.value, threshold=self.threshold, detail=self.detail
        )
