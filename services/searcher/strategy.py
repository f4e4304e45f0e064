"""How a search spends its real trials: successive halving over the performance model's ranking (pure).

1. The model predicts every candidate's figures; `score` turns figures into one number per the
   objective (higher is better; an SLO the prediction misses scores -inf).
2. Round 0 trials the baseline (the live configuration, always: the winner is judged against it)
   and the model's best `first_round` candidates at fidelity 1 (the runner's shortest trial).
3. After each round the measured scores decide: the best 1/`eta` of the round's candidates go on
   to the next round at `eta`x the fidelity (more repeats of each rate). Between rounds the
   shell re-calibrates the model from the measured trials and calls `rerank`: a candidate not yet
   tried whose new prediction beats the weakest survivor's measured score replaces it (or, next
   to a lone survivor, joins it).
4. The halving ends when one candidate is left after a round, or its share of the budget is
   spent. The leader is the best candidate of the latest round in which it and the baseline were
   both measured, if it passed every gate and measured better than the baseline.
5. Confirmation (`confirm_pairs` > 0): the leader and the baseline are measured again, one pair of
   trials per round at the leader's fidelity (baseline first, then the leader), so the deciding
   evidence is interleaved in time. The noise rule (`evertune.searcher.noise.compare`) judges
   every pair, the deciding halving round's included, against the A/A noise floor that the
   baseline's own repeats show. The leader wins only when the verdict is BETTER with at least
   `min_pairs` pairs; otherwise the search ends with no winner and the live configuration stays,
   and the comparison says what gain it could not resolve.

Without confirmation (`confirm_pairs` = 0, for noise-free simulated trials) the leader wins when
it beats the baseline of its round by `min_gain`.

Invariant (asserted): real trials started never exceed the budget, and a candidate is trialled at
most once per fidelity in the halving rounds (confirmation rounds repeat the leader and the
baseline by design).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from evertune.searcher.noise import DEFAULT_CONFIDENCE, DEFAULT_MIN_FLOOR, Comparison, Verdict, compare
from evertune.searcher.space import Candidate, class_twin


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
    confirming: bool = False  #: a confirmation round's trial (a repeat of the leader or the baseline)


@dataclass(frozen=True)
class NoiseRule:
    """How the confirmation judges a leader (see `evertune.searcher.noise`)."""

    confirm_pairs: int = 2  #: extra interleaved (baseline, leader) pairs after the halving
    min_pairs: int = 3  #: pairs a winner needs (the deciding halving round's counts as one)
    confidence: float = DEFAULT_CONFIDENCE  #: confidence asked of the effect's interval
    min_floor: float = DEFAULT_MIN_FLOOR  #: smallest relative noise floor
    lower_is_better: bool = False  #: the score is a latency (p50 objective), not a rate

    @property
    def active(self) -> bool:
        """Whether the leader is judged by the noise rule (else by `min_gain` on one round)."""
        return self.confirm_pairs > 0 or self.min_pairs > 1


#: No confirmation: one comparison, `min_gain` decides (noise-free simulated trials).
NO_CONFIRMATION = NoiseRule(confirm_pairs=0, min_pairs=1)
#: Successive halving's reduction factor unless told (the settings' default too).
DEFAULT_ETA = 2
#: Share by which a winner must beat the baseline's score without confirmation, unless told.
DEFAULT_MIN_GAIN = 0.05


@dataclass
class _Round:
    fidelity: int
    requests: list[TrialRequest]
    measured: dict[str, float] = field(default_factory=dict)  #: candidate key -> measured score
    #: candidate key -> the objective's raw figure (p50 ms, or a rate), SLO met or not
    metric: dict[str, float] = field(default_factory=dict)
    confirming: bool = False  #: a confirmation round (baseline and leader only)


class SuccessiveHalving:
    """See the module docstring. Drive it with `next_round()` / `report()` until `done`."""

    def __init__(
        self,
        *,
        baseline: Candidate,
        predicted: Mapping[str, float],
        candidates: Sequence[Candidate],
        budget: int,
        eta: int = DEFAULT_ETA,
        first_round: int | None = None,
        min_gain: float = DEFAULT_MIN_GAIN,
        noise: NoiseRule = NO_CONFIRMATION,
        must_try: Sequence[str] = (),
        unpriced: Collection[str] = (),
        representatives: Collection[str] = (),
        defaults_seat: str | None = None,
    ) -> None:
        """`must_try`: candidate keys the first round measures whatever their prediction (knobs the
        model cannot price, such as the dtype on an ISA it was not calibrated on; the engine's
        defaults), in order, beside the model's best candidate as far as the round's budget goes.
        `unpriced`: candidate keys the model's predictions say nothing about (another dtype or
        execution mode: it predicts them as their twins with the live configuration's); they are
        not ranked, so only `must_try` measures them, until `rerank` says they are priced.
        `representatives`: the `must_try` keys that stand for such a class (`space.unpriced_
        representatives`: the baseline's knobs in another dtype or mode). Round 0 measures each
        class through its twin with the model's best candidate's knobs instead, when the space holds
        one, so a class wins or loses with the knob gains the model predicts (from fp32, bf16 with
        the baseline's knobs won its trial, and bf16 with the 32-token blocks that had measured
        faster in fp32 never ran: `bench peers`, 2026-12-07).
        `defaults_seat`: the key of the candidate that stands for the engine's defaults
        (`space.defaults_seat_key`: the defaults, or their twin in the live configuration's dtype
        when they run another). When the model predicts its best within the smallest gain a
        measurement can tell (`tie_share`) of it, it is measured first: a predicted edge no trial
        could confirm is no reason to put an untried configuration before the engine's own, which
        a winner must never be worse than anyway. It may be unpriced (the engine's execution mode
        beside an eager endpoint): the model predicts it as its twin in the live mode."""
        if budget < 2:
            raise ValueError("a search needs a budget of at least 2 real trials (baseline + one)")
        if eta < 2:
            raise ValueError("eta must be at least 2")
        self.baseline = baseline
        self.noise = noise
        #: Trials kept for the confirmation rounds (none when the budget cannot also hold a halving).
        self.reserved = 2 * noise.confirm_pairs if budget - 2 * noise.confirm_pairs >= 2 else 0
        self.budget = budget
        self.eta = eta
        self.min_gain = min_gain
        self.started = 0  #: real trials handed out
        self.rounds: list[_Round] = []
        self._by_key = {c.key: c for c in candidates if c.key != baseline.key}
        self._predicted = dict(predicted)
        self._unpriced = set(unpriced)
        self._tried: set[tuple[str, int]] = set()
        size = first_round or self._first_round_size()
        ranked = self._ranked()
        forced = [self._by_key[k] for k in dict.fromkeys(must_try) if k in self._by_key]
        best = [c for c in ranked if c not in forced][:1]
        if best:
            forced = self._with_knobs(forced, knobs=best[0], representatives=representatives)
        # The model's best comes first, then the forced candidates in their order, even past the
        # halving's size (the round's room in the budget cuts from the end): a first round of one
        # would otherwise measure only a forced knob and never what the model found. The engine's
        # defaults go before the model's best when the model cannot tell the two apart.
        first = best + forced
        if best and defaults_seat in self._by_key and self._ties(defaults_seat, best[0].key):
            engine_defaults = self._by_key[defaults_seat]
            first = [engine_defaults, *(c for c in first if c is not engine_defaults)]
        rest = [c for c in ranked if c not in first]
        self._survivors = (first + rest)[: max(size, len(first))]
        self._leader: Candidate | None = None  #: the halving's leader, judged by the noise rule
        self._confirm_fidelity = 1  #: the fidelity the leader and the baseline are compared at
        self._halving_done = False
        self.done = False

    def _with_knobs(
        self, forced: list[Candidate], *, knobs: Candidate, representatives: Collection[str]
    ) -> list[Candidate]:
        """`forced` with each class representative swapped for its class's twin with `knobs`
        (kept when the class has none), each candidate once, in order."""
        swapped = [self._twin(c, knobs=knobs) if c.key in representatives else c for c in forced]
        return list({c.key: c for c in swapped}.values())

    def _twin(self, representative: Candidate, *, knobs: Candidate) -> Candidate:
        return class_twin(self._by_key.values(), knobs=knobs, of_class=representative) or representative

    @property
    def tie_share(self) -> float:
        """Relative difference of predicted scores under which the model cannot tell two candidates
        apart: the noise rule's smallest floor, or `min_gain` without a noise rule."""
        return self.noise.min_floor if self.noise.active else self.min_gain

    def _ties(self, defaults: str, best: str) -> bool:
        """Whether the model's best is predicted within `tie_share` of the engine's defaults."""
        d, b = self._predicted.get(defaults, -math.inf), self._predicted.get(best, -math.inf)
        if not (math.isfinite(d) and math.isfinite(b)):
            return False
        return b - d <= self.tie_share * abs(b)

    def _first_round_size(self) -> int:
        """Largest n whose halving rounds (n + n/eta + ... + 1) fit the budget after the baseline's
        trial in each round."""
        n = 1
        while self._cost(n + 1) <= self.budget - self.reserved:
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
        feasible = [
            c
            for c in self._by_key.values()
            if self._predicted.get(c.key, -math.inf) > -math.inf and c.key not in self._unpriced
        ]
        return sorted(feasible, key=lambda c: (-self._predicted[c.key], c.key))

    # --- driving -----------------------------------------------------------------------------
    def next_round(self) -> list[TrialRequest]:
        """The trials of the next round (empty when done). Baseline first."""
        if self.done:
            return []
        if self._halving_done:
            return self._confirmation_round()
        fidelity = self.eta ** len(self.rounds)
        fresh = [c for c in self._survivors if (c.key, fidelity) not in self._tried]
        room = self.budget - self.reserved - self.started - 1  # one trial goes to the baseline
        if self.rounds and room < len(fresh):  # (round 0's order is the constructor's)
            # The best standing first, so the room cuts the weakest: a challenger the re-calibrated
            # model puts well ahead of a measured survivor is measured rather than cut. (From an
            # fp32 start, round 0 spent 6 of 12 trials on the classes the model could not price,
            # and the 32-token blocks it then ranked first never ran: `bench stack`, 2026-12-07.)
            fresh = sorted(fresh, key=self._standing, reverse=True)
        if not fresh or room < 1:
            self._end_halving()
            return self.next_round()
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

    def _end_halving(self) -> None:
        """The halving is over: confirm its leader if there is one and trials are left for it."""
        self._halving_done = True
        leader = self._halving_leader()
        if leader is None or not self.noise.active:
            self.done = True
            return
        # Judged by the noise rule even when no confirmation fits: fewer than `min_pairs` pairs
        # then means no winner, never a verdict on one trial each.
        self._leader, self._confirm_fidelity = leader
        if self.noise.confirm_pairs == 0 or self.started + 2 > self.budget:
            self.done = True

    def _confirmation_round(self) -> list[TrialRequest]:
        """One more (baseline, leader) pair, or none when enough were measured or no trial is left."""
        assert self._leader is not None
        confirmed = sum(1 for r in self.rounds if r.confirming)
        if confirmed >= self.noise.confirm_pairs or self.started + 2 > self.budget:
            self.done = True
            return []
        index = len(self.rounds)
        requests = [
            TrialRequest(
                candidate=c,
                fidelity=self._confirm_fidelity,
                round=index,
                baseline=c.key == self.baseline.key,
                confirming=True,
            )
            for c in (self.baseline, self._leader)
        ]
        self.started += len(requests)
        assert self.started <= self.budget, "the strategy handed out more trials than the budget"
        self.rounds.append(_Round(fidelity=self._confirm_fidelity, requests=requests, confirming=True))
        return requests

    def _halving_leader(self) -> tuple[Candidate, int] | None:
        """(leader, its fidelity): the best passing candidate of the latest halving round that also
        measured the baseline, if it measured better than the baseline there."""
        for finished in reversed([r for r in self.rounds if not r.confirming]):
            base = finished.measured.get(self.baseline.key)
            scored = [
                (finished.measured[r.candidate.key], r.candidate)
                for r in finished.requests
                if not r.baseline and finished.measured.get(r.candidate.key, -math.inf) > -math.inf
            ]
            if base is None or not scored:
                continue
            value, candidate = max(scored, key=lambda vc: (vc[0], vc[1].key))
            return (candidate, finished.fidelity) if value > base else None
        return None

    def report(self, request: TrialRequest, measured: float, *, metric: float | None = None) -> None:
        """The measured score of one trial of the current round (-inf = failed a gate or the SLO),
        and the objective's raw figure when the trial ran (the noise rule compares those: a pair in
        which both trials missed the SLO still says which was faster)."""
        current = self.rounds[request.round]
        current.measured[request.candidate.key] = measured
        if metric is not None and math.isfinite(metric):
            current.metric[request.candidate.key] = metric
        if len(current.measured) == len(current.requests):
            self._close_round(current)

    def rerank(self, predicted: Mapping[str, float], *, priced: Collection[str] = ()) -> None:
        """New predictions from the re-calibrated model: the best untried candidate, if predicted
        better than the weakest survivor, takes its place (once per call); a lone survivor is
        kept and the challenger joins it, so the next round measures both at one fidelity. A
        survivor is judged by what it measured in the last round (its stale prediction would hold
        it up); one not measured yet, by its prediction. `priced`: unpriced keys the model prices
        now (a trial of their dtype and execution mode was measured); they are ranked from here on."""
        self._predicted.update(predicted)
        self._unpriced.difference_update(priced)
        tried = {key for key, _ in self._tried}
        untried = [c for c in self._ranked() if c.key not in tried]
        if not untried or not self._survivors:
            return
        weakest = min(self._survivors, key=self._standing)
        challenger = untried[0]
        if self._predicted[challenger.key] <= self._standing(weakest):
            return
        if len(self._survivors) == 1:
            self._survivors = [*self._survivors, challenger]
        else:
            self._survivors = [challenger if c.key == weakest.key else c for c in self._survivors]

    def _standing(self, candidate: Candidate) -> float:
        """What a survivor stands on: its score in the last halving round, else its prediction."""
        last = self.rounds[-1].measured if self.rounds else {}
        return last.get(candidate.key, self._predicted.get(candidate.key, -math.inf))

    def _close_round(self, finished: _Round) -> None:
        if finished.confirming:
            return
        ranked = sorted(
            (r.candidate for r in finished.requests if not r.baseline),
            key=lambda c: (-finished.measured[c.key], c.key),
        )
        passing = [c for c in ranked if finished.measured[c.key] > -math.inf]
        keep = max(1, len(ranked) // self.eta)
        self._survivors = passing[:keep]
        if len(ranked) <= 1 or not passing or self.started >= self.budget - self.reserved:
            self._end_halving()

    # --- the outcome -------------------------------------------------------------------------
    def winner(self) -> tuple[Candidate, float, float] | None:
        """(winner, its score, the baseline's score in the same round), or None; see `decision`."""
        found = self.decision()
        return (found.candidate, found.score, found.baseline_score) if found else None

    def comparison(self) -> Comparison | None:
        """The noise rule's judgement of the confirmed leader (None without confirmation rounds)."""
        rule = self.noise
        if self._leader is None:
            return None
        leader = self._leader.key
        pairs = [(self._figure(r, self.baseline.key), self._figure(r, leader)) for r in self._pair_rounds()]
        if not pairs:
            return None
        base, lead = [b for b, _ in pairs], [c for _, c in pairs]
        return compare(
            base,
            lead,
            lower_is_better=rule.lower_is_better,
            confidence=rule.confidence,
            min_floor=rule.min_floor,
        )

    def _figure(self, finished: _Round, key: str) -> float:
        """A trial's figure for the noise rule: its raw metric when reported, else from its score
        (-inf, a failed SLO or gate: an infinite latency or a zero rate)."""
        if key in finished.metric:
            return finished.metric[key]
        value = finished.measured[key]
        if self.noise.lower_is_better:  # scores are -latency
            return -value
        return max(value, 0.0)

    def _pair_rounds(self) -> list[_Round]:
        """The rounds holding a (baseline, leader) pair, in time order: the deciding halving round
        and every finished confirmation round."""
        if self._leader is None:
            return []
        key, base_key = self._leader.key, self.baseline.key
        return [
            r
            for r in self.rounds
            if r.fidelity == self._confirm_fidelity and key in r.measured and base_key in r.measured
        ]

    def decision(self) -> Decision | None:
        """The winner. With confirmation: the leader, when the noise rule says BETTER over at least
        `min_pairs` pairs. Without: in the latest round where the baseline and a passing candidate
        were both measured (so at one fidelity, the highest such), its best candidate, if it beats
        the baseline by `min_gain`. None otherwise."""
        if self._leader is not None:
            return self._confirmed_decision()
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

    def _confirmed_decision(self) -> Decision | None:
        assert self._leader is not None
        found = self.comparison()
        if found is None or found.verdict is not Verdict.BETTER or found.pairs < self.noise.min_pairs:
            return None
        rounds = self._pair_rounds()
        score = statistics.median_high(r.measured[self._leader.key] for r in rounds)
        if score == -math.inf:  # the leader missed its SLO or a gate in most repeats
            return None
        return Decision(
            candidate=self._leader,
            score=score,
            baseline_score=statistics.median_high(r.measured[self.baseline.key] for r in rounds),
            fidelity=self._confirm_fidelity,
            round=self.rounds.index(rounds[-1]),
            comparison=found,
        )


@dataclass(frozen=True)
class Decision:
    """The winner of a search and the round that decided it."""

    candidate: Candidate  #: the winning configuration
    score: float  #: its measured score in that round
    baseline_score: float  #: the baseline's measured score in the same round
    fidelity: int  #: the round's fidelity
    round: int  #: the round's index
    comparison: Comparison | None = None  #: the noise rule's verdict (None: decided without repeats)


def _beats(candidate: float, baseline: float, min_gain: float) -> bool:
    if baseline == -math.inf:
        return candidate > -math.inf
    return candidate - baseline > abs(baseline) * min_gain
