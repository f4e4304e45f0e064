"""How a search spends its real trials: successive halving over the performance model's ranking (pure).

1. The model predicts every candidate's figures; `score` turns figures into one number per the
   objective (higher is better; an SLO the prediction misses scores -inf).
2. Round 0 trials the baseline (the live configuration, always: the winner is judged against it)
   and the model's best `first_round` candidates at fidelity 1 (the runner's shortest trial).
3. After each round the measured scores decide: the best 1/`eta` of the round's candidates go on
   to the next round at `eta`x the fidelity (longer replays, more repeats). Between rounds the
   shell re-calibrates the model from the measured trials and calls `rerank`: a candidate not yet
   tried whose new prediction beats the weakest survivor's measured score replaces it (or, next
   to a lone survivor, joins it).
4. The search ends when one candidate is left after a round, or the budget is spent. The winner
   is the best candidate measured at the highest fidelity reached that passed every gate, and
   only if it beats the baseline measured in that round by `min_gain`; otherwise the search ends
   with no winner and the live configuration stays.

Invariant (asserted): real trials started never exceed the budget, and a candidate is trialled at
most once per fidelity.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from evertune.searcher.space import Candidate


class Objective(Enum):
    """What "best" means for an endpoint."""

    GOODPUT = "goodput"  #: highest request rate meeting the SLO (default)
    P50_TTFT = "p50_ttft"  #: lowest median TTFT at the profile's peak rate x headroom
    COST = "cost"  #: fewest accelerator-hours per request at the SLO


@dataclass(frozen=True)
class Figures:
    """What a trial (or the model) says about one candidate."""

    goodput_rps: float  #: highest rate meeting the SLO, requests/s
    ttft_p50_ms: float  #: median TTFT at the target rate, ms
    meets_slo: bool  #: the SLO holds at the gate rate (target x headroom)
    gates_passed: bool = True  #: correctness and reliability gates (a prediction: True)
    ttft_p99_ms: float = math.nan  #: 99th-percentile TTFT at the gate rate, ms (NaN: unknown)
    attainment: float = math.nan  #: share of requests meeting the SLO at the gate rate (NaN: unknown)


def score(figures: Figures, *, objective: Objective, devices: int) -> float:
    """One number per candidate, higher is better; -inf when the SLO or a gate fails."""
    if not figures.gates_passed or not figures.meets_slo:
        return -math.inf
    if objective is Objective.GOODPUT:
        return figures.goodput_rps
    if objective is Objective.P50_TTFT:
        return -figures.ttft_p50_ms
    # cost: requests per device-second at the SLO (a CPU candidate counts as one device)
    return figures.goodput_rps / max(devices, 1)


@dataclass(frozen=True)
class TrialRequest:
    """One real trial the shell must run."""

    candidate: Candidate  #: configuration to trial
    fidelity: int  #: trial length multiplier (1, eta, eta², ...)
    round: int  #: round index, from 0
    baseline: bool  #: whether this is the baseline's trial


@dataclass
class _Round:
    fidelity: int
    requests: list[TrialRequest]
    measured: dict[str, float] = field(default_factory=dict)  #: candidate key -> measured score


class SuccessiveHalving:
    """See the module docstring. Drive it with `next_round()` / `report()` until `done`."""

    def __init__(
        self,
        *,
        baseline: Candidate,
        predicted: Mapping[str, float],
        candidates: Sequence[Candidate],
        budget: int,
        eta: int = 2,
        first_round: int | None = None,
        min_gain: float = 0.05,
    ) -> None:
        if budget < 2:
            raise ValueError("a search needs a budget of at least 2 real trials (baseline + one)")
        if eta < 2:
            raise ValueError("eta must be at least 2")
        self.baseline = baseline
        self.budget = budget
        self.eta = eta
        self.min_gain = min_gain
        self.started = 0  #: real trials handed out
        self.rounds: list[_Round] = []
        self._by_key = {c.key: c for c in candidates if c.key != baseline.key}
        self._predicted = dict(predicted)
        self._tried: set[tuple[str, int]] = set()
        self._survivors = self._ranked()[: first_round or self._first_round_size()]
        self.done = False

    def _first_round_size(self) -> int:
        """Largest n whose halving rounds (n + n/eta + ... + 1) fit the budget after the baseline's
        trial in each round."""
        n = 1
        while self._cost(n + 1) <= self.budget:
            n += 1
        return n

    def _cost(self, n: int) -> int:
        total = 0
        while True:
            total += n + 1  # the round's candidates and the baseline at that fidelity
            if n <= 1:
                return total
            n = max(1, n // self.eta)

    def _ranked(self) -> list[Candidate]:
        feasible = [c for c in self._by_key.values() if self._predicted.get(c.key, -math.inf) > -math.inf]
        return sorted(feasible, key=lambda c: (-self._predicted[c.key], c.key))

    # --- driving -----------------------------------------------------------------------------
    def next_round(self) -> list[TrialRequest]:
        """The trials of the next round (empty when done). Baseline first."""
        if self.done:
            return []
        fidelity = self.eta ** len(self.rounds)
        fresh = [c for c in self._survivors if (c.key, fidelity) not in self._tried]
        room = self.budget - self.started - 1  # one trial goes to the baseline at this fidelity
        if not fresh or room < 1:
            self.done = True
            return []
        requests = [
            TrialRequest(
                candidate=c, fidelity=fidelity, round=len(self.rounds), baseline=c.key == self.baseline.key
            )
            for c in [self.baseline, *fresh[:room]]
        ]
        for request in requests:
            self._tried.add((request.candidate.key, fidelity))
        self.started += len(requests)
        assert self.started <= self.budget, "the strategy handed out more trials than the budget"
        self.rounds.append(_Round(fidelity=fidelity, requests=requests))
        return requests

    def report(self, request: TrialRequest, measured: float) -> None:
        """The measured score of one trial of the current round (-inf = failed a gate or the SLO)."""
        current = self.rounds[request.round]
        current.measured[request.candidate.key] = measured
        if len(current.measured) == len(current.requests):
            self._close_round(current)

    def rerank(self, predicted: Mapping[str, float]) -> None:
        """New predictions from the re-calibrated model: the best untried candidate, if predicted
        better than the weakest survivor, takes its place (once per call); a lone survivor is
        kept and the challenger joins it, so the next round measures both at one fidelity. A
        survivor is judged by what it measured in the last round (its stale prediction would hold
        it up); one not measured yet, by its prediction."""
        self._predicted.update(predicted)
        tried = {key for key, _ in self._tried}
        untried = [c for c in self._ranked() if c.key not in tried]
        if not untried or not self._survivors:
            return
        last = self.rounds[-1].measured if self.rounds else {}

        def standing(c: Candidate) -> float:
            return last.get(c.key, self._predicted.get(c.key, -math.inf))

        weakest = min(self._survivors, key=standing)
        challenger = untried[0]
        if self._predicted[challenger.key] <= standing(weakest):
            return
        if len(self._survivors) == 1:
            self._survivors = [*self._survivors, challenger]
        else:
            self._survivors = [challenger if c.key == weakest.key else c for c in self._survivors]

    def _close_round(self, finished: _Round) -> None:
        ranked = sorted(
            (r.candidate for r in finished.requests if not r.baseline),
            key=lambda c: (-finished.measured[c.key], c.key),
        )
        passing = [c for c in ranked if finished.measured[c.key] > -math.inf]
        keep = max(1, len(ranked) // self.eta)
        self._survivors = passing[:keep]
        if len(ranked) <= 1 or not passing or self.started >= self.budget:
            self.done = True

    # --- the outcome -------------------------------------------------------------------------
    def winner(self) -> tuple[Candidate, float, float] | None:
        """(winner, its score, the baseline's score in the same round), or None; see `decision`."""
        found = self.decision()
        return (found.candidate, found.score, found.baseline_score) if found else None

    def decision(self) -> Decision | None:
        """The winner: in the latest round where the baseline and a passing candidate were both
        measured (so at one fidelity, the highest such), its best candidate, if it beats the
        baseline by `min_gain`. None otherwise."""
        for finished in reversed(self.rounds):
            base = finished.measured.get(self.baseline.key)
            scored = [
                (finished.measured[r.candidate.key], r)
                for r in finished.requests
                if not r.baseline and r.candidate.key in finished.measured
            ]
            scored = [(value, r) for value, r in scored if value > -math.inf]
            if base is None or not scored:
                continue
            value, request = max(scored, key=lambda vr: (vr[0], vr[1].candidate.key))
            if not _beats(value, base, self.min_gain):
                return None
            return Decision(
                candidate=request.candidate,
                score=value,
                baseline_score=base,
                fidelity=finished.fidelity,
                round=request.round,
            )
        return None


@dataclass(frozen=True)
class Decision:
    """The winner of a search and the round that decided it."""

    candidate: Candidate  #: the winning configuration
    score: float  #: its measured score in that round
    baseline_score: float  #: the baseline's measured score in the same round
    fidelity: int  #: the round's fidelity
    round: int  #: the round's index


def _beats(candidate: float, baseline: float, min_gain: float) -> bool:
    if baseline == -math.inf:
        return candidate > -math.inf
    return candidate - baseline > abs(baseline) * min_gain
